"""Batch-invariant Triton RMSNorm: y = x / sqrt(mean(x^2) + eps) * weight, fp32 arithmetic.

One program per row; the row is read in chunks of BLOCK_D. Reduction order of a row:

    acc[i] = 0 (fp32, BLOCK_D lanes)
    for d0 in 0, BLOCK_D, ..:  acc[i] += x[d0 + i]^2            # in order; lanes past D add 0
    ss = tl.sum(acc)                                             # a tree fixed by BLOCK_D
    inv = 1 / sqrt_rn(ss / D + eps)
    xhat[d] = x[d] * inv                                         # fp32, stored
    y = xhat.to(x dtype) * weight                                # in torch, like the default backend

Nothing depends on the other rows or on how many there are.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import CompileSpec

BLOCK_D = 1024


@triton.jit
def _rms_norm_kernel(x_ptr, y_ptr, D, stride_x, stride_y, eps, BLOCK_D: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_D)
    acc = tl.zeros((BLOCK_D,), dtype=tl.float32)
    for d0 in range(0, D, BLOCK_D):
        x = tl.load(x_ptr + row * stride_x + d0 + offs, mask=d0 + offs < D, other=0.0).to(tl.float32)
        acc += x * x
    ss = tl.sum(acc, axis=0)
    inv = tl.div_rn(1.0, tl.sqrt_rn(tl.div_rn(ss, D.to(tl.float32)) + eps))
    for d0 in range(0, D, BLOCK_D):
        mask = d0 + offs < D
        x = tl.load(x_ptr + row * stride_x + d0 + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_ptr + row * stride_y + d0 + offs, x * inv, mask=mask)


def rms_norm(x, weight, eps: float):
    """Launcher: x [M, D] (rows may be strided), weight [D] -> [M, D] in x's dtype."""
    import torch
    m, d = x.shape
    x = x if x.stride(1) == 1 else x.contiguous()
    xhat = torch.empty((m, d), dtype=torch.float32, device=x.device)
    if m:
        _rms_norm_kernel[(m,)](x, xhat, d, x.stride(0), xhat.stride(0), float(eps), BLOCK_D=BLOCK_D)
    if x.dtype == torch.float32 and weight.dtype == torch.float32:
        return xhat * weight
    return xhat.to(x.dtype) * weight


COMPILE = (CompileSpec("rms_norm", _rms_norm_kernel, {"eps": "fp32"}, dict(BLOCK_D=BLOCK_D)),)
