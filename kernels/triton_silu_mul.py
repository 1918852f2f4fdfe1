"""Triton SwiGLU gate y = silu(gate) * up, elementwise in fp32 (no reduction, so batch-invariant
by construction: every element goes through the same instructions, there is no vector/remainder
split). Program (row, column block of BLOCK_F).

    y = (g / (1 + exp(-g))) * up          (fp32; a bf16/fp16 result is cast by torch, RTNE)
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import CompileSpec

BLOCK_F = 1024


@triton.jit
def _silu_mul_kernel(g_ptr, u_ptr, y_ptr, F, stride_g, stride_u, stride_y, BLOCK_F: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.program_id(1) * BLOCK_F + tl.arange(0, BLOCK_F)
    mask = offs < F
    g = tl.load(g_ptr + row * stride_g + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(u_ptr + row * stride_u + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.div_rn(g, 1.0 + tl.exp(-g)) * u
    tl.store(y_ptr + row * stride_y + offs, y, mask=mask)


def silu_mul(gate, up):
    """Launcher: gate, up [M, F] (rows may be strided) -> [M, F] in gate's dtype."""
    import torch
    m, f = gate.shape
    gate = gate if gate.stride(1) == 1 else gate.contiguous()
    up = up if up.stride(1) == 1 else up.contiguous()
    y = torch.empty((m, f), dtype=torch.float32, device=gate.device)
    if m and f:
        _silu_mul_kernel[(m, triton.cdiv(f, BLOCK_F))](gate, up, y, f, gate.stride(0), up.stride(0), y.stride(0),
                                                       BLOCK_F=BLOCK_F)
    return y if gate.dtype == torch.float32 else y.to(gate.dtype)     # downcast in torch (RTNE)


COMPILE = (CompileSpec("silu_mul", _silu_mul_kernel, constexprs=dict(BLOCK_F=BLOCK_F)),)
