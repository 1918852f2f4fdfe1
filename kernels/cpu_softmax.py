"""Batch-invariant CPU softmax and log_softmax over the last dim (numba), fp32 in and out.

Per row m (each row computed alone, by one thread; V = row length):

    mx = max_v x[m, v]                                   # exact whatever the order
    s  = 0.0 (float64); for v in 0 .. V-1:  s = fl64(s + fl64(e_v)),   e_v = expf(fl32(x[m, v] - mx))
    softmax[m, v]     = fl32(e_v * fl32(1 / s))          # 1/s rounded to fp32 once per row
    log_softmax[m, v] = fl32(fl32(x[m, v] - mx) - fl32(log(s)))

expf and log are libm calls on every element (see `cpu_common`); the sum runs in order in float64.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .cpu_common import JIT


@njit(inline="always", **JIT)
def _row_max_and_sum(x, m):
    mx = x[m, 0]
    for v in range(1, x.shape[1]):
        if x[m, v] > mx:
            mx = x[m, v]
    s = 0.0
    for v in range(x.shape[1]):
        s += np.float64(math.exp(x[m, v] - mx))
    return mx, s


@njit(**JIT)
def _softmax(x, out):
    for m in range(x.shape[0]):
        mx, s = _row_max_and_sum(x, m)
        inv = np.float32(1.0 / s)
        for v in range(x.shape[1]):
            out[m, v] = math.exp(x[m, v] - mx) * inv


@njit(**JIT)
def _log_softmax(x, out):
    for m in range(x.shape[0]):
        mx, s = _row_max_and_sum(x, m)
        log_s = np.float32(math.log(s))
        for v in range(x.shape[1]):
            out[m, v] = (x[m, v] - mx) - log_s


def softmax(x: np.ndarray) -> np.ndarray:
    """Launcher: x [M, V] float32 C-contiguous -> softmax rows [M, V] float32."""
    out = np.empty_like(x)
    if x.shape[1]:
        _softmax(x, out)
    return out


def log_softmax(x: np.ndarray) -> np.ndarray:
    """Launcher: x [M, V] float32 C-contiguous -> log_softmax rows [M, V] float32."""
    out = np.empty_like(x)
    if x.shape[1]:
        _log_softmax(x, out)
    return out
