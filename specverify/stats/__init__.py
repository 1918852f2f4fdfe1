"""Goodness-of-fit statistics, power and family-wise control for the audit (numpy + scipy only).

- `pearson`, `gtest`: chi-squared tests of counts against exact null probabilities, with documented
  cell pooling and a seeded Monte-Carlo fallback (chisquare.py); `observed_counts` tallies coded samples.
- `min_detectable_w`, `min_detectable_tv`, `power_at`: what a test of n samples is sure to catch (power.py).
- `holm`: Holm's step-down family-wise control over several tests (holm.py).
- `binomial_test`: exact two-sided binomial test, e.g. acceptance rate vs 1 - TV(p, q) (binomial.py).
- `rate_bound`, `draws_for_rate`, `detection_probability`: exact Clopper-Pearson bounds on a rare
  event's rate and the draws a bound needs (rare.py).
- `MultinomialEProcess`, `RateEProcess`, `TwoSampleEProcess`, `family_rejections`, `run_sequential`:
  anytime-valid e-processes, valid under continuous monitoring, with their stated power
  (`sequential_min_detectable_tv`, `sequential_n_for_tv`; sequential.py).

Every function returns a frozen result object with `to_dict()`; nothing prints. Bad input raises
`specverify.errors.InputError`; an observation the null forbids raises `ImpossibleObservation`.
"""

from .binomial import binomial_test
from .chisquare import DEFAULT_MC_SAMPLES, gtest, observed_counts, pearson, pool_cells
from .errors import ImpossibleObservation
from .holm import holm
from .power import min_detectable_tv, min_detectable_w, noncentrality_needed, power_at
from .rare import detection_probability, draws_for_rate, rate_bound
from .results import BinomialResult, EProcessResult, RateBoundResult, FamilyResult, GofResult, HolmResult, SequentialRun
from .sequential import (
    BUDGET,
    POWERED,
    REJECTED,
    MultinomialEProcess,
    RateEProcess,
    TwoSampleEProcess,
    concentration_grid,
    doubling,
    family_rejections,
    multinomial_log_e,
    rate_log_e,
    rate_min_detectable_diff,
    run_sequential,
    tuned_concentration,
)
from .sequential import min_detectable_tv as sequential_min_detectable_tv
from .sequential import n_for_tv as sequential_n_for_tv

__all__ = [
    "BUDGET",
    "BinomialResult",
    "RateBoundResult",
    "detection_probability",
    "draws_for_rate",
    "rate_bound",
    "EProcessResult",
    "FamilyResult",
    "MultinomialEProcess",
    "POWERED",
    "REJECTED",
    "RateEProcess",
    "SequentialRun",
    "TwoSampleEProcess",
    "concentration_grid",
    "doubling",
    "family_rejections",
    "multinomial_log_e",
    "rate_log_e",
    "rate_min_detectable_diff",
    "run_sequential",
    "sequential_min_detectable_tv",
    "sequential_n_for_tv",
    "tuned_concentration",
    "DEFAULT_MC_SAMPLES",
    "GofResult",
    "HolmResult",
    "ImpossibleObservation",
    "binomial_test",
    "gtest",
    "holm",
    "min_detectable_tv",
    "min_detectable_w",
    "noncentrality_needed",
    "observed_counts",
    "pearson",
    "pool_cells",
    "power_at",
]
