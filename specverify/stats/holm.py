"""Holm's step-down procedure: family-wise error control over several tests.

Sort the m p-values ascending, p_(1) <= ... <= p_(m). Reject H_(1), H_(2), ... while
p_(j) <= alpha / (m - j + 1), and stop at the first failure. Equivalently, with adjusted p-values

    adjusted_(j) = min(1, max_{i <= j} (m - i + 1) p_(i)),

reject exactly the hypotheses with adjusted_p <= alpha. Meaning: whatever the dependence between the
tests, the probability of rejecting any true null is at most alpha (strong control); it is uniformly
more powerful than Bonferroni (alpha / m for every test). The audit runs a battery of checks as one
family, so a clean implementation is flagged anywhere with probability <= alpha.

Worked example, alpha = 0.05: p = [0.01, 0.04, 0.03, 0.005]; sorted 0.005, 0.01, 0.03, 0.04 times
4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04 -> running max 0.02, 0.03, 0.06, 0.06; in input order
adjusted = [0.03, 0.06, 0.06, 0.02], rejected = [True, False, False, True].
"""

from __future__ import annotations

import numpy as np

from specverify.errors import InputError

from .errors import check_unit_open
from .results import HolmResult, _frozen_array


def holm(p_values, alpha=1e-3) -> HolmResult:
    """Holm-adjust `p_values` (1-D, each in [0, 1], no NaN) and reject at family-wise level `alpha`.

    Returns HolmResult(rejected, adjusted_p, alpha) in the input order; ties are handled so that equal
    p-values get equal adjusted p-values. An empty family rejects nothing.
    """
    try:
        p = np.asarray(p_values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"p_values: not a numeric array ({exc})") from None
    if p.ndim != 1:
        raise InputError(f"p_values: expected a 1-D array, got shape {p.shape}")
    nan = np.isnan(p)
    if nan.any():
        raise InputError(f"p_values: entry {int(np.argmax(nan))} is NaN")
    outside = (p < 0) | (p > 1)
    if outside.any():
        k = int(np.argmax(outside))
        raise InputError(f"p_values: entry {k} is {p[k]!r}, not in [0, 1]")
    alpha = check_unit_open(alpha, "alpha")
    m = p.size
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])  # (m - j + 1) p_(j), 1-based j
    adjusted_sorted = np.maximum.accumulate(scaled) if m else scaled
    adjusted = np.empty(m, dtype=np.float64)
    adjusted[order] = adjusted_sorted
    return HolmResult(rejected=_frozen_array(adjusted <= alpha, np.bool_),
                      adjusted_p=_frozen_array(adjusted, np.float64), alpha=alpha)
