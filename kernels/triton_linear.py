"""Batch-invariant Triton matmul: y[M, N] = x[M, K] @ w[N, K].T, fp32 accumulation.

Inputs fp32, bf16 or fp16 (x and w the same dtype); y has x's dtype. fp32 inputs are multiplied in
IEEE fp32 (input_precision="ieee": no TF32).

Tiles are fixed: BLOCK_M x BLOCK_N outputs per program, whatever M, N, K (no autotuning, no
split-K). Reduction order of every output element:

    acc = 0 (fp32)
    for k0 in 0, BLOCK_K, 2 BLOCK_K, ..:               # in order, one program owns the element
        acc = dot(x[m, k0:k0+BLOCK_K], w[n, k0:k0+BLOCK_K]) + acc     # one tl.dot of fixed shape
    y[m, n] = acc                                        # fp32; the launcher casts (torch, RTNE)

Inside a tile, on a GPU, tl.dot reduces the BLOCK_K products in an order fixed by the tile shape
and the MMA instruction, and rows of a tile do not mix. Under TRITON_INTERPRET=1 tl.dot is NumPy's
matmul of the block, whose BLAS gives a row other bits at another row position of the tile
(measured: OpenBLAS here), so the interpreter path (SUM_DOT) spells the tile product out instead:
tl.sum(a[:, :, None] * b[None, :, :], axis=1) -- rounded fp32 products summed in k order by NumPy,
the same for every row (bf16/fp16 tiles are widened to fp32 first, exactly). Out-of-range rows and
k are loaded as 0 and contribute exact zeros. So a row's bits depend on its own data, K and the
tile sizes only -- not on M, on the other rows, or on where the row sits (the tests check every
position 0..BLOCK_M-1 under the interpreter; `kerneltools/gpu_check.py` checks the MMA path on a GPU).
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import CompileSpec, interpreting

BLOCK_M = 16
BLOCK_N = 32
BLOCK_K = 32


@triton.jit
def _linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K,
                   stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   IEEE: tl.constexpr, SUM_DOT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :] * stride_xk,
                    mask=(offs_m[:, None] < M) & (kk[None, :] < K), other=0.0)          # [BM, BK]
        b = tl.load(w_ptr + offs_n[None, :] * stride_wn + kk[:, None] * stride_wk,
                    mask=(offs_n[None, :] < N) & (kk[:, None] < K), other=0.0)          # [BK, BN]
        if SUM_DOT:
            prod = a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :]       # [BM, BK, BN]
            acc = acc + tl.sum(prod, axis=1)
        elif IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :] * stride_yn, acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def linear(x, w):
    """Launcher: x [M, K], w [N, K] (any strides, same dtype) -> y [M, N] in x's dtype."""
    import torch
    m, k = x.shape
    n = w.shape[0]
    y = torch.empty((m, n), dtype=torch.float32, device=x.device)
    if m == 0 or n == 0:
        return y.to(x.dtype)
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
    _linear_kernel[grid](x, w, y, m, n, k, x.stride(0), x.stride(1), w.stride(0), w.stride(1),
                         y.stride(0), y.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                         IEEE=x.dtype == torch.float32, SUM_DOT=interpreting())
    # downcasts happen in torch (round to nearest even): the interpreter's in-kernel fp32 -> bf16
    # conversion truncates, which would make the interpreter and a GPU disagree
    return y if x.dtype == torch.float32 else y.to(x.dtype)


COMPILE = (
    CompileSpec("linear[fp32]", _linear_kernel,
                constexprs=dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=True, SUM_DOT=False)),
    CompileSpec("linear[bf16]", _linear_kernel, {"x_ptr": "*bf16", "w_ptr": "*bf16"},
                dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, IEEE=False, SUM_DOT=False)),
)
