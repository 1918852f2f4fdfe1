"""Batch-invariant Triton softmax / log_softmax over the last dim (fp32 arithmetic and output).

One program per row, the row read in chunks of BLOCK_V. Order for a row of length V:

    mx = max over the row                                    (exact, any order)
    acc[i] = 0; for v0 in 0, BLOCK_V, ..: acc[i] += exp(x[v0+i] - mx)   # in order; lanes past V add 0
    s = tl.sum(acc)                                          # a tree fixed by BLOCK_V
    softmax = exp(x - mx) / s;   log_softmax = (x - mx) - log(s)

A row's output depends on its own values and V only.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import CompileSpec

BLOCK_V = 1024


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, V, stride_x, stride_y, LOG: tl.constexpr, BLOCK_V: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_V)
    vmax = tl.full((BLOCK_V,), float("-inf"), tl.float32)
    for v0 in range(0, V, BLOCK_V):
        x = tl.load(x_ptr + row * stride_x + v0 + offs, mask=v0 + offs < V, other=float("-inf")).to(tl.float32)
        vmax = tl.maximum(vmax, x)
    mx = tl.max(vmax, axis=0)
    acc = tl.zeros((BLOCK_V,), dtype=tl.float32)
    for v0 in range(0, V, BLOCK_V):
        x = tl.load(x_ptr + row * stride_x + v0 + offs, mask=v0 + offs < V, other=float("-inf")).to(tl.float32)
        acc += tl.exp(x - mx)
    s = tl.sum(acc, axis=0)
    for v0 in range(0, V, BLOCK_V):
        mask = v0 + offs < V
        x = tl.load(x_ptr + row * stride_x + v0 + offs, mask=mask, other=0.0).to(tl.float32)
        if LOG:
            y = (x - mx) - tl.log(s)
        else:
            y = tl.div_rn(tl.exp(x - mx), s)
        tl.store(y_ptr + row * stride_y + v0 + offs, y, mask=mask)


def _launch(x, log: bool):
    import torch
    m, v = x.shape
    x = x if x.stride(1) == 1 else x.contiguous()
    y = torch.empty((m, v), dtype=torch.float32, device=x.device)
    if m and v:
        _softmax_kernel[(m,)](x, y, v, x.stride(0), y.stride(0), LOG=log, BLOCK_V=BLOCK_V)
    return y


def softmax(x):
    """Launcher: x [M, V] -> softmax rows [M, V] float32."""
    return _launch(x, False)


def log_softmax(x):
    """Launcher: x [M, V] -> log_softmax rows [M, V] float32."""
    return _launch(x, True)


COMPILE = (CompileSpec("log_softmax", _softmax_kernel, constexprs=dict(LOG=True, BLOCK_V=BLOCK_V)),
           CompileSpec("softmax", _softmax_kernel, constexprs=dict(LOG=False, BLOCK_V=BLOCK_V)))
