"""transformers 5.x, generation/utils.py::_speculative_sampling: `is_accepted = r_i <= probability_ratio`.

A coin of exactly 0.0 accepts a drafted token that the target gives probability 0 (ratio 0 <= 0).
torch.rand_like (float32) returns exactly 0.0 with probability 2**-24 per coin, so a draft token
outside the target's support (e.g. removed by the target's top-k/top-p, or a -inf logit) is emitted
about once in 17 million such drafts. The strict test `r_i < probability_ratio` (or
`r_i * q_i < p_i`) never accepts it.
"""
import torch
import transformers
from transformers.generation.utils import _speculative_sampling

print("transformers", transformers.__version__, "torch", torch.__version__)
V = 6
p = torch.tensor([0.0, 0.3, 0.2, 0.4, 0.1, 0.0])      # target: token 0 has probability 0
q = torch.tensor([0.4, 0.1, 0.1, 0.1, 0.1, 0.2])      # assistant proposes token 0
new_logits = torch.log(torch.stack([p, p]))[None]     # [1, kappa + 1, V]
candidate_logits = torch.log(q)[None, None]            # [1, kappa, V]
candidate_input_ids = torch.tensor([[0]])              # the drafted token: 0

real_rand_like = torch.rand_like
torch.rand_like = lambda x, *a, **k: torch.zeros_like(x)   # the coin torch.rand returns 1 in 2**24 times
try:
    tokens, n_matches = _speculative_sampling(candidate_input_ids, candidate_logits, 1, new_logits)
finally:
    torch.rand_like = real_rand_like
print("coin 0.0: emitted", tokens.tolist(), "n_matches", int(n_matches))
print("target probability of the first emitted token:", float(p[tokens[0, 0]]))
print("BUG" if float(p[tokens[0, 0]]) == 0.0 else "ok", "- a token of target probability 0 was accepted" if float(p[tokens[0, 0]]) == 0.0 else "")
