"""Mutants of the draw's arithmetic at scale: float32 where a vocabulary of 262,144 needs more.

The exact draw (`reference.vector.inverse_cdf`) walks a float64 cumulative sum. Each mutant here draws
the same law in exact arithmetic, and loses the far tail in float32: away from the `far_tail` problem
(262,136 ids of 1.2e-8 after a head of 8 ids) their laws differ from the exact one by ~1e-7, below
every other row's power, so the `far_tail` row catches them.
"""

from __future__ import annotations

import numba
import numpy as np

from specverify.reference.vector import VectorSampler, last_positive

from .registry import mutant

U24 = 2.0 ** -24          # the float32 uniform grid


@mutant(34, "fp32-cumsum-draw", targets=("far_tail",))
class Fp32CumsumDraw(VectorSampler):
    """The inverse-CDF draw accumulates the row in float32: once the running sum is near 1, an increment
    below half an ulp (3e-8) is lost, so tail ids after the head are never drawn. Modelled on the
    saturating low-precision `softmax().cumsum()` that eroded a 131k vocabulary's tail at sampling time
    (NVIDIA/Megatron-LM#7182, "the same cumulative-sum rounding erodes the tail a second time") and on
    the top-p sum moved to double precision for large vocabularies (guoqingbao/attention.rs#9)."""

    def draw(self, w, coin):
        # token = #{k : cdf[k] <= coin * cdf[-1]}, cdf the sequential float32 cumulative sum of the row
        # cast to float32 (np.cumsum's order); compiled, so that its far_tail audit is not 4 passes over
        # every 2 MB row
        w = np.ascontiguousarray(w, np.float64)
        coin = np.ascontiguousarray(np.broadcast_to(coin, (w.shape[0],)), np.float64)
        token = np.empty(w.shape[0], np.int64)
        _cumsum_fp32_draw(w, coin, token)
        return token


@numba.njit(cache=True)
def _cumsum_fp32_draw(w, coin, out):
    n, v = w.shape
    cdf = np.empty(v, np.float32)                   # one row's running sums: one serial pass, not two
    for i in range(n):
        c = np.float32(0.0)
        for k in range(v):
            c = np.float32(c + np.float32(w[i, k]))
            cdf[k] = c
        t = coin[i] * np.float64(c)
        token = 0
        for k in range(v):
            if np.float64(cdf[k]) <= t:
                token += 1
        if token == v:                          # past the end: the last positive weight
            token = last_positive(w, i)
        out[i] = token


@numba.njit(cache=True)
def _splitmix64(x):
    z = x + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


# the smallest noise the race can draw: E at U = 1 - 2**-24, in float32 as the race computes it. Every
# E_k >= E_MIN (log is monotone), so w_k / E_k <= w_k / E_MIN (rounding is monotone too): an id with
# w_k / E_MIN <= the best score so far cannot win, and its hash and log are skipped -- the same tokens,
# far-tail rows (262,136 ids of 1.2e-8 behind a head of 0.12) at a fraction of the cost.
E_MIN = float(-np.log(np.float32(np.float64((1 << 24) - 1) * U24)))


@numba.njit(cache=True)
def _race_fp32(w, seeds, out):
    # argmax_k w[k] / E_k, E_k = -log(U_k) in float32, U_k = m * 2**-24 (m a 24-bit hash of (seed, k))
    n, v = w.shape
    for i in range(n):
        best = -1.0
        arg = 0
        for k in range(v):
            if w[i, k] > 0 and w[i, k] / E_MIN > best:
                m = _splitmix64(seeds[i] ^ (np.uint64(k) * np.uint64(0xD1B54A32D192ED03))) >> np.uint64(40)
                if m == 0:
                    continue                                   # U = 0: E = inf, score 0
                e = -np.log(np.float32(np.float64(m) * U24))
                s = w[i, k] / e
                if s > best:
                    best = s
                    arg = k
        out[i] = arg


@mutant(35, "fp32-exponential-race", targets=("far_tail",))
class Fp32ExponentialRace(VectorSampler):
    """The draw is an exponential race, argmax w_k / E_k with E_k ~ Exp(1) (exact in law), but its noise
    is float32: E = -log(U) with U on the 2**-24 grid bottoms out at -log(1 - 2**-24) = 6e-8, so a token
    of probability 1.2e-8 beats a head token of 0.12 only when the head's own noise exceeds ~5: the far
    tail is drawn ~30x less often than it should be (vLLM PRs #43150 and #45996: the fp32 Exp(1) floor
    and the uniform floor that caps Gumbel noise, tokens far in the tail never sampled). The noise of a
    request is a hash of its coin, so a request's tokens depend on its own coin and rows only."""

    def draw(self, w, coin):
        seeds = np.ascontiguousarray(coin, np.float64).view(np.uint64)
        out = np.empty(w.shape[0], np.int64)
        _race_fp32(np.ascontiguousarray(w, np.float64), seeds, out)
        return out
