"""Batch-invariant CPU RMSNorm (numba): y = x / sqrt(mean(x^2) + eps) * weight, fp32.

Per row m, whatever the other rows (each row is computed alone, by one thread):

    ss = 0.0f;  for d in 0 .. D-1:  ss = fl32(ss + fl32(x[m, d] * x[m, d]))      # in order
    inv = fl32(1 / fl32(sqrt(fl32(fl32(ss / D) + eps))))                          # IEEE, correctly rounded
    y[m, d] = fl32(fl32(x[m, d] * inv) * weight[d])

(no FMA, no reassociation: see `cpu_common`).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from .cpu_common import JIT


@njit(**JIT)
def _rms_norm(x, weight, eps, out):
    m_rows, d_model = x.shape
    n = np.float32(d_model)
    one = np.float32(1.0)
    for m in range(m_rows):
        ss = np.float32(0.0)
        for d in range(d_model):
            ss += x[m, d] * x[m, d]
        inv = one / np.sqrt(ss / n + eps)
        for d in range(d_model):
            out[m, d] = (x[m, d] * inv) * weight[d]


def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """Launcher: x [M, D] float32 C-contiguous, weight [D] float32 -> [M, D] float32."""
    out = np.empty_like(x)
    _rms_norm(x, weight, np.float32(eps), out)
    return out
