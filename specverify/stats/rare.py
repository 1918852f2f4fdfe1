"""Exact (Clopper-Pearson) bounds on the rate of a rare event, and the draws a bound needs.

A rare-event row counts `events` (impossible emissions) in `n` independent draws. Under any engine the
count is Binomial(n, r) for its true rate r. The one-sided Clopper-Pearson upper bound at level alpha,

    upper = 1                                    if events == n
          = beta.ppf(1 - alpha, events + 1, n - events)   otherwise,

satisfies P(r <= upper) >= 1 - alpha for every r (exact: it inverts the binomial tail, no normal
approximation). With no event it is 1 - alpha ** (1 / n). `draws_for_rate(rate, alpha)` is the smallest n
whose zero-event bound is at most `rate`: n = ceil(log(alpha) / log(1 - rate)) (about 3.0e7 draws for
1e-7 at alpha 0.05, 6.9e7 at alpha 1e-3). The chance that a rate r is seen at all in n draws is
1 - (1 - r) ** n (`detection_probability`): at n = draws_for_rate(r, alpha) it is exactly 1 - alpha.
"""

from __future__ import annotations

import math

from scipy import stats

from specverify.errors import InputError

from .binomial import _integer
from .errors import check_unit_open
from .results import RateBoundResult


def draws_for_rate(rate, alpha) -> int:
    """The fewest draws whose zero-event Clopper-Pearson upper bound at level `alpha` is <= `rate`."""
    rate = check_unit_open(rate, "rate")
    alpha = check_unit_open(alpha, "alpha")
    return int(math.ceil(math.log(alpha) / math.log1p(-rate)))


def detection_probability(rate, n) -> float:
    """P(at least one event in n draws at rate `rate`) = 1 - (1 - rate) ** n."""
    rate = check_unit_open(rate, "rate")
    n = _integer(n, "n")
    return float(-math.expm1(n * math.log1p(-rate)))


def rate_bound(events, n, *, alpha=0.05) -> RateBoundResult:
    """The exact one-sided Clopper-Pearson bounds on a rate from `events` in `n` draws at level `alpha`
    (module docstring). Returns RateBoundResult(events, n, alpha, rate = events / n, upper, lower)."""
    n = _integer(n, "n")
    events = _integer(events, "events")
    if n < 1:
        raise InputError(f"n must be at least 1, got {n}")
    if not 0 <= events <= n:
        raise InputError(f"events must lie in [0, n = {n}], got {events}")
    alpha = check_unit_open(alpha, "alpha")
    if events == 0:
        upper = -math.expm1(math.log(alpha) / n)          # 1 - alpha ** (1 / n), without cancellation
    elif events == n:
        upper = 1.0
    else:
        upper = float(stats.beta.ppf(1.0 - alpha, events + 1, n - events))
    lower = 0.0 if events == 0 else float(stats.beta.ppf(alpha, events, n - events + 1))
    return RateBoundResult(events=events, n=n, alpha=alpha, rate=events / n, upper=float(upper), lower=lower)
