"""SGLang 0.5.23, kernels/ops/speculative/reject_sampling.py::speculative_sampling_classic_kernel:
all-zero residual.

The kernel's own comment: "Degenerate residual (norm_sum == 0, i.e. p == q everywhere on rejection)
leaves the cumsum at 0 <= target_u, so final_token falls back to VOCAB_SIZE - 1; acceptable since this
case is numerically near-impossible." It is reachable with in-contract float32 coins whenever p <= q
everywhere and p(x) < q(x) at the draft -- a draft row whose float32 softmax sums to 1 + 2**-24 (a
draft model that is, or nearly is, the target). Token V - 1 is then emitted even when its target
probability is 0 (at V = 4 and at V = 262,144 alike: token V - 1). An exact rule falls back to p.
Runs on CPU: TRITON_INTERPRET=1.
"""
import os
os.environ.setdefault("TRITON_INTERPRET", "1")
import importlib.metadata
import torch
from sglang.kernels.ops.speculative.reject_sampling import chain_speculative_sampling_triton

print("sglang", importlib.metadata.version("sglang"), "torch", torch.__version__)
coin = 1.0 - 2.0**-24                                            # the largest float32 below 1 (in contract)
for vocab in (4, 262144):                                        # a toy vocabulary and a real one (Gemma's)
    p = torch.zeros(vocab)
    p[1] = p[2] = 0.5
    q = p.clone()
    q[1] = 0.5 + 2.0**-24                                        # float32-exact, sums to 1 + 2**-24
    for block in (False, True):
        predicts = torch.full((2,), -1, dtype=torch.int32)
        accept_index = torch.full((1, 2), -1, dtype=torch.int32)
        accept_num = torch.zeros(1, dtype=torch.int32)
        chain_speculative_sampling_triton(
            predicts, accept_index, accept_num,
            torch.tensor([[0, 1]]),                      # candidates: slot 0 = last verified token, draft = 1
            torch.tensor([[0, 1]]),                      # retrive_index
            torch.full((1, 2), -1), torch.full((1, 2), -1),
            torch.tensor([[coin]], dtype=torch.float32),  # accept coin
            torch.tensor([0.5], dtype=torch.float32),     # final coin
            torch.stack([p, p])[None], q[None, None], 1.0, 1.0, True, block_verification=block)
        emitted = predicts[accept_index[0, : int(accept_num[0]) + 1].long()].tolist()
        print(f"V={vocab} block_verification={block}: accepted", int(accept_num[0]), "emitted", emitted,
              "- target probability:", [float(p[t]) for t in emitted],
              "BUG - a token of target probability 0 was emitted" if any(float(p[t]) == 0.0 for t in emitted) else "ok")
