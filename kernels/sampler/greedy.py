"""Greedy verify (temperature 0), Triton, float64 rows: one program per request.

    for i in 0 .. kappa_b - 1:   a = argmax p_i (lowest index on ties); emit a; stop if x_i != a
    if all accepted:             emit argmax p_kappa (the bonus)

Rows and layout: `reference.batch` (request b's draft rows start at row_start[b], its drafts at
draft_start[b]). Non-greedy requests are skipped (their output row is left as it is). No coins.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..triton_common import CompileSpec
from .draw import argmax_row

BLOCK_V = 1024


@triton.jit
def _greedy_kernel(target_ptr, draft_ids_ptr, num_draft_ptr, draft_start_ptr, row_start_ptr, greedy_ptr,
                   out_ptr, V, stride_t, stride_out, BLOCK_V: tl.constexpr):
    b = tl.program_id(0)
    if tl.load(greedy_ptr + b) != 0:
        n = tl.load(num_draft_ptr + b)
        d0 = tl.load(draft_start_ptr + b)
        r0 = tl.load(row_start_ptr + b)
        done = n < 0
        for i in range(n):
            if not done:
                a = argmax_row(target_ptr + (r0 + i).to(tl.int64) * stride_t, V, BLOCK_V)
                tl.store(out_ptr + b * stride_out + i, a.to(tl.int64))
                done = tl.load(draft_ids_ptr + d0 + i) != a
        if not done:
            a = argmax_row(target_ptr + (r0 + n).to(tl.int64) * stride_t, V, BLOCK_V)
            tl.store(out_ptr + b * stride_out + n, a.to(tl.int64))


def greedy_verify(target, draft_ids, num_draft, draft_start, row_start, greedy, out):
    """Launcher: device tensors (target float64 [rows, V]; int32 metadata; out int64 [B, L])."""
    b = num_draft.shape[0]
    _greedy_kernel[(b,)](target, draft_ids, num_draft, draft_start, row_start, greedy, out,
                         target.shape[1], target.stride(0), out.stride(0), BLOCK_V=BLOCK_V,
                         enable_fp_fusion=False)
    return out


COMPILE = (CompileSpec(
    "sampler_greedy", _greedy_kernel,
    {"target_ptr": "*fp64", "draft_ids_ptr": "*i32", "num_draft_ptr": "*i32", "draft_start_ptr": "*i32",
     "row_start_ptr": "*i32", "greedy_ptr": "*i32", "out_ptr": "*i64"}, dict(BLOCK_V=BLOCK_V), fp_fusion=False),)
