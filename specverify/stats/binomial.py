"""Exact two-sided binomial test of a rate, with the smallest deviation it is sure to detect.

The audit uses it for "acceptance rate vs 1 - TV(p, q)": under exact speculative sampling a draft token
is accepted with probability exactly 1 - TV(p, q), so `successes` accepted out of `n` proposals is a
Binomial(n, 1 - TV) count when proposals are independent (one per request, or independent requests).

p-value: scipy.stats.binomtest two-sided (the likelihood-ordering "minlike" method: the probability,
under p0, of every count no more likely than the one observed). Under the null, P(p_value <= alpha)
<= alpha exactly (the test is discrete, hence conservative).

Power: the test rejects exactly the counts k <= k_lo or k >= k_hi (both found by bisection on scipy's
own p-value, which is monotone on each side of the mode), so its power at a true rate p1 is computed
exactly: binom.cdf(k_lo, n, p1) + binom.sf(k_hi - 1, n, p1). `min_detectable_diff` is the smallest d
such that both p0 - d and p0 + d (where they exist) are rejected with probability >= power, found with
brentq. No normal approximation is used, so it stays right near p0 = 0 or 1 (for p0 = 1 any failure
rejects and the answer is 1 - (1 - power)^(1/n)).
"""

from __future__ import annotations

import math

from scipy import optimize, stats

from specverify.errors import InputError

from .errors import check_unit_open
from .results import BinomialResult


def _integer(value, name: str) -> int:
    try:
        integral = int(value) == value
    except (TypeError, ValueError, OverflowError):
        integral = False
    if isinstance(value, bool) or not integral:
        raise InputError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _rejection_region(n: int, p0: float, alpha: float) -> tuple[int, int]:
    """(k_lo, k_hi): the two-sided binomtest at level alpha rejects k <= k_lo or k >= k_hi
    (k_lo = -1 / k_hi = n + 1 when a side rejects nothing)."""

    def rejects(k: int) -> bool:
        return stats.binomtest(k, n, p0).pvalue <= alpha

    mode = min(n, max(0, int(math.floor((n + 1) * p0))))
    if rejects(mode):  # alpha so large that even the most likely count is rejected
        return n, 0
    low, high = -1, mode  # invariant: low rejects (or is -1), high does not
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if rejects(middle) else (low, middle)
    k_lo = low
    low, high = mode, n + 1  # invariant: low does not reject, high rejects (or is n + 1)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if rejects(middle) else (middle, high)
    return k_lo, high


def _power(n: int, k_lo: int, k_hi: int, p1: float) -> float:
    lower = stats.binom.cdf(k_lo, n, p1) if k_lo >= 0 else 0.0
    upper = stats.binom.sf(k_hi - 1, n, p1) if k_hi <= n else 0.0
    return float(lower + upper)


def _min_detectable_diff(n: int, p0: float, alpha: float, power: float) -> float:
    k_lo, k_hi = _rejection_region(n, p0, alpha)
    worst = 0.0
    for sign, room in ((-1.0, p0), (+1.0, 1.0 - p0)):
        if room <= 0.0:
            continue  # no rate exists on this side of p0

        def shortfall(d: float) -> float:
            return _power(n, k_lo, k_hi, min(1.0, max(0.0, p0 + sign * d))) - power

        if shortfall(0.0) >= 0.0:
            continue
        if shortfall(room) < 0.0:
            return math.inf  # even the most extreme rate on this side is not caught often enough
        worst = max(worst, float(optimize.brentq(shortfall, 0.0, room, xtol=1e-12, rtol=1e-12)))
    return worst


def binomial_test(successes, n, p0, *, alpha=1e-3, power=0.99) -> BinomialResult:
    """Exact two-sided test of `successes` out of `n` independent trials against success rate `p0`.

    Returns BinomialResult(statistic = successes / n, p_value (scipy.stats.binomtest two-sided), n,
    successes, p0, alpha, power, min_detectable_diff): a true rate p1 with |p1 - p0| >=
    min_detectable_diff is rejected at level alpha with probability >= power (exact, see module
    docstring). Assumes independent trials with one common rate.
    """
    n = _integer(n, "n")
    successes = _integer(successes, "successes")
    if n < 1:
        raise InputError(f"n must be at least 1, got {n}")
    if not 0 <= successes <= n:
        raise InputError(f"successes must lie in [0, n = {n}], got {successes}")
    p0 = float(p0)
    if not (math.isfinite(p0) and 0.0 <= p0 <= 1.0):
        raise InputError(f"p0 must be a probability in [0, 1], got {p0!r}")
    alpha = check_unit_open(alpha, "alpha")
    power = check_unit_open(power, "power")
    p_value = float(stats.binomtest(successes, n, p0).pvalue)
    return BinomialResult(statistic=successes / n, p_value=min(1.0, p_value), n=n, successes=successes, p0=p0,
                          alpha=alpha, power=power, min_detectable_diff=_min_detectable_diff(n, p0, alpha, power))
