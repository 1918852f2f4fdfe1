"""Batch-invariant CPU linear on GGUF blocks (numba): y[M, N] = x[M, K] @ W[N, K].T with W in
Q4_1 or Q8_0 blocks (`kernels/quant.py`), dequantized in registers, fp32 accumulation.

Reduction order: exactly `cpu_linear`'s. Every output element, whatever M, the row's position,
the panel or the thread:

    acc = 0.0f
    for k in 0 .. K-1:                      # strictly in order, one accumulator, no split-K
        w = fl32(fl32(d[n, k/32] * q[n, k]) + m[n, k/32])     # Q4_1 (Q8_0: w = fl32(d * q))
        acc = fl32(acc + fl32(x[m, k] * w))
    y[m, n] = acc

w is the fp32 value `gguf.quants.dequantize` gives for that weight (the same two rounded
operations), so y is bit for bit `cpu_linear` on the fp32-dequantized matrix: quantized and fp32
weights give the same logits (tests/test_kernels_quant.py checks both the kernel and the model).

Layout. `pack_q4_1` / `pack_q8_0` copy the blocks once into panels of PANEL_N output columns:

    Q4_1  nib [P, K/32, 16, PANEL_N] uint8   nib[p, b, i, j] = byte i of block b of row p*PANEL_N + j
                                             (low nibble: weight b*32 + i, high: b*32 + 16 + i)
    Q8_0  q   [P, K, PANEL_N] int8
    both  d   [P, K/32, PANEL_N] float32 (Q4_1 also m), columns past N zero and dropped

so a panel streams contiguously at 0.75 (Q4_1: 16 bytes of nibbles and two fp32 scales per 32 weights) or 1.125
(Q8_0) bytes per weight, against 4 for fp32. The micro-kernel dequantizes one k-row of the
panel (PANEL_N weights) into vector registers for each of up to ROW_BLOCK rows of x (the weights
are read from memory once per ROW_BLOCK rows; re-dequantizing per row measured ~6x faster here
than staging the dequantized row in a scratch buffer, which LLVM does not keep in registers).
The Q4_1 block is walked twice, low nibbles (k = b*32 + 0..15) then high (b*32 + 16..31), which
keeps k in order. Quants are widened uint8/int8 -> int32 -> fp32 (exact), never through int64,
which AVX2 cannot convert to float in a vector.

Threads: `parallel=True` splits the panels across numba's threads; each element is still
computed by one thread in the order above (same bits).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .cpu_common import JIT, carray, stack_f32
from .quant import BLOCK, Q4_1, Q8_0, QuantizedWeight

PANEL_N = 32
ROW_BLOCK = 4
PACK_KEY = "cpu"
"""The key `pack`'s layout is kept under on a QuantizedWeight (`QuantizedWeight.packed`)."""
_ACC_SIZE = ROW_BLOCK * PANEL_N
_HALF = BLOCK // 2
_LOW = np.uint8(0x0F)
_SHIFT = np.uint8(4)


def _panels(a: np.ndarray, n: int) -> np.ndarray:
    """[N, ...] -> [P, ..., PANEL_N] with zero columns past N."""
    p = -(-n // PANEL_N)
    padded = np.zeros((p * PANEL_N,) + a.shape[1:], a.dtype)
    padded[:n] = a
    padded = padded.reshape((p, PANEL_N) + a.shape[1:])
    return np.ascontiguousarray(np.moveaxis(padded, 1, -1))


def pack(weight: QuantizedWeight) -> tuple:
    """The panels of `weight` for `linear` (see the module docstring): (kind, arrays...)."""
    if weight.kind == Q4_1:
        return (Q4_1, _panels(weight.blocks[:, :, 4:], weight.n), _panels(weight.d, weight.n),
                _panels(weight.m, weight.n))
    return (Q8_0, _panels(weight.q(), weight.n), _panels(weight.d, weight.n))


@njit(inline="always", **JIT)
def _micro_q4_1(x, m0, rows, nib, d, mn, p, out):
    acc = carray(stack_f32(_ACC_SIZE), (ROW_BLOCK, PANEL_N))
    for i in range(rows):
        for j in range(PANEL_N):
            acc[i, j] = 0.0
    for b in range(nib.shape[1]):
        for i in range(_HALF):                            # k = b*32 + i: low nibbles
            k = b * BLOCK + i
            for r in range(rows):
                xv = x[m0 + r, k]
                for j in range(PANEL_N):
                    acc[r, j] += xv * (d[p, b, j] * np.float32(np.int32(nib[p, b, i, j] & _LOW)) + mn[p, b, j])
        for i in range(_HALF):                            # k = b*32 + 16 + i: high nibbles
            k = b * BLOCK + _HALF + i
            for r in range(rows):
                xv = x[m0 + r, k]
                for j in range(PANEL_N):
                    acc[r, j] += xv * (d[p, b, j] * np.float32(np.int32(nib[p, b, i, j] >> _SHIFT)) + mn[p, b, j])
    for i in range(rows):
        for j in range(PANEL_N):
            out[m0 + i, p * PANEL_N + j] = acc[i, j]


@njit(inline="always", **JIT)
def _micro_q8_0(x, m0, rows, q, d, p, out):
    acc = carray(stack_f32(_ACC_SIZE), (ROW_BLOCK, PANEL_N))
    for i in range(rows):
        for j in range(PANEL_N):
            acc[i, j] = 0.0
    for k in range(x.shape[1]):
        b = k // BLOCK
        for r in range(rows):
            xv = x[m0 + r, k]
            for j in range(PANEL_N):
                acc[r, j] += xv * (d[p, b, j] * np.float32(np.int32(q[p, k, j])))
    for i in range(rows):
        for j in range(PANEL_N):
            out[m0 + i, p * PANEL_N + j] = acc[i, j]


@njit(inline="always", **JIT)
def _panel_q4_1(x, nib, d, mn, out, p):
    m = x.shape[0]
    m0 = 0
    while m - m0 >= ROW_BLOCK:
        _micro_q4_1(x, m0, ROW_BLOCK, nib, d, mn, p, out)
        m0 += ROW_BLOCK
    rest = m - m0
    if rest == 3:
        _micro_q4_1(x, m0, 3, nib, d, mn, p, out)
    elif rest == 2:
        _micro_q4_1(x, m0, 2, nib, d, mn, p, out)
    elif rest == 1:
        _micro_q4_1(x, m0, 1, nib, d, mn, p, out)


@njit(inline="always", **JIT)
def _panel_q8_0(x, q, d, out, p):
    m = x.shape[0]
    m0 = 0
    while m - m0 >= ROW_BLOCK:
        _micro_q8_0(x, m0, ROW_BLOCK, q, d, p, out)
        m0 += ROW_BLOCK
    rest = m - m0
    if rest == 3:
        _micro_q8_0(x, m0, 3, q, d, p, out)
    elif rest == 2:
        _micro_q8_0(x, m0, 2, q, d, p, out)
    elif rest == 1:
        _micro_q8_0(x, m0, 1, q, d, p, out)


@njit(**JIT)
def _q4_1_serial(x, nib, d, mn, out):
    for p in range(nib.shape[0]):
        _panel_q4_1(x, nib, d, mn, out, p)


@njit(parallel=True, **JIT)
def _q4_1_parallel(x, nib, d, mn, out):
    for p in prange(nib.shape[0]):
        _panel_q4_1(x, nib, d, mn, out, p)


@njit(**JIT)
def _q8_0_serial(x, q, d, out):
    for p in range(q.shape[0]):
        _panel_q8_0(x, q, d, out, p)


@njit(parallel=True, **JIT)
def _q8_0_parallel(x, q, d, out):
    for p in prange(q.shape[0]):
        _panel_q8_0(x, q, d, out, p)


def linear(x: np.ndarray, packed: tuple, n: int, k: int, parallel: bool = False) -> np.ndarray:
    """Launcher: x [M, K] float32 (C-contiguous), packed from `pack` -> y [M, n] float32."""
    m = x.shape[0]
    if x.shape[1] != k:
        raise ValueError(f"linear: x has {x.shape[1]} columns, the weight {k}")
    kind = packed[0]
    panels = packed[1].shape[0]
    out = np.empty((m, panels * PANEL_N), np.float32)
    if m:
        if kind == Q4_1:
            (_q4_1_parallel if parallel else _q4_1_serial)(x, packed[1], packed[2], packed[3], out)
        else:
            (_q8_0_parallel if parallel else _q8_0_serial)(x, packed[1], packed[2], out)
    return out if out.shape[1] == n else np.ascontiguousarray(out[:, :n])
