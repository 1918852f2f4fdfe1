"""MLX-LM speculative decoding with the target as its own draft: drafts are rejected (sample-match).

`speculative_generate_step` (mlx_lm/generate.py) verifies by sampling: the target samples every one of
the num_draft + 1 positions with the user's sampler, and a draft token is kept while it *equals* the
target's sample (`if tn != dtn: break`). No draft probabilities enter: it is not the chain rule
(accept x with probability min(1, p(x)/q(x))). Every emitted token is a target sample, so the output
law is exact; the price is acceptance. With draft = target, the chain rule accepts every draft; sample
match accepts the first draft with probability sum_x p(x)^2 (two independent draws from p agree).

Measured here on a tiny random Llama (mlx_lm's own Model class, float32), prompt [1, 2], temperature
0.7, top-k 3: the fraction of runs whose first draft is accepted (its `from_draft` flag) over 3000
seeded runs, against sum_x p(x)^2 of the transformed first-token law and against 1.
"""
import math
from importlib.metadata import version

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map
from mlx_lm.generate import speculative_generate_step
from mlx_lm.models.llama import Model, ModelArgs
from mlx_lm.sample_utils import make_sampler

print("mlx", mx.__version__, "mlx-lm", version("mlx-lm"), "device", mx.default_device())
V = 4
args = ModelArgs(model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                 num_attention_heads=2, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=V,
                 tie_word_embeddings=False)
mx.random.seed(0)
model = Model(args)
model.update(tree_map(lambda w: mx.random.normal(w.shape) / math.sqrt(w.shape[-1]) if w.ndim == 2 else w,
                      model.parameters()))
mx.eval(model.parameters())
prompt = mx.array([1, 2])
T, K = 0.7, 3

l = np.array(model(prompt[None])[0, -1], np.float64) / T
l[np.argsort(-l)[K:]] = -np.inf
p = np.exp(l - l.max())
p /= p.sum()
agree = float((p ** 2).sum())
print(f"first-token law (temperature {T}, top-k {K}):", np.round(p, 4), f"sum p^2 = {agree:.4f}")

N = 3000
sampler = make_sampler(temp=T, top_k=K)
first = 0
for i in range(N):
    mx.random.seed(i)
    _, _, from_draft = next(speculative_generate_step(prompt, model, model, num_draft_tokens=2, max_tokens=4,
                                                      sampler=sampler))
    first += bool(from_draft)
rate = first / N
sd = math.sqrt(agree * (1 - agree) / N)
print(f"first draft accepted in {first} of {N} runs: {rate:.4f} (sample-match predicts {agree:.4f} +- {sd:.4f}; "
      f"z = {(rate - agree) / sd:+.2f}); the chain rule accepts all {N}")
