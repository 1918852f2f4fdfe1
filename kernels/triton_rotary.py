"""Triton rotary embedding, GGUF/llama.cpp "normal" layout (adjacent pairs). Elementwise (no
reduction), so batch-invariant by construction: one program per token, every head of it.

    inv_freq[i] = theta ** (-2i / Dh)            float64, computed on the host (Python's pow)
    ang = float64(pos) * inv_freq[i];  c, s = fp32(cos(ang)), fp32(sin(ang))     (float64 cos/sin)
    y[2i] = x[2i] * c - x[2i+1] * s;   y[2i+1] = x[2i] * s + x[2i+1] * c         (fp32, cast by torch)
"""

from __future__ import annotations

import triton
import triton.language as tl

from .cpu_rotary import inv_freq
from .triton_common import CompileSpec


@triton.jit
def _rotary_kernel(x_ptr, pos_ptr, freq_ptr, y_ptr, H, stride_xt, stride_xh, stride_yt, stride_yh,
                   HALF: tl.constexpr, BLOCK_H: tl.constexpr):
    t = tl.program_id(0)
    i = tl.arange(0, HALF)
    h = tl.arange(0, BLOCK_H)
    pos = tl.load(pos_ptr + t).to(tl.float64)
    ang = pos * tl.load(freq_ptr + i)
    c = tl.cos(ang).to(tl.float32)[None, :]
    s = tl.sin(ang).to(tl.float32)[None, :]
    mask = (h < H)[:, None]
    base = x_ptr + t * stride_xt + h[:, None] * stride_xh + 2 * i[None, :]
    x0 = tl.load(base, mask=mask, other=0.0).to(tl.float32)
    x1 = tl.load(base + 1, mask=mask, other=0.0).to(tl.float32)
    out = y_ptr + t * stride_yt + h[:, None] * stride_yh + 2 * i[None, :]
    tl.store(out, x0 * c - x1 * s, mask=mask)
    tl.store(out + 1, x0 * s + x1 * c, mask=mask)


def rotary(x, positions, theta: float):
    """Launcher: x [T, H, Dh] (last dim contiguous), positions int [T] -> [T, H, Dh] in x's dtype.
    Dh must be even, Dh/2 a power of two."""
    import torch
    t, h, dh = x.shape
    half = dh // 2
    if dh % 2 or half & (half - 1):
        raise ValueError(f"triton rotary: head dim {dh} needs Dh/2 a power of two")
    x = x if x.stride(2) == 1 else x.contiguous()
    y = torch.empty((t, h, dh), dtype=torch.float32, device=x.device)
    freq = torch.from_numpy(inv_freq(dh, theta)).to(x.device)
    if t:
        _rotary_kernel[(t,)](x, positions.to(torch.int64).contiguous(), freq, y, h, x.stride(0), x.stride(1),
                             y.stride(0), y.stride(1), HALF=half, BLOCK_H=triton.next_power_of_2(h))
    return y if x.dtype == torch.float32 else y.to(x.dtype)     # downcast in torch (RTNE)


COMPILE = (CompileSpec("rotary", _rotary_kernel, {"pos_ptr": "*i64", "freq_ptr": "*fp64"}, dict(HALF=32, BLOCK_H=16)),)
