"""Batch-invariant CPU linear on GGUF Q4_1 and Q8_0 blocks with 8-bit activations (numba):
y[M, N] ~ x[M, K] @ W[N, K].T, each row of x first quantised to int8 blocks of 32
(`quantize_rows`), then exact integer dot products per block (`cpu_intdot`), as llama.cpp does
with the same file. Both of SmolLM2's block types take this route: the 210 Q4_1 matrices and the
Q8_0 tied head (the step's largest matrix).

This is the "q8" variant of `cpu_linear_q`: it is NOT the fp32-dequantized product (x is rounded
to 8 bits per block first), so its logits differ from the fp32 path's (docs/kernels.md states
the measured difference). What it keeps is batch invariance.

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
        Q4_1: acc = fl32(acc + fl32(fl32(fl32(d[n,b] * dx) * float(isum)) + fl32(m[n,b] * sx)))
        Q8_0: acc = fl32(acc + fl32(fl32(d[n,b] * dx) * float(isum)))
    y[m, n] = acc

(d q + m) dx qx summed over the block is d dx isum + m sx, llama.cpp's Q4_1 x Q8_1 identity
(Q8_0 x Q8_0: no m term). |isum| <= 32 * 128 * 127 < 2^24, so float(isum) is exact. The integer
sums are exact whatever instructions compute them (`cpu_intdot`: AVX-512 VNNI `vpdpbusd` where the
host has it, plain vector IR elsewhere; a Q8_0 quant is stored as the unsigned byte q + 128 and
the kernel subtracts the exact integer 128 * sum_k qx[m, k] from the block sum, so isum is still
sum qx q); the float operations run in
the order above (no fastmath, no fused multiply-add), so a row's bits depend on nothing but the
row and the weight: batch-invariant by construction. The bound against the float64 product of
the unquantised x is `accuracy.linear_q8`.

Layout (`pack`, built once per weight at first use and kept on it under `PACK_KEY`): panels of
PANEL_N = 32 output columns with k-quads interleaved (`cpu_intdot` spells the index maps), and
the block scales d (and Q4_1's minimums m) as the file's IEEE halves [P, K/32, 32] (widened to
float32 in the kernel, exactly: `cpu_intdot.widen_f16`); columns past N are zero and dropped. The
bytes per weight are the file's (Q4_1 0.625, Q8_0 1.0625).
Per row and block the kernel takes the 32 columns' integer sums in one `cpu_intdot` call (vector
registers; each 128-byte weight quad unpacked once for up to 4 rows), then does the fp32
combination above on 32 lanes.

Threads: `parallel=True` splits the panels across numba's threads (same bits).
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from . import cpu_common, cpu_intdot
from .cpu_common import JIT, carray, drop_stale_cache, stack_f32
from .cpu_intdot import (HOST_MODE, MAX_ROWS as ROW_BLOCK, MODE_GENERIC, PANEL_N, Q8_0_OFFSET, QUAD, QUAD_STEPS,
                         block_q4_1, block_q8_0, stack_i32, widen_f16)
from .quant import BLOCK, Q4_1, QMAX, QuantizedWeight

# the kernels below compile in cpu_intdot's (and cpu_common's) functions and constants: numba's cache
# of this file must not outlive an edit of those alone
drop_stale_cache(__file__, cpu_intdot.__file__, cpu_common.__file__)

PACK_KEY = "cpu-q8"
"""The key `pack`'s layout is kept under on a QuantizedWeight (`QuantizedWeight.packed`)."""
_PANEL_BLOCK = BLOCK * PANEL_N
"""Weight elements of one (panel, block): 1024 int8 (Q8_0) or 512 nibble bytes (Q4_1) / 2."""
_ACC_SIZE = ROW_BLOCK * PANEL_N
_FMAX = np.float32(np.finfo(np.float32).max)


@njit(inline="always", **JIT)
def _quantize_row(x, m, qx, dx, sx, xs):
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
            xs[m, b] = 0
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
        xs[m, b] = s


@njit(**JIT)
def _quantize(x, qx, dx, sx, xs):
    for m in range(x.shape[0]):
        _quantize_row(x, m, qx, dx, sx, xs)


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
    _quantize(x, qx, dx, sx, np.empty((m, k // BLOCK), np.int32))
    return qx, dx, sx




def _panels(a: np.ndarray, n: int) -> np.ndarray:
    """[N, ...] -> [P, PANEL_N, ...] with zero rows past N."""
    p = -(-n // PANEL_N)
    padded = np.zeros((p * PANEL_N,) + a.shape[1:], a.dtype)
    padded[:n] = a
    return padded.reshape((p, PANEL_N) + a.shape[1:])


def _half_panels(a: np.ndarray, n: int) -> np.ndarray:
    """[N, K/32] float32 scales (the file's halves, widened) -> the bits of the halves as uint16
    [P, K/32, 32]; refuses a value that is not a half (the kernel widens them back exactly)."""
    h = a.astype(np.float16)
    if not np.array_equal(h.astype(np.float32), a, equal_nan=True):
        raise ValueError("pack: a block scale is not an IEEE half (GGUF stores them as halves)")
    return np.ascontiguousarray(_panels(h.view(np.uint16), n).transpose(0, 2, 1))


def pack(weight: QuantizedWeight) -> tuple:
    """The k-quad-interleaved panels of `weight` (module docstring, index maps in `cpu_intdot`):
    (kind, weights, d[, m]) with weights uint8 [P, K/32, 8, 32, 4] (Q8_0: q + 128) or uint8
    [P, K/32, 4, 32, 4] (Q4_1: the GGUF nibble bytes), d and m the halves' bits, uint16 [P, K/32, 32]."""
    nb = weight.k // BLOCK
    if weight.kind == Q4_1:
        nib = _panels(weight.blocks[:, :, 4:].reshape(weight.n, nb, QUAD_STEPS // 2, QUAD), weight.n)   # [P, 32, nb, 4, 4]
        return (Q4_1, np.ascontiguousarray(nib.transpose(0, 2, 3, 1, 4)), _half_panels(weight.d, weight.n),
                _half_panels(weight.m, weight.n))
    u = (weight.q().astype(np.int16) + Q8_0_OFFSET).astype(np.uint8)                        # [N, K] 0..255
    u = _panels(u.reshape(weight.n, nb, QUAD_STEPS, QUAD), weight.n)                           # [P, 32, nb, 8, 4]
    return (weight.kind, np.ascontiguousarray(u.transpose(0, 2, 3, 1, 4)), _half_panels(weight.d, weight.n))


@njit(inline="always", **JIT)
def _rows_q4_1(qx, dx, sx, nib, d, mn, out, p, r0, rows, mode):
    k = qx.shape[1]
    nb = d.shape[1]
    isum_p = stack_i32(_ACC_SIZE)
    isum = carray(isum_p, (ROW_BLOCK, PANEL_N))
    acc = carray(stack_f32(_ACC_SIZE), (ROW_BLOCK, PANEL_N))
    db_p = stack_f32(PANEL_N)
    mb_p = stack_f32(PANEL_N)
    db = carray(db_p, (PANEL_N,))
    mb = carray(mb_p, (PANEL_N,))
    for r in range(rows):
        for j in range(PANEL_N):
            acc[r, j] = 0.0
    for b in range(nb):
        block_q4_1(qx, r0 * k + b * BLOCK, k, nib, (p * nb + b) * (_PANEL_BLOCK // 2), isum_p, rows, mode)
        widen_f16(d, (p * nb + b) * PANEL_N, db_p)
        widen_f16(mn, (p * nb + b) * PANEL_N, mb_p)
        for r in range(rows):
            dxr = dx[r0 + r, b]
            sxr = sx[r0 + r, b]
            for j in range(PANEL_N):
                acc[r, j] += (db[j] * dxr) * np.float32(isum[r, j]) + mb[j] * sxr
    for r in range(rows):
        for j in range(PANEL_N):
            out[r0 + r, p * PANEL_N + j] = acc[r, j]


@njit(inline="always", **JIT)
def _rows_q8_0(qx, dx, xs, u, d, out, p, r0, rows, mode):
    k = qx.shape[1]
    nb = d.shape[1]
    isum_p = stack_i32(_ACC_SIZE)
    isum = carray(isum_p, (ROW_BLOCK, PANEL_N))
    acc = carray(stack_f32(_ACC_SIZE), (ROW_BLOCK, PANEL_N))
    db_p = stack_f32(PANEL_N)
    db = carray(db_p, (PANEL_N,))
    for r in range(rows):
        for j in range(PANEL_N):
            acc[r, j] = 0.0
    for b in range(nb):
        block_q8_0(qx, r0 * k + b * BLOCK, k, u, (p * nb + b) * _PANEL_BLOCK, isum_p, rows, mode)
        widen_f16(d, (p * nb + b) * PANEL_N, db_p)
        for r in range(rows):
            dxr = dx[r0 + r, b]
            off = xs[r0 + r, b] * np.int32(Q8_0_OFFSET)           # sum_t x (q + 128) - this = sum_t x q
            for j in range(PANEL_N):
                acc[r, j] += (db[j] * dxr) * np.float32(np.int32(isum[r, j] - off))
    for r in range(rows):
        for j in range(PANEL_N):
            out[r0 + r, p * PANEL_N + j] = acc[r, j]


@njit(inline="always", **JIT)
def _panel_q4_1(qx, dx, sx, nib, d, mn, out, p, mode):
    m = qx.shape[0]
    r0 = 0
    while m - r0 >= ROW_BLOCK:
        _rows_q4_1(qx, dx, sx, nib, d, mn, out, p, r0, ROW_BLOCK, mode)
        r0 += ROW_BLOCK
    rest = m - r0
    if rest == 3:
        _rows_q4_1(qx, dx, sx, nib, d, mn, out, p, r0, 3, mode)
    elif rest == 2:
        _rows_q4_1(qx, dx, sx, nib, d, mn, out, p, r0, 2, mode)
    elif rest == 1:
        _rows_q4_1(qx, dx, sx, nib, d, mn, out, p, r0, 1, mode)


@njit(inline="always", **JIT)
def _panel_q8_0(qx, dx, xs, u, d, out, p, mode):
    m = qx.shape[0]
    r0 = 0
    while m - r0 >= ROW_BLOCK:
        _rows_q8_0(qx, dx, xs, u, d, out, p, r0, ROW_BLOCK, mode)
        r0 += ROW_BLOCK
    rest = m - r0
    if rest == 3:
        _rows_q8_0(qx, dx, xs, u, d, out, p, r0, 3, mode)
    elif rest == 2:
        _rows_q8_0(qx, dx, xs, u, d, out, p, r0, 2, mode)
    elif rest == 1:
        _rows_q8_0(qx, dx, xs, u, d, out, p, r0, 1, mode)


# One compiled function per (block type, threads, MODE): MODE is a compile-time constant of the
# integer block sums (HOST_MODE in use; MODE_GENERIC is also run by the tests on a VNNI host). Each
# allocates its scratch (qx, dx, sx, xs) itself: one launch is one call from Python.

@njit(inline="always", **JIT)
def _scratch(x):
    m, k = x.shape
    return (np.empty((m, k), np.int8), np.empty((m, k // BLOCK), np.float32),
            np.empty((m, k // BLOCK), np.float32), np.empty((m, k // BLOCK), np.int32))


@njit(**JIT)
def _q4_1_serial(x, nib, d, mn, out):
    qx, dx, sx, xs = _scratch(x)
    _quantize(x, qx, dx, sx, xs)
    for p in range(nib.shape[0]):
        _panel_q4_1(qx, dx, sx, nib, d, mn, out, p, HOST_MODE)


@njit(parallel=True, **JIT)
def _q4_1_parallel(x, nib, d, mn, out):
    qx, dx, sx, xs = _scratch(x)
    _quantize(x, qx, dx, sx, xs)
    for p in prange(nib.shape[0]):
        _panel_q4_1(qx, dx, sx, nib, d, mn, out, p, HOST_MODE)


@njit(**JIT)
def _q8_0_serial(x, u, d, out):
    qx, dx, sx, xs = _scratch(x)
    _quantize(x, qx, dx, sx, xs)
    for p in range(u.shape[0]):
        _panel_q8_0(qx, dx, xs, u, d, out, p, HOST_MODE)


@njit(parallel=True, **JIT)
def _q8_0_parallel(x, u, d, out):
    qx, dx, sx, xs = _scratch(x)
    _quantize(x, qx, dx, sx, xs)
    for p in prange(u.shape[0]):
        _panel_q8_0(qx, dx, xs, u, d, out, p, HOST_MODE)


@njit(**JIT)
def _q4_1_generic(x, nib, d, mn, out):
    qx, dx, sx, xs = _scratch(x)
    _quantize(x, qx, dx, sx, xs)
    for p in range(nib.shape[0]):
        _panel_q4_1(qx, dx, sx, nib, d, mn, out, p, MODE_GENERIC)


@njit(**JIT)
def _q8_0_generic(x, u, d, out):
    qx, dx, sx, xs = _scratch(x)
    _quantize(x, qx, dx, sx, xs)
    for p in range(u.shape[0]):
        _panel_q8_0(qx, dx, xs, u, d, out, p, MODE_GENERIC)


def _kernel(kind, parallel: bool, mode: int):
    if mode not in (HOST_MODE, MODE_GENERIC):
        raise ValueError(f"linear: mode {mode} is not available on this host (HOST_MODE {HOST_MODE})")
    if mode != HOST_MODE:
        return _q4_1_generic if kind == Q4_1 else _q8_0_generic
    if kind == Q4_1:
        return _q4_1_parallel if parallel else _q4_1_serial
    return _q8_0_parallel if parallel else _q8_0_serial


def linear(x: np.ndarray, packed: tuple, n: int, k: int, parallel: bool = False, mode: int | None = None) -> np.ndarray:
    """Launcher: x [M, K] float32 (C-contiguous), packed from `pack` -> y [M, n] float32 (x
    quantised per row inside the same call). `mode`: the integer block sums' `cpu_intdot` MODE
    (default HOST_MODE; MODE_GENERIC runs serially); the same bits either way."""
    m = x.shape[0]
    if x.shape[1] != k:
        raise ValueError(f"linear: x has {x.shape[1]} columns, the weight {k}")
    out = np.empty((m, packed[1].shape[0] * PANEL_N), np.float32)
    if m:
        _kernel(packed[0], parallel, HOST_MODE if mode is None else mode)(x, *packed[1:], out)
    return out if out.shape[1] == n else np.ascontiguousarray(out[:, :n])
