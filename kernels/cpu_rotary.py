"""Batch-invariant CPU rotary embedding (numba), GGUF/llama.cpp "normal" layout (adjacent pairs).

Elementwise, no reduction. For token t at position pos_t, pair i (0 <= i < Dh/2), every head:

    inv_freq_i = theta ** (-2i / Dh)                     # float64, Python's pow, once per launch
    ang = fl64(float64(pos_t) * inv_freq_i)
    c, s = fl32(cos(ang)), fl32(sin(ang))                # libm, float64
    y[2i]   = fl32(fl32(x[2i] * c) - fl32(x[2i+1] * s))
    y[2i+1] = fl32(fl32(x[2i] * s) + fl32(x[2i+1] * c))

A token's output depends only on its own row and position.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit

from .cpu_common import JIT


@functools.lru_cache(maxsize=16)
def _inv_freq(head_dim: int, theta: float) -> tuple:
    return tuple(math.pow(theta, -(2 * i) / head_dim) for i in range(head_dim // 2))


def inv_freq(head_dim: int, theta: float) -> np.ndarray:
    """theta ** (-2i / Dh) for i < Dh/2, float64, computed with Python's pow (libm): once per
    (Dh, theta) (every decode step of every layer asks again), a fresh array each call."""
    return np.array(_inv_freq(head_dim, theta), np.float64)


@njit(**JIT)
def _rotary(x, positions, freq, out):
    n_tok, n_heads, head_dim = x.shape
    for t in range(n_tok):
        pos = np.float64(positions[t])
        for i in range(head_dim // 2):
            ang = pos * freq[i]
            c = np.float32(math.cos(ang))
            s = np.float32(math.sin(ang))
            for h in range(n_heads):
                x0 = x[t, h, 2 * i]
                x1 = x[t, h, 2 * i + 1]
                out[t, h, 2 * i] = x0 * c - x1 * s
                out[t, h, 2 * i + 1] = x0 * s + x1 * c


def rotary(x: np.ndarray, positions: np.ndarray, theta: float) -> np.ndarray:
    """Launcher: x [T, H, Dh] float32 C-contiguous, positions int64 [T] -> [T, H, Dh] float32."""
    out = np.empty_like(x)
    _rotary(x, positions, inv_freq(x.shape[2], theta), out)
    return out
