"""Power of the chi-squared goodness-of-fit test, and the smallest effect it is sure to catch.

Model (asymptotic, local alternatives): with n samples over `dof + 1` cells, null probabilities p0 and
true probabilities p1, both Pearson's X^2 and the likelihood-ratio G are approximately noncentral
chi-squared with `dof` degrees of freedom and noncentrality lambda = n * w^2, where Cohen's effect size
is w = sqrt(sum_i (p1_i - p0_i)^2 / p0_i). The test rejects when the statistic exceeds the
(1 - alpha) quantile of chi2(dof), so

    power_at(n, dof, alpha, w) = P(ncx2(dof, n w^2) > chi2.isf(alpha, dof)).

Meaning of the numbers: alpha is the false-alarm probability of one test (an exact implementation is
flagged with probability alpha); power is the probability that a wrong implementation whose effect size
is at least `min_detectable_w` (or whose total variation is at least `min_detectable_tv`) is flagged.
Both are asymptotic statements; tests/test_stats.py checks them by simulation at moderate n.
"""

from __future__ import annotations

import functools
import math

from scipy import optimize, stats

from specverify.errors import InputError

from .errors import check_unit_open


def _check(n, dof, alpha, power=None):
    try:
        n = float(n)
    except (TypeError, ValueError):
        raise InputError(f"n must be a number, got {type(n).__name__}") from None
    if not math.isfinite(n) or n <= 0:
        raise InputError(f"n must be a positive sample size, got {n!r}")
    try:
        integral = int(dof) == dof
    except (TypeError, ValueError, OverflowError):
        integral = False
    if not integral or dof < 1:
        raise InputError(f"dof must be a positive integer, got {dof!r}")
    alpha = check_unit_open(alpha, "alpha")
    if power is not None:
        power = check_unit_open(power, "power")
    return n, int(dof), alpha, power


def _critical(dof: int, alpha: float) -> float:
    return float(stats.chi2.isf(alpha, dof))


def power_at(n, dof, alpha, w) -> float:
    """Probability that the asymptotic chi2(dof) test at level `alpha` rejects an alternative of
    Cohen's effect size `w` with `n` samples (noncentral chi2, lambda = n w^2). power_at(n, dof, alpha, 0)
    equals alpha."""
    n, dof, alpha, _ = _check(n, dof, alpha)
    w = float(w)
    if not math.isfinite(w) or w < 0:
        raise InputError(f"w must be a finite non-negative effect size, got {w!r}")
    critical = _critical(dof, alpha)
    if w == 0.0:
        return float(stats.chi2.sf(critical, dof))
    return float(stats.ncx2.sf(critical, dof, n * w * w))


def noncentrality_needed(dof, alpha=1e-3, power=0.99) -> float:
    """The noncentrality lambda* at which the chi2(dof) test at level alpha has exactly `power`
    (0.0 if power <= alpha: then every alternative is already detected often enough)."""
    _, dof, alpha, power = _check(1, dof, alpha, power)
    return _noncentrality_needed(dof, alpha, power)


@functools.lru_cache(maxsize=4096)
def _noncentrality_needed(dof: int, alpha: float, power: float) -> float:
    """Cached: every test of an audit asks for the same few (dof, alpha, power)."""
    if power <= alpha:
        return 0.0
    critical = _critical(dof, alpha)

    def shortfall(lam: float) -> float:
        return float(stats.ncx2.sf(critical, dof, lam)) - power

    high = max(1.0, critical)
    while shortfall(high) < 0:
        high *= 2.0
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-12, rtol=1e-12, maxiter=500))


def min_detectable_w(n, dof, alpha=1e-3, power=0.99) -> float:
    """Smallest Cohen's w that the asymptotic chi2(dof) test at level `alpha` rejects with probability
    >= `power` given `n` samples: sqrt(lambda* / n), where lambda* solves
    ncx2.sf(chi2.isf(alpha, dof), dof, lambda*) = power (brentq). Scales exactly like 1/sqrt(n)."""
    n, dof, alpha, power = _check(n, dof, alpha, power)
    return math.sqrt(_noncentrality_needed(dof, alpha, power) / n)


def min_detectable_tv(n, dof, alpha=1e-3, power=0.99) -> float:
    """Smallest total variation distance guaranteed to be detected: min_detectable_w(...) / 2.

    Why w/2. Let d = p1 - p0 with total variation delta = sum|d_i| / 2. By Cauchy-Schwarz,
    (sum |d_i|)^2 = (sum (|d_i|/sqrt(p0_i)) sqrt(p0_i))^2 <= (sum d_i^2 / p0_i)(sum p0_i) = w^2, so
    w >= 2 delta. Every deviation with delta >= w*/2 therefore has w >= w* and is rejected with
    probability >= power (asymptotically; power_at grows with w). The bound is tight: equality holds when
    |d_i| is proportional to p0_i, i.e. mass moved proportionally between two halves of the cells each
    holding null mass 1/2 (the worst-case direction).

    Caveats: this is the TV *seen by the test's cells*. When cells are pooled (see chisquare.py), a
    deviation that moves mass between cells of the same pool is invisible and is not covered; the TV
    between pooled distributions is at most the TV between the original ones. A returned value >= 1
    means no alternative at all is guaranteed to be detected (TV never exceeds 1).
    """
    return min_detectable_w(n, dof, alpha, power) / 2.0
