"""Device helpers shared by the sampler kernels (Triton, float64): the weights of a row and the
inverse-CDF draw, bit for bit `reference.sampling`.

Weights of row p (with draft row q and drafted token x), by `mode`:

    MODE_TARGET         w_k = p_k                                  (bonus; padded draft; fallback)
    MODE_RESIDUAL       w_k = max(p_k - q_k, 0)                    (random draft rejected)
    MODE_DETERMINISTIC  w_k = p_k, except w_x = 0                  (one-hot draft rejected)

Draw (`draw`), two sequential passes over k = 0 .. V-1, one element at a time, in float64:

    pass 1:  Z = 0; Z = Z + w_k;  last = last k with w_k > 0        # Z = cumsum(w)[-1] exactly
    t = coin * Z
    pass 2:  C = 0; C = C + w_k;  token = first k with C > t        # = #{k : C_k <= t}, C is monotone
    token = last if no such k                                       # t >= Z: coin 1.0 or rounding

Pass 2 recomputes exactly the same partial sums as pass 1, so C_{V-1} = Z. A token with w_k = 0 is
never returned: at the first k with C_k > t, C_{k-1} <= t < C_k, so w_k > 0; and `last` has
w > 0. The sums are sequential because NumPy's cumsum is: a tree (tl.cumsum) would round
differently and, near a CDF boundary, pick another token.
"""

from __future__ import annotations

import triton
import triton.language as tl

MODE_TARGET = tl.constexpr(0)
MODE_RESIDUAL = tl.constexpr(1)
MODE_DETERMINISTIC = tl.constexpr(2)


@triton.jit
def weight_at(p_ptr, q_ptr, k, x, mode):
    """w_k of the row at p_ptr (draft row at q_ptr, drafted token x) under `mode` (a runtime int)."""
    p = tl.load(p_ptr + k)
    q = tl.load(q_ptr + k, mask=mode == MODE_RESIDUAL, other=0.0)
    w = p
    if mode == MODE_RESIDUAL:
        w = tl.maximum(p - q, 0.0)
    if mode == MODE_DETERMINISTIC:
        w = tl.where(k == x, 0.0, p)
    return w


@triton.jit
def total_weight(p_ptr, q_ptr, x, V, mode):
    """(Z, last): the sequential sum of the weights and the last index with w > 0 (-1 if none)."""
    z = tl.full((), 0.0, tl.float64)
    last = tl.full((), -1, tl.int32)
    for k in range(V):
        w = weight_at(p_ptr, q_ptr, k, x, mode)
        z += w
        last = tl.where(w > 0, k, last)
    return z, last


@triton.jit
def draw(p_ptr, q_ptr, x, V, coin, mode):
    """Inverse-CDF draw of one token from the weights of `mode` (see the module docstring)."""
    z, last = total_weight(p_ptr, q_ptr, x, V, mode)
    t = coin * z
    c = tl.full((), 0.0, tl.float64)
    token = tl.full((), -1, tl.int32)
    for k in range(V):
        c += weight_at(p_ptr, q_ptr, k, x, mode)
        token = tl.where((token < 0) & (c > t), k, token)
    return tl.where(token < 0, last, token)


@triton.jit
def argmax_row(p_ptr, V, BLOCK_V: tl.constexpr):
    """argmax of a row, lowest index among ties: chunks of BLOCK_V in order, tl.argmax (leftmost)
    inside a chunk, and a later chunk wins only with a strictly larger value. Exact (no rounding)."""
    offs = tl.arange(0, BLOCK_V)
    best = tl.full((), float("-inf"), tl.float64)
    best_idx = tl.full((), 0, tl.int32)
    for v0 in range(0, V, BLOCK_V):
        vals = tl.load(p_ptr + v0 + offs, mask=v0 + offs < V, other=float("-inf"))
        cmax = tl.max(vals, axis=0)
        cidx = tl.argmax(vals, axis=0, tie_break_left=True).to(tl.int32)
        better = cmax > best
        best_idx = tl.where(better, v0 + cidx, best_idx)
        best = tl.where(better, cmax, best)
    return best_idx
