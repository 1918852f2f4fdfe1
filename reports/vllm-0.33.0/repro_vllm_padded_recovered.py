"""vLLM 0.33.0, v1/sample/rejection_sampler.py::sample_recovered_tokens_kernel with draft_probs given.

A draft id of -1 (padding: e.g. a draft token invalidated by structured output) is always rejected by
rejection_random_sample_kernel, and the token emitted there is the "recovered" token. With draft
probs, the recovered kernel ignores the -1 and draws from max(0, p - q) -- the residual of a draft
that was never proposed -- instead of from p. (The NO_DRAFT_PROBS branch masks `vocab_offset !=
draft_token_id`, which for -1 masks nothing: that branch draws from p, correctly. vLLM's model runner
v2, worker/gpu/spec_decode/rejection_sampler_utils.py::_resample_kernel, also uses p for a -1.)
Here p = uniform over 4 tokens, q = [.7, .1, .1, .1]: token 0 (p = 1/4) is never emitted.
"""
import os
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import torch
import vllm
import vllm.v1.sample.rejection_sampler as rs
from vllm.v1.sample.metadata import SamplingMetadata

print("vllm", vllm.__version__, "torch", torch.__version__)
torch.manual_seed(0)
n, V = 400, 4
p = torch.full((n, V), 0.25)
q = torch.tensor([[0.7, 0.1, 0.1, 0.1]]).repeat(n, 1)
md = SamplingMetadata(temperature=torch.ones(n), all_greedy=False, all_random=True, top_p=None, top_k=None,
                      generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
                      frequency_penalties=None, presence_penalties=None, repetition_penalties=None,
                      output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=None)
draft_ids = torch.full((n,), -1, dtype=torch.int32)            # every request: one padded draft
cu = torch.arange(1, n + 1, dtype=torch.int32)
for label, draft_probs in (("draft_probs given", q), ("draft_probs None", None)):
    out = rs.rejection_sample(draft_ids, [1] * n, 1, cu, draft_probs, torch.log(p), torch.zeros(n, 1, dtype=torch.int64), md)
    counts = torch.bincount(out[:, 0].long(), minlength=V).tolist()
    print(f"{label}: emitted token counts {counts}  (a draw from p expects {[n // V] * V})")
print("BUG - with draft_probs, token 0 (p = 0.25) is never emitted at a padded position")
