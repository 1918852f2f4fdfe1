"""transformers 5.x, generation/utils.py::_speculative_sampling: all-zero residual.

After a rejection the residual is `clamp(p - q, min=0)` divided by its sum. When p <= q everywhere
with p(x) < q(x) at the draft (float32 rounding between two nearly identical models), the sum is 0:
0/0 gives NaN and torch.multinomial raises. transformers only falls back to p for the ensemble mode
(`assistant_ensemble_weight`); the comment says standard SD "keeps its original behavior".
"""
import torch
import transformers
from transformers.generation.utils import _speculative_sampling

print("transformers", transformers.__version__, "torch", torch.__version__)
# two logit rows 1-2 ulp apart (the target and the same model as assistant, another batch shape):
# their float32 softmaxes satisfy q >= p everywhere, q > p at token 0
target_row = torch.tensor([0.8395664095878601, 1.0999702215194702, -0.08768881112337112])
draft_row = torch.tensor([0.8395665884017944, 1.0999702215194702, -0.08768880367279053])
new_logits = torch.stack([target_row, target_row])[None]      # [1, kappa + 1, V]
candidate_logits = draft_row[None, None]                       # [1, kappa, V]
P, Q = new_logits.softmax(-1)[0, 0], candidate_logits.softmax(-1)[0, 0]
print("softmax p", P.tolist(), "softmax q", Q.tolist(), "p0/q0", float(P[0] / Q[0]), "residual", torch.clamp(P - Q, min=0).tolist())
real = torch.rand_like
torch.rand_like = lambda x, *a, **k: torch.full_like(x, 1.0 - 2.0**-24)
try:
    tokens, n = _speculative_sampling(torch.tensor([[0]]), candidate_logits, 1, new_logits)
    print("emitted", tokens.tolist(), "n_matches", int(n))
except RuntimeError as exc:
    print("BUG - _speculative_sampling raised:", type(exc).__name__, str(exc).splitlines()[0])
finally:
    torch.rand_like = real
