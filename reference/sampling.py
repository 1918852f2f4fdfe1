"""The two primitives every exact rule is built from, defined down to the last bit.

All arithmetic is float64 and every sum is sequential, left to right (`np.cumsum`), so another
implementation (a Triton kernel, a numba loop) can reproduce the emitted token ids exactly from the
same rows and the same coins.

Inverse-CDF draw, `draw(weights, coin)`:
    C = cumsum(weights)            # sequential, float64; Z = C[-1]
    t = coin * Z
    token = #{k : C[k] <= t}       # the smallest k with C[k] > t; such a k always has weight > 0
    if token == V:                 # only when t >= Z: coin == 1.0 or rounding at the top end
        token = last k with weights[k] > 0
A token of weight 0 is never returned, whatever the coin (0.0 and 1.0 included).

Residual, `residual(p, q, x)`: the weights max(0, p - q) (the normalisation Z is folded into the
draw). A deterministic draft (q is None) means q = one-hot(x), whose residual is p with p[x] set to 0.
If the residual is all zero -- possible only when p <= q everywhere, i.e. p == q up to rounding, where
an in-contract coin cannot reject -- the target row p itself is used.

Acceptance, `accepts(p, q, x, coin)`: accept draft token x iff coin * q[x] < p[x] (strict; q[x] = 1
for a deterministic draft). Equivalent to coin < min(1, p[x]/q[x]) for coins in [0, 1), without the
division, and a coin of 0.0 never accepts a token with p[x] = 0.
"""

from __future__ import annotations

import numpy as np

def draw(weights: np.ndarray, coin: float) -> int:
    """Inverse-CDF draw of one token from non-negative `weights` (need not sum to 1)."""
    cdf = np.cumsum(weights)
    t = coin * cdf[-1]
    token = int(np.count_nonzero(cdf <= t))
    if token == cdf.shape[0]:
        token = int(np.flatnonzero(weights > 0)[-1])
    return token


def residual(p: np.ndarray, q: np.ndarray | None, x: int) -> np.ndarray:
    """Weights of the recovered-token distribution after draft token x is rejected."""
    if q is None:
        w = p.copy()
        w[x] = 0.0
    else:
        w = np.maximum(p - q, 0.0)
    if not (w > 0).any():
        return p.copy()
    return w


def accepts(p: np.ndarray, q: np.ndarray | None, x: int, coin: float) -> bool:
    """The exact acceptance test: coin * q[x] < p[x] (q[x] = 1 for a deterministic draft)."""
    qx = 1.0 if q is None else q[x]
    return bool(coin * qx < p[x])


def argmax_lowest(row: np.ndarray) -> int:
    """argmax with the lowest index among ties (what torch.argmax and np.argmax do)."""
    return int(np.argmax(row))
