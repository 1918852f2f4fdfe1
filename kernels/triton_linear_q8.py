"""Batch-invariant Triton linear on GGUF Q4_1 and Q8_0 blocks with 8-bit activations: the Triton
version of `cpu_linear_q8`. y[M, N] ~ x[M, K] @ W[N, K].T, x rounded per row to int8 blocks of 32 first
(`quant.quantize_activations`, torch elementwise ops and an exact max: each row alone).

One program per (BLOCK_M x BLOCK_N) tile; BLOCK_K = 32 = one block of x and of W, so a k-step
carries one dx, sx per row and one d, m per column:

    acc = 0 (fp32)
    for k0 in 0, 32, 64, ..:                                      # blocks in order
        isum[m, n] = sum_k qx[m, k] * q[n, k]                      # int32, exact (tl.dot int8 -> int32
                                                                  #  on a GPU, a product-sum when
                                                                  #  interpreted: the same integers)
        acc = acc + ((d[n] * dx[m]) * float(isum) + m[n] * sx[m])  # fp32 (Q8_0: no m term)
    y[m, n] = acc

Every element runs this one sequence whatever the tile it lands in or M (the same code for all
programs; a masked row or column is computed and dropped), so a row's bits do not depend on the
launch. On a GPU the compiler may fuse the multiply-adds; that changes the bits against the CPU
kernel, not the row independence. Interpreted (numpy, no FMA) it equals the numba kernel bit for
bit (tests/test_kernels_q8.py), both block types.

Layout: `triton_linear_q.pack`'s (q [N, K]: Q4_1 uint8 nibbles unpacked, Q8_0 int8; d and m
float32 [N, K/32]), shared on the weight.
"""

from __future__ import annotations

import triton
import triton.language as tl

from . import triton_linear_q
from .quant import BLOCK, Q4_1, quantize_activations
from .triton_common import CompileSpec, interpreting

BLOCK_M = 16
BLOCK_N = 32
BLOCK_K = BLOCK


@triton.jit
def _linear_q8_kernel(qx_ptr, dx_ptr, sx_ptr, q_ptr, d_ptr, m_ptr, y_ptr, M, N, K, stride_ym,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      SUM_DOT: tl.constexpr, HAS_MIN: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    n_blocks = K // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        b = k0 // BLOCK_K
        a = tl.load(qx_ptr + offs_m[:, None] * K + kk[None, :], mask=offs_m[:, None] < M, other=0)   # [BM, BK] i8
        w = tl.load(q_ptr + offs_n[None, :] * K + kk[:, None], mask=offs_n[None, :] < N, other=0)    # [BK, BN] u8 / i8
        if SUM_DOT:
            isum = tl.sum(a.to(tl.int32)[:, :, None] * w.to(tl.int32)[None, :, :], axis=1)          # [BM, BN]
        else:
            isum = tl.dot(a, w.to(tl.int8), out_dtype=tl.int32)
        dx = tl.load(dx_ptr + offs_m * n_blocks + b, mask=offs_m < M, other=0.0)                     # [BM]
        d = tl.load(d_ptr + offs_n * n_blocks + b, mask=offs_n < N, other=0.0)                       # [BN]
        if HAS_MIN:
            sx = tl.load(sx_ptr + offs_m * n_blocks + b, mask=offs_m < M, other=0.0)
            mn = tl.load(m_ptr + offs_n * n_blocks + b, mask=offs_n < N, other=0.0)
            acc = acc + ((d[None, :] * dx[:, None]) * isum.to(tl.float32) + mn[None, :] * sx[:, None])
        else:
            acc = acc + (d[None, :] * dx[:, None]) * isum.to(tl.float32)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear(x, weight):
    """Launcher: x [M, K] float32, weight a QuantizedWeight (Q4_1 or Q8_0) -> y [M, N] float32."""
    import torch
    q, d, mins = weight.packed(("triton", str(x.device)), lambda: triton_linear_q.pack(weight, x.device))
    m, k = x.shape
    if k != weight.k:
        raise ValueError(f"linear: x has {k} columns, the weight {weight.k}")
    n = weight.n
    y = torch.empty((m, n), dtype=torch.float32, device=x.device)
    if m == 0:
        return y
    qx, dx, sx = quantize_activations(x.float())
    qx, dx, sx = qx.contiguous(), dx.contiguous(), sx.contiguous()
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
    _linear_q8_kernel[grid](qx, dx, sx, q, d, mins, y, m, n, k, y.stride(0),
                            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SUM_DOT=interpreting(),
                            HAS_MIN=weight.kind == Q4_1)
    return y


COMPILE = (
    CompileSpec("linear_q8[q4_1]", _linear_q8_kernel, {"qx_ptr": "*i8", "q_ptr": "*u8"},
                dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SUM_DOT=False, HAS_MIN=True)),
    CompileSpec("linear_q8[q8_0]", _linear_q8_kernel, {"qx_ptr": "*i8", "q_ptr": "*i8"},
                dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, SUM_DOT=False, HAS_MIN=False)),
)
