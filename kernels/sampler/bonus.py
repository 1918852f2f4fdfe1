"""Bonus-token sampling, Triton, float64: one program per random (non-greedy) request b,

    bonus[b] = draw(p_{kappa_b}, final_coin[b])        # the request's last (bonus) target row

(`reference.sampling.draw`, implemented in `draw`). A request with no drafts emits exactly
this token.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..triton_common import CompileSpec
from .draw import MODE_TARGET, draw


@triton.jit
def _bonus_kernel(target_ptr, num_draft_ptr, row_start_ptr, greedy_ptr, final_ptr, out_ptr, V, stride_t):
    b = tl.program_id(0)
    if tl.load(greedy_ptr + b) == 0:
        row = tl.load(row_start_ptr + b) + tl.load(num_draft_ptr + b)
        p_ptr = target_ptr + row.to(tl.int64) * stride_t
        mode = tl.full((), MODE_TARGET, tl.int32)
        token = draw(p_ptr, p_ptr, -1, V, tl.load(final_ptr + b), mode)
        tl.store(out_ptr + b, token.to(tl.int64))


def bonus_tokens(target, num_draft, row_start, greedy, final, out):
    """Launcher: device tensors; out int64 [B]."""
    b = num_draft.shape[0]
    _bonus_kernel[(b,)](target, num_draft, row_start, greedy, final, out, target.shape[1], target.stride(0),
                        enable_fp_fusion=False)
    return out


COMPILE = (CompileSpec(
    "sampler_bonus", _bonus_kernel,
    {"target_ptr": "*fp64", "num_draft_ptr": "*i32", "row_start_ptr": "*i32", "greedy_ptr": "*i32",
     "final_ptr": "*fp64", "out_ptr": "*i64"}, fp_fusion=False),)
