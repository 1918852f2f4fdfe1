"""Random chain verify (the rejection step), Triton, float64: one program per random request b.

    for i in 0 .. kappa_b - 1:
        x = draft_ids[d0 + i]
        x == -1 (padded):                     emit recovered[d0 + i]; stop    (a draw from p_i)
        coin[d0 + i] * q_i[x] < p_i[x]:      emit x; continue                (strict; q_i[x] = 1
                                                                               for a one-hot draft)
        else:                                 emit recovered[d0 + i]; stop    (the residual draw)
    all accepted:                             emit bonus[b]

`recovered` and `bonus` come from `recovered` and `bonus` (the same final coin:
only one of them is ever emitted). The test is coin * q < p, never a division, so a coin of 0.0
cannot accept a token with p = 0 and a coin of 1.0 (out of contract) accepts only where p > q.
Rows past the first rejection are never read.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..triton_common import CompileSpec


@triton.jit
def _chain_kernel(target_ptr, draft_ptr, draft_ids_ptr, num_draft_ptr, draft_start_ptr, row_start_ptr,
                  greedy_ptr, accept_ptr, recovered_ptr, bonus_ptr, out_ptr, stride_t, stride_q, stride_out,
                  HAS_Q: tl.constexpr):
    b = tl.program_id(0)
    if tl.load(greedy_ptr + b) == 0:
        n = tl.load(num_draft_ptr + b)
        d0 = tl.load(draft_start_ptr + b)
        r0 = tl.load(row_start_ptr + b)
        done = n < 0
        for i in range(n):
            if not done:
                d = d0 + i
                x = tl.load(draft_ids_ptr + d)
                xs = tl.maximum(x, 0)
                px = tl.load(target_ptr + (r0 + i).to(tl.int64) * stride_t + xs)
                if HAS_Q:
                    qx = tl.load(draft_ptr + d.to(tl.int64) * stride_q + xs)
                else:
                    qx = tl.full((), 1.0, tl.float64)
                accept = (x >= 0) & (tl.load(accept_ptr + d) * qx < px)
                token = tl.where(accept, x.to(tl.int64), tl.load(recovered_ptr + d))
                tl.store(out_ptr + b * stride_out + i, token)
                done = not accept
        if not done:
            tl.store(out_ptr + b * stride_out + n, tl.load(bonus_ptr + b))


def chain_verify(target, draft, draft_ids, num_draft, draft_start, row_start, greedy, accept, recovered, bonus,
                 out):
    """Launcher: device tensors; `draft` may be None (deterministic drafts). out int64 [B, L]."""
    b = num_draft.shape[0]
    has_q = draft is not None
    q = draft if has_q else target
    _chain_kernel[(b,)](target, q, draft_ids, num_draft, draft_start, row_start, greedy, accept, recovered,
                        bonus, out, target.stride(0), q.stride(0), out.stride(0), HAS_Q=has_q,
                        enable_fp_fusion=False)
    return out


COMPILE = (CompileSpec(
    "sampler_chain", _chain_kernel,
    {"target_ptr": "*fp64", "draft_ptr": "*fp64", "draft_ids_ptr": "*i32", "num_draft_ptr": "*i32",
     "draft_start_ptr": "*i32", "row_start_ptr": "*i32", "greedy_ptr": "*i32", "accept_ptr": "*fp64",
     "recovered_ptr": "*i64", "bonus_ptr": "*i64", "out_ptr": "*i64"}, dict(HAS_Q=True), fp_fusion=False),)
