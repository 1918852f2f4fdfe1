"""vLLM 0.33.0, v1/sample/rejection_sampler.py::rejection_random_sample_kernel:
`accepted = draft_prob > 0 and target_prob / draft_prob >= uniform_prob`.

A uniform of exactly 0.0 accepts a drafted token that the target gives probability 0 (0 >= 0).
generate_uniform_probs draws float64 (the NOTE there explains why: float32 hit 0.0 too often), which
makes 0.0 rare (2**-53 per coin with torch's float64 rand) but the comparison is still the wrong way
round at the endpoint: the strict `target_prob / draft_prob > uniform_prob` (or uniform * q < p) is
exact for coins in [0, 1) and never accepts a p = 0 token. Runs on CPU: TRITON_INTERPRET=1.
"""
import os
os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
import torch
import vllm
import vllm.v1.sample.rejection_sampler as rs
from vllm.v1.sample.metadata import SamplingMetadata

print("vllm", vllm.__version__, "torch", torch.__version__)
p = torch.tensor([[0.0, 0.3, 0.2, 0.4, 0.1, 0.0]])    # target row at the draft position
q = torch.tensor([[0.4, 0.1, 0.1, 0.1, 0.1, 0.2]])    # draft row; token 0 drafted
rs.generate_uniform_probs = lambda n, *a: torch.zeros(n, dtype=torch.float64)   # the coin 0.0
md = SamplingMetadata(temperature=torch.ones(1), all_greedy=False, all_random=True, top_p=None, top_k=None,
                      generators={}, max_num_logprobs=None, no_penalties=True, prompt_token_ids=None,
                      frequency_penalties=None, presence_penalties=None, repetition_penalties=None,
                      output_token_ids=[], allowed_token_ids_mask=None, bad_words_token_ids={}, logitsprocs=None)
out = rs.rejection_sample(torch.tensor([0], dtype=torch.int32), [1], 1, torch.tensor([1], dtype=torch.int32),
                          q, torch.log(p), torch.tensor([[1]]), md)
print("coin 0.0: output_token_ids", out.tolist())
tok = int(out[0, 0])
print("target probability of the first emitted token:", float(p[0, tok]))
print("BUG - a token of target probability 0 was accepted" if float(p[0, tok]) == 0.0 else "ok")
