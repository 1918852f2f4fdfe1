"""MLX-LM speculative decoding: the logits processors lose the prompt (all but its last token).

`speculative_generate_step` (mlx_lm/generate.py) keeps the token history it hands to each logits
processor in `prev_tokens`, which starts empty; its `_prefill` runs every prompt token but the last
through the models without adding them there. So a repetition penalty (or a presence / frequency
penalty) under speculation never sees the prompt's first len(prompt) - 1 tokens, while plain
`generate_step` hands the whole prompt + output to the same processor. The output law of speculative
decoding is then not the law of plain decoding with the same settings.

The same defect in plain `generate_step` was reported as ml-explore/mlx-lm issue #1773 ("generate_step()
omits prompt-prefill tokens from logits-processor history", closed): in 0.32.2 generate_step hands the
whole prompt, `speculative_generate_step` still drops it.

Shown twice on a tiny random Llama (mlx_lm's own Model class, float32):
1. a processor that records what it is given: plain sees [1, 2, 3], speculative sees [3];
2. the first token's law with repetition_penalty=2 (context 20, prompt [1, 2, 3]): exact from the
   model's logits with the whole prompt penalised (plain's rule) vs only the last token penalised,
   against 3000 seeded runs of each path (Pearson chi-squared).
"""
import math
from importlib.metadata import version

import mlx.core as mx
import numpy as np
from mlx_lm.generate import generate_step, speculative_generate_step
from mlx_lm.models.llama import Model, ModelArgs
from mlx_lm.sample_utils import make_repetition_penalty, make_sampler

print("mlx", mx.__version__, "mlx-lm", version("mlx-lm"), "device", mx.default_device())
V = 4
args = ModelArgs(model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                 num_attention_heads=2, num_key_value_heads=2, rms_norm_eps=1e-5, vocab_size=V,
                 tie_word_embeddings=False)
mx.random.seed(0)
target = Model(args)
draft = Model(args)                       # an independent random draft: any draft keeps the law exact
for m in (target, draft):                 # unit-gain weights so the logits depend on the prefix
    m.update(__import__("mlx.utils", fromlist=["tree_map"]).tree_map(
        lambda w: mx.random.normal(w.shape) / math.sqrt(w.shape[-1]) if w.ndim == 2 else w, m.parameters()))
mx.eval(target.parameters(), draft.parameters())
prompt = mx.array([1, 2, 3])

seen = []
def spy(tokens, logits):
    seen.append(tokens.tolist())
    return logits

seen.clear()
list(generate_step(prompt, target, max_tokens=1, logits_processors=[spy]))
print("plain generate_step: the processor's first history      ", seen[0])
seen.clear()
list(speculative_generate_step(prompt, target, draft, num_draft_tokens=2, max_tokens=1, logits_processors=[spy]))
print("speculative_generate_step: the histories, draft then target", seen,
      "(the target's first row is processed with", seen[1], ")")

r = 2.0
logits = np.array(target(prompt[None])[0, -1], np.float64)
def penalised(tokens):
    l = logits.copy()
    for t in set(tokens):
        l[t] = l[t] * r if l[t] < 0 else l[t] / r
    p = np.exp(l - l.max())
    return p / p.sum()
p_plain, p_last = penalised([1, 2, 3]), penalised([3])
print("exact first-token law, whole prompt penalised:", np.round(p_plain, 4))
print("exact first-token law, last token penalised:  ", np.round(p_last, 4))

N = 3000
sampler = make_sampler(temp=1.0)
procs = [make_repetition_penalty(r, 20)]
def counts(spec):
    c = np.zeros(V)
    for i in range(N):
        mx.random.seed(i)
        if spec:
            tok = next(speculative_generate_step(prompt, target, draft, num_draft_tokens=2, max_tokens=1,
                                                 sampler=sampler, logits_processors=procs))[0]
        else:
            tok = next(generate_step(prompt, target, max_tokens=1, sampler=sampler, logits_processors=procs))[0]
        c[int(tok)] += 1
    return c

def chi2(c, p):
    e = N * p
    stat = float(((c - e) ** 2 / e).sum())
    # survival of chi-squared with V-1 = 3 dof
    return stat, math.erfc(math.sqrt(stat / 2)) + math.sqrt(2 * stat / math.pi) * math.exp(-stat / 2)

for label, spec in (("plain", False), ("speculative", True)):
    c = counts(spec)
    s1, q1 = chi2(c, p_plain)
    s2, q2 = chi2(c, p_last)
    print(f"{label:12s} counts {c.astype(int).tolist()}: vs whole-prompt law chi2 {s1:8.1f} p {q1:.3g}; "
          f"vs last-token law chi2 {s2:8.1f} p {q2:.3g}")
