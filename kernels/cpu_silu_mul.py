"""Batch-invariant CPU SwiGLU gate (numba): y = silu(gate) * up, fp32, elementwise.

    y[m, f] = fl32(fl32(g / fl32(1 + expf(-g))) * up[m, f]),   g = gate[m, f]

expf is a libm call on every element (torch's own SiLU uses a vectorised exp for full vectors
and a scalar one for the remainder, so there an element's value can depend on where the row
boundary falls; measured here with rows of 1537).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from .cpu_common import JIT


@njit(**JIT)
def _silu_mul(gate, up, out):
    one = np.float32(1.0)
    for m in range(gate.shape[0]):
        for f in range(gate.shape[1]):
            g = gate[m, f]
            out[m, f] = (g / (one + math.exp(-g))) * up[m, f]


def silu_mul(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """Launcher: gate, up [M, F] float32 (any strides: the engine's halves of one [M, 2F] tensor are
    read in place) -> [M, F] float32."""
    out = np.empty(gate.shape, np.float32)
    _silu_mul(gate, up, out)
    return out
