"""Batch-invariant Triton matmul on GGUF blocks: y[M, N] = x[M, K] @ W[N, K].T, W in Q4_1 or Q8_0
(`kernels/quant.py`), fp32 x, fp32 accumulation, dequantized in registers.

Same tiles and the same reduction order as `triton_linear` (BLOCK_K = 32 = one GGUF block, so a
k-tile carries exactly one scale, and minimum, per output column):

    acc = 0 (fp32)
    for k0 in 0, 32, 64, ..:                                   # in order, one program per element
        w[k, n] = d[n, k0/32] * q[n, k] + m[n, k0/32]           # fp32; Q8_0: m = 0
        acc = dot(x[m, k0:k0+32], w[k0:k0+32, n]) + acc         # one tl.dot of fixed shape
    y[m, n] = acc

d * q is exact in fp32 (an fp16 scale times a 4- or 8-bit integer), so w is the value
`gguf.quants.dequantize` gives whether or not the compiler fuses the multiply-add: the tile w is
`triton_linear`'s tile of the fp32-dequantized matrix, bit for bit, and y equals that kernel's.
Under TRITON_INTERPRET=1 the tile product is spelled out (SUM_DOT), as in `triton_linear`.

Layout (built once per weight from its blocks by `pack`, kept on the weight): q uint8 or int8
[N, K] (Q4_1 nibbles unpacked to one byte each: 1.25 bytes per weight with the scales; a packed
nibble layout would halve the GPU's bytes and is not written yet), d and m float32 [N, K/32].
"""

from __future__ import annotations

import triton
import triton.language as tl

from .quant import BLOCK, Q4_1
from .triton_common import CompileSpec, interpreting

BLOCK_M = 16
BLOCK_N = 32
BLOCK_K = BLOCK


@triton.jit
def _linear_q_kernel(x_ptr, q_ptr, d_ptr, m_ptr, y_ptr, M, N, K,
                     stride_xm, stride_ym,
                     BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                     HAS_MIN: tl.constexpr, SUM_DOT: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    n_blocks = K // BLOCK_K
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + offs_k
        a = tl.load(x_ptr + offs_m[:, None] * stride_xm + kk[None, :],
                    mask=offs_m[:, None] < M, other=0.0)                                   # [BM, BK]
        q = tl.load(q_ptr + offs_n[None, :] * K + kk[:, None],
                    mask=offs_n[None, :] < N, other=0).to(tl.int32).to(tl.float32)         # [BK, BN]
        d = tl.load(d_ptr + offs_n * n_blocks + k0 // BLOCK_K, mask=offs_n < N, other=0.0)  # [BN]
        w = d[None, :] * q
        if HAS_MIN:
            w = w + tl.load(m_ptr + offs_n * n_blocks + k0 // BLOCK_K, mask=offs_n < N, other=0.0)[None, :]
        if SUM_DOT:
            acc = acc + tl.sum(a[:, :, None] * w[None, :, :], axis=1)
        else:
            acc = tl.dot(a, w, acc, input_precision="ieee")
    tl.store(y_ptr + offs_m[:, None] * stride_ym + offs_n[None, :], acc,
             mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def pack(weight, device="cpu") -> tuple:
    """(q, d, m) torch tensors of a QuantizedWeight in this kernel's layout (m = d for Q8_0, unused)."""
    import torch
    q = torch.from_numpy(weight.q().copy()).to(device)
    d = torch.from_numpy(weight.d).to(device)
    m = torch.from_numpy(weight.m).to(device) if weight.kind == Q4_1 else d
    return q, d, m


def linear(x, weight):
    """Launcher: x [M, K] float32 (rows contiguous), weight a QuantizedWeight -> y [M, N] float32."""
    import torch
    q, d, mins = weight.packed(("triton", str(x.device)), lambda: pack(weight, x.device))
    x = x.float()
    if x.stride(1) != 1:
        x = x.contiguous()
    m, k = x.shape
    if k != weight.k:
        raise ValueError(f"linear: x has {k} columns, the weight {weight.k}")
    n = weight.n
    y = torch.empty((m, n), dtype=torch.float32, device=x.device)
    if m == 0:
        return y
    grid = (triton.cdiv(m, BLOCK_M), triton.cdiv(n, BLOCK_N))
    _linear_q_kernel[grid](x, q, d, mins, y, m, n, k, x.stride(0), y.stride(0),
                           BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                           HAS_MIN=weight.kind == Q4_1, SUM_DOT=interpreting())
    return y


COMPILE = (
    CompileSpec("linear[q4_1]", _linear_q_kernel, {"q_ptr": "*u8"},
                dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, HAS_MIN=True, SUM_DOT=False)),
    CompileSpec("linear[q8_0]", _linear_q_kernel, {"q_ptr": "*i8"},
                dict(BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, HAS_MIN=False, SUM_DOT=False)),
)
