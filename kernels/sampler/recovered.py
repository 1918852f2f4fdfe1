"""Recovered-token sampling, Triton, float64: one program per draft position d (of a random,
non-greedy request b), the token that position would emit if its draft were rejected:

    x = draft_ids[d];  p = target row of d;  q = draft row of d (or none: one-hot at x)
    x == -1 (padded)      ->  draw(p, final_coin[b])
    q given               ->  w = max(p - q, 0)
    deterministic draft   ->  w = p with w[x] = 0
    w all zero (p <= q everywhere: only when p == q up to rounding)  ->  w = p
    recovered[d] = draw(w, final_coin[b])

(`reference.sampling.residual` and `draw`; draw: `draw.py`.) The final coin is the request's:
whichever of its draws happens uses it, exactly as the reference does.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..triton_common import CompileSpec
from .draw import MODE_DETERMINISTIC, MODE_RESIDUAL, MODE_TARGET, draw, total_weight


@triton.jit
def _recovered_kernel(target_ptr, draft_ptr, draft_ids_ptr, req_ptr, local_ptr, row_start_ptr, greedy_ptr,
                      final_ptr, out_ptr, V, stride_t, stride_q, HAS_Q: tl.constexpr):
    d = tl.program_id(0)
    b = tl.load(req_ptr + d)
    if tl.load(greedy_ptr + b) == 0:
        x = tl.load(draft_ids_ptr + d)
        p_ptr = target_ptr + (tl.load(row_start_ptr + b) + tl.load(local_ptr + d)).to(tl.int64) * stride_t
        q_ptr = draft_ptr + d.to(tl.int64) * stride_q
        if HAS_Q:
            mode = tl.full((), MODE_RESIDUAL, tl.int32)
        else:
            mode = tl.full((), MODE_DETERMINISTIC, tl.int32)
        mode = tl.where(x < 0, MODE_TARGET, mode)
        z, last = total_weight(p_ptr, q_ptr, x, V, mode)
        mode = tl.where(z > 0, mode, MODE_TARGET)                 # residual fallback: the target row
        token = draw(p_ptr, q_ptr, x, V, tl.load(final_ptr + b), mode)
        tl.store(out_ptr + d, token.to(tl.int64))


def recovered_tokens(target, draft, draft_ids, req, local, row_start, greedy, final, out):
    """Launcher: device tensors; `draft` may be None (deterministic drafts). out int64 [num_draft]."""
    n = draft_ids.shape[0]
    if n == 0:
        return out
    has_q = draft is not None
    q = draft if has_q else target
    _recovered_kernel[(n,)](target, q, draft_ids, req, local, row_start, greedy, final, out,
                            target.shape[1], target.stride(0), q.stride(0), HAS_Q=has_q,
                            enable_fp_fusion=False)
    return out


COMPILE = (CompileSpec(
    "sampler_recovered", _recovered_kernel,
    {"target_ptr": "*fp64", "draft_ptr": "*fp64", "draft_ids_ptr": "*i32", "req_ptr": "*i32", "local_ptr": "*i32",
     "row_start_ptr": "*i32", "greedy_ptr": "*i32", "final_ptr": "*fp64", "out_ptr": "*i64"}, dict(HAS_Q=True),
    fp_fusion=False),)
