"""Batch-invariant CPU linear on GGUF Q4_1 blocks with 8-bit activations (numba): y[M, N] ~ x[M, K]
@ W[N, K].T with W in Q4_1 blocks (`kernels/quant.py`), each row of x first quantised to int8
blocks of 32 (`quantize_rows`), then integer dot products per block.

Q8_0 weights (SmolLM2's tied head) go to the exact kernel `cpu_linear_q` unchanged (x not
quantised): integer Q8_0 kernels written the same way measured slower than the exact one here
(int32 lanes 6-25x slower: LLVM left the int32 accumulation scalar; int16 pairs 6x; each weight
split into two signed nibbles on int16 lanes 0.33x at the head's shape, 0.87x at 576 -> 3072), so
on this path only the 210 Q4_1 matrices take 8-bit activations.

This is the "q8" variant of `cpu_linear_q`: it is NOT the fp32-dequantized product (x is rounded
to 8 bits per block first, as llama.cpp does on the same file), so its logits differ from the fp32
path's (docs/kernels.md states the measured difference). What it keeps is batch invariance.

Activation quantisation, per row m and block b (k = 32 b .. 32 b + 31), all fp32:

    amax = max |x[m, k]|                                    exact (a max has no rounding)
    dx   = amax / 127            inv = 127 / amax (0 if amax == 0)
    qx[m, k] = trunc(x[m, k] * inv + copysign(0.5, ..))     nearest, ties away from 0, in -127..127
    sx   = dx * float(sum_k qx[m, k])                       the integer sum is exact
    a non-finite x anywhere in the block makes dx = sx = NaN (the row's output is NaN)

Reduction order: for every output element, whatever M, the row's position, the panel or thread:

    acc = 0.0f
    for b in 0 .. K/32 - 1:                                 # blocks strictly in order
        isum = sum_k qx[m, k] * q[n, k]                      # integers: exact, any order
        acc = fl32(acc + fl32(fl32(fl32(d[n,b] * dx) * float(isum)) + fl32(m[n,b] * sx)))
    y[m, n] = acc

(d q + m) dx qx summed over the block is d dx isum + m sx, llama.cpp's Q4_1 x Q8_1 identity.
|isum| <= 32 * 15 * 127 < 2^24, so float(isum) is exact. The
integer sums are exact whatever order LLVM vectorises them in; the float operations run in the
order above (no fastmath, no fused multiply-add), so a row's bits depend on nothing but the row
and the weight: batch-invariant by construction. The bound against the float64 product of the
unquantised x is `accuracy.linear_q8`.

Layout: `cpu_linear_q.pack`'s panels (the same arrays, shared on the weight: no extra memory).
Q4_1 keeps two int16 partial sums per (row, column) while a block is walked, low nibbles
(k = 32 b + i) and high (32 b + 16 + i), each at most 16 * 15 * 127 = 30480 < 2^15, so the
multiply-adds run on int16 lanes (twice the lanes of fp32: LLVM emits vpmullw / vpaddw) and every
nibble byte is loaded once.

Threads: `parallel=True` splits the panels across numba's threads (same bits).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange, types
from numba.core import cgutils, errors
from numba.extending import intrinsic

from .cpu_common import JIT, carray, stack_f32
from . import cpu_linear_q
from .cpu_linear_q import PANEL_N, ROW_BLOCK, pack  # noqa: F401  (pack: the shared panel layout)
from .quant import BLOCK, Q4_1, QMAX

_HALF = BLOCK // 2
_ACC_SIZE = ROW_BLOCK * PANEL_N
_LOW = np.uint8(0x0F)
_SHIFT = np.uint8(4)
_FMAX = np.float32(np.finfo(np.float32).max)


def _stack_int(ty):
    @intrinsic
    def stack(typingctx, n):
        """An int scratch buffer of compile-time size n on the stack (see `cpu_common.stack_f32`)."""
        if not isinstance(n, types.IntegerLiteral):
            raise errors.RequireLiteralValue(n)
        size = n.literal_value

        def codegen(context, builder, signature, args):
            return cgutils.alloca_once(builder, context.get_value_type(ty), size=size)
        return types.CPointer(ty)(n), codegen
    return stack


stack_i16 = _stack_int(types.int16)


@njit(inline="always", **JIT)
def _quantize_row(x, m, qx, dx, sx):
    nb = x.shape[1] // BLOCK
    for b in range(nb):
        amax = np.float32(0.0)
        for i in range(BLOCK):
            a = abs(x[m, b * BLOCK + i])
            if a > amax or a != a:
                amax = a
            if amax != amax:
                break
        if not (amax <= _FMAX):                       # NaN or inf in the block
            for i in range(BLOCK):
                qx[m, b * BLOCK + i] = 0
            dx[m, b] = np.float32(np.nan)
            sx[m, b] = np.float32(np.nan)
            continue
        d = amax / np.float32(QMAX)
        inv = np.float32(QMAX) / amax if amax > 0 else np.float32(0.0)
        s = 0
        for i in range(BLOCK):
            v = x[m, b * BLOCK + i] * inv
            q = np.int32(v + np.float32(0.5)) if v >= 0 else -np.int32(np.float32(0.5) - v)
            qx[m, b * BLOCK + i] = q
            s += q
        dx[m, b] = d
        sx[m, b] = d * np.float32(s)


@njit(**JIT)
def _quantize(x, qx, dx, sx):
    for m in range(x.shape[0]):
        _quantize_row(x, m, qx, dx, sx)


def quantize_rows(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x [M, K] float32 -> (qx int8 [M, K], dx float32 [M, K/32], sx float32 [M, K/32]) as the
    module docstring says (each row alone)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    m, k = x.shape
    if k % BLOCK:
        raise ValueError(f"quantize_rows: K = {k} is not a multiple of {BLOCK}")
    qx = np.empty((m, k), np.int8)
    dx = np.empty((m, k // BLOCK), np.float32)
    sx = np.empty((m, k // BLOCK), np.float32)
    _quantize(x, qx, dx, sx)
    return qx, dx, sx


@njit(inline="always", **JIT)
def _micro_q4_1(qx, dx, sx, m0, rows, nib, d, mn, p, out):
    acc = carray(stack_f32(_ACC_SIZE), (ROW_BLOCK, PANEL_N))
    lo = carray(stack_i16(_ACC_SIZE), (ROW_BLOCK, PANEL_N))
    hi = carray(stack_i16(_ACC_SIZE), (ROW_BLOCK, PANEL_N))
    for r in range(rows):
        for j in range(PANEL_N):
            acc[r, j] = 0.0
    for b in range(nib.shape[1]):
        for r in range(rows):
            for j in range(PANEL_N):
                lo[r, j] = 0
                hi[r, j] = 0
        for i in range(_HALF):
            k = b * BLOCK + i
            for r in range(rows):
                xl = np.int16(qx[m0 + r, k])
                xh = np.int16(qx[m0 + r, k + _HALF])
                for j in range(PANEL_N):
                    byte = nib[p, b, i, j]
                    lo[r, j] += xl * np.int16(byte & _LOW)
                    hi[r, j] += xh * np.int16(byte >> _SHIFT)
        for r in range(rows):
            dxr = dx[m0 + r, b]
            sxr = sx[m0 + r, b]
            for j in range(PANEL_N):
                isum = np.float32(np.int32(np.int32(lo[r, j]) + np.int32(hi[r, j])))
                acc[r, j] += (d[p, b, j] * dxr) * isum + mn[p, b, j] * sxr
    for r in range(rows):
        for j in range(PANEL_N):
            out[m0 + r, p * PANEL_N + j] = acc[r, j]


@njit(inline="always", **JIT)
def _panel_q4_1(qx, dx, sx, nib, d, mn, out, p):
    m = qx.shape[0]
    m0 = 0
    while m - m0 >= ROW_BLOCK:
        _micro_q4_1(qx, dx, sx, m0, ROW_BLOCK, nib, d, mn, p, out)
        m0 += ROW_BLOCK
    rest = m - m0
    if rest == 3:
        _micro_q4_1(qx, dx, sx, m0, 3, nib, d, mn, p, out)
    elif rest == 2:
        _micro_q4_1(qx, dx, sx, m0, 2, nib, d, mn, p, out)
    elif rest == 1:
        _micro_q4_1(qx, dx, sx, m0, 1, nib, d, mn, p, out)


@njit(**JIT)
def _q4_1_serial(x, qx, dx, sx, nib, d, mn, out):
    _quantize(x, qx, dx, sx)
    for p in range(nib.shape[0]):
        _panel_q4_1(qx, dx, sx, nib, d, mn, out, p)


@njit(parallel=True, **JIT)
def _q4_1_parallel(x, qx, dx, sx, nib, d, mn, out):
    _quantize(x, qx, dx, sx)
    for p in prange(nib.shape[0]):
        _panel_q4_1(qx, dx, sx, nib, d, mn, out, p)


def linear(x: np.ndarray, packed: tuple, n: int, k: int, parallel: bool = False) -> np.ndarray:
    """Launcher: x [M, K] float32 (C-contiguous), packed from `cpu_linear_q.pack` -> y [M, n]
    float32 (x quantised per row inside the same call)."""
    m = x.shape[0]
    if x.shape[1] != k:
        raise ValueError(f"linear: x has {x.shape[1]} columns, the weight {k}")
    if packed[0] != Q4_1:
        return cpu_linear_q.linear(x, packed, n, k, parallel)       # Q8_0: exact (module docstring)
    panels = packed[1].shape[0]
    out = np.empty((m, panels * PANEL_N), np.float32)
    if m:
        qx = np.empty((m, k), np.int8)
        dx = np.empty((m, k // BLOCK), np.float32)
        sx = np.empty((m, k // BLOCK), np.float32)
        (_q4_1_parallel if parallel else _q4_1_serial)(x, qx, dx, sx, packed[1], packed[2], packed[3], out)
    return out if out.shape[1] == n else np.ascontiguousarray(out[:, :n])
