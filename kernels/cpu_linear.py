"""Batch-invariant CPU linear (numba): y[M, N] = x[M, K] @ W[N, K].T, fp32 in, fp32 accumulation.

Reduction order. Every output element, whatever M, the row's position, the panel or the thread:

    acc = 0.0f
    for k in 0 .. K-1:                      # strictly in order, one accumulator, no split-K
        acc = fl32(acc + fl32(x[m, k] * W[n, k]))
    y[m, n] = acc

a rounded product then a rounded sum (no FMA contraction, no reassociation: see `cpu_common`). The
test suite checks the kernel bit for bit against exactly this loop written in NumPy.

Layout. `pack_weight` copies W once into panels of PANEL_N output columns, K-major inside a panel:

    packed [P, K, PANEL_N] float32,  P = ceil(N / PANEL_N),  packed[p, k, j] = W[p*PANEL_N + j, k]
    (columns past N are zero and dropped from the output)

so that the micro-kernel streams a panel contiguously. The micro-kernel computes ROW_BLOCK rows x
PANEL_N columns with the accumulators in vector registers (ROW_BLOCK * PANEL_N / 16 = 16 AVX-512
registers): for each k it broadcasts x[m, k] and multiplies-adds one contiguous row of the panel.
Rows left over (M mod ROW_BLOCK) use the same micro-kernel with fewer rows -- the same operations
per element. Weights are read once per launch for M <= ROW_BLOCK and once per ROW_BLOCK rows from
cache otherwise, so a (kappa+1)-row verify step costs little more than a 1-row decode step.

Threads: `linear(..., parallel=True)` splits the panels across numba's threads (prange); each
element is still computed by one thread in the order above, so the result is the same bits.
"""

from __future__ import annotations

import numpy as np
from numba import njit, prange

from .cpu_common import JIT, carray, stack_f32

PANEL_N = 64
ROW_BLOCK = 4
_ACC_SIZE = ROW_BLOCK * PANEL_N


def pack_weight(weight: np.ndarray) -> np.ndarray:
    """[N, K] (any strides, any float dtype) -> [P, K, PANEL_N] float32 panels (see module doc)."""
    n, k = weight.shape
    p = -(-n // PANEL_N)
    padded = np.zeros((p * PANEL_N, k), np.float32)
    padded[:n] = weight
    return np.ascontiguousarray(padded.reshape(p, PANEL_N, k).transpose(0, 2, 1))


@njit(inline="always", **JIT)
def _micro(x, m0, rows, packed, p, out):
    """out[m0:m0+rows, p*PANEL_N:(p+1)*PANEL_N] for `rows` <= ROW_BLOCK (a constant at each call)."""
    acc = carray(stack_f32(_ACC_SIZE), (ROW_BLOCK, PANEL_N))
    for i in range(rows):
        for j in range(PANEL_N):
            acc[i, j] = 0.0
    for k in range(x.shape[1]):
        for i in range(rows):
            xv = x[m0 + i, k]
            for j in range(PANEL_N):
                acc[i, j] += xv * packed[p, k, j]
    for i in range(rows):
        for j in range(PANEL_N):
            out[m0 + i, p * PANEL_N + j] = acc[i, j]


@njit(inline="always", **JIT)
def _panel(x, packed, out, p):
    m = x.shape[0]
    m0 = 0
    while m - m0 >= ROW_BLOCK:
        _micro(x, m0, ROW_BLOCK, packed, p, out)
        m0 += ROW_BLOCK
    rest = m - m0
    if rest == 3:
        _micro(x, m0, 3, packed, p, out)
    elif rest == 2:
        _micro(x, m0, 2, packed, p, out)
    elif rest == 1:
        _micro(x, m0, 1, packed, p, out)


@njit(**JIT)
def _linear_serial(x, packed, out):
    for p in range(packed.shape[0]):
        _panel(x, packed, out, p)


@njit(parallel=True, **JIT)
def _linear_parallel(x, packed, out):
    for p in prange(packed.shape[0]):
        _panel(x, packed, out, p)


def linear(x: np.ndarray, packed: np.ndarray, n: int, parallel: bool = False) -> np.ndarray:
    """Launcher: x [M, K] float32 (C-contiguous), packed from `pack_weight` -> y [M, n] float32."""
    m, k = x.shape
    if packed.shape[1] != k:
        raise ValueError(f"linear: x has {k} columns, the weight {packed.shape[1]}")
    out = np.empty((m, packed.shape[0] * PANEL_N), np.float32)
    if m:
        (_linear_parallel if parallel else _linear_serial)(x, packed, out)
    return out if out.shape[1] == n else np.ascontiguousarray(out[:, :n])
