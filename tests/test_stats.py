"""Tests of specverify.stats: calibration and power by seeded simulation, equality with scipy, the pooling
rule, input errors, Holm, the binomial test, and power scaling.

Statistical tests here use fixed seeds, so each is deterministic. Their false-alarm rate is stated as
the probability that a *correct* implementation would fail for a randomly chosen seed (about 1e-3 per
bound below: every bound is a binomial 99.9% interval or a KS p > 1e-3); their power is stated where
they check a property that a broken implementation would violate by a wide margin.
"""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest
from scipy import special, stats as sps

from specverify import stats
from specverify.errors import InputError

# A 20-cell null with a tail of small cells: at n = 2000 the expected counts run from 597 down to 0.4,
# so the last 8 cells are pooled into 2 pools (13 dof).
CALIBRATION_WEIGHTS = np.array([300, 200, 150, 100, 80, 60, 40, 30, 20, 10, 5, 3, 2, 1.5, 1, 1, 0.5, 0.5, 0.3, 0.2])
CALIBRATION_P0 = CALIBRATION_WEIGHTS / CALIBRATION_WEIGHTS.sum()
CALIBRATION_N = 2000


def _false_alarm_interval(runs: int, level: float) -> tuple[float, float]:
    """Binomial 99.9% interval for the number of p-values below `level` among `runs` null runs."""
    low, high = sps.binom.interval(0.999, runs, level)
    return low, high


# --------------------------------------------------------------------------------------------------
# calibration under the null


@pytest.mark.parametrize("test", [stats.pearson, stats.gtest], ids=["pearson", "gtest"])
def test_asymptotic_p_values_are_uniform_under_the_null(test):
    """300 null runs: KS against uniform (fails a calibrated test with probability 1e-3) and the
    false-alarm count at 0.05 inside its binomial 99.9% interval (fails with probability ~1e-3). A
    test whose p-values were off by a factor 1.5 at 0.05 fails the count with probability ~0.9."""
    runs = 300
    rng = np.random.default_rng(20240601)
    samples = rng.multinomial(CALIBRATION_N, CALIBRATION_P0, size=runs)
    results = [test(counts, CALIBRATION_P0) for counts in samples]
    assert all(r.p_value_method == "asymptotic" for r in results)
    assert all(r.cells == 14 and r.dof == 13 for r in results)  # pooling happened: 20 cells -> 14
    p_values = np.array([r.p_value for r in results])
    assert sps.kstest(p_values, "uniform").pvalue > 1e-3
    low, high = _false_alarm_interval(runs, 0.05)
    assert low <= np.count_nonzero(p_values < 0.05) <= high


@pytest.mark.parametrize("test", [stats.pearson, stats.gtest], ids=["pearson", "gtest"])
def test_monte_carlo_p_values_are_uniform_under_the_null(test):
    """Forced Monte-Carlo path (1000 resamples, seed per run): same KS and false-alarm bounds, 150 runs."""
    runs = 150
    rng = np.random.default_rng(77)
    samples = rng.multinomial(CALIBRATION_N, CALIBRATION_P0, size=runs)
    results = [test(counts, CALIBRATION_P0, mc_samples=1000, seed=run) for run, counts in enumerate(samples)]
    assert all(r.p_value_method == "monte-carlo" and r.cells == 20 for r in results)  # unpooled cells
    p_values = np.array([r.p_value for r in results])
    assert sps.kstest(p_values, "uniform").pvalue > 1e-3
    low, high = _false_alarm_interval(runs, 0.05)
    assert low <= np.count_nonzero(p_values < 0.05) <= high


def _exact_p_value(statistic_fn, observed, probs):
    """P(T >= T_obs) under multinomial(n, probs), by enumerating every outcome (small n only)."""
    n, cells = int(observed.sum()), probs.size
    expected = n * probs
    threshold = statistic_fn(observed.astype(float), expected) * (1 - 1e-12)
    total = 0.0
    for bars in itertools.combinations(range(n + cells - 1), cells - 1):
        edges = (-1,) + bars + (n + cells - 1,)
        counts = np.array([edges[i + 1] - edges[i] - 1 for i in range(cells)], dtype=float)
        if statistic_fn(counts, expected) >= threshold:
            total += math.exp(sps.multinomial.logpmf(counts, n, probs))
    return total


@pytest.mark.parametrize("method", ["pearson", "gtest"])
def test_monte_carlo_fallback_matches_the_exact_p_value(method):
    """n = 6 over 4 cells: pooling leaves one pool, so the p-value falls back to Monte-Carlo; with 10^4
    resamples it must lie within 4 standard errors (+1/R) of the exact p-value by enumeration
    (false alarm ~6e-5; a wrong tail direction or a wrong resampling law misses by far more)."""
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    test = getattr(stats, method)
    statistic_fn = {"pearson": lambda o, e: ((o - e) ** 2 / e).sum(),
                    "gtest": lambda o, e: 2 * special.xlogy(o, o / e).sum()}[method]
    for observed in ([3, 2, 1, 0], [0, 1, 1, 4], [6, 0, 0, 0]):
        observed = np.array(observed)
        result = test(observed, probs)
        assert result.p_value_method == "monte-carlo" and "pooling" in result.note
        assert result.statistic == pytest.approx(statistic_fn(observed.astype(float), 6 * probs), rel=1e-12)
        exact = _exact_p_value(statistic_fn, observed, probs)
        resamples = stats.DEFAULT_MC_SAMPLES
        assert abs(result.p_value - exact) <= 4 * math.sqrt(exact * (1 - exact) / resamples) + 1 / resamples
        # seeded: the same seed gives the same p-value, another seed (almost surely) another
        assert test(observed, probs).p_value == result.p_value


# --------------------------------------------------------------------------------------------------
# power


def _worst_case_alternative(p0: np.ndarray, half: np.ndarray, tv: float) -> np.ndarray:
    """Move mass proportionally to p0 from one half (null mass 1/2) to the other: TV = tv, w = 2 tv."""
    return np.where(half, p0 * (1 + 2 * tv), p0 * (1 - 2 * tv))


@pytest.mark.parametrize("test", [stats.pearson, stats.gtest], ids=["pearson", "gtest"])
def test_power_at_min_detectable_tv_is_as_stated(test):
    """n = 5000, 16 cells (dof 15), alpha = 1e-3, power 0.99. At TV = min_detectable_tv in the worst-case
    direction, 600 seeded runs must detect at least the binomial 0.1% quantile of Binomial(600, 0.99)
    (585, i.e. 97.5%); a min_detectable_tv 10% too small (true power 0.956) fails this with probability
    ~0.99. At a quarter of that TV the asymptotic power is 0.0086: detections must stay at or below the
    99.9% quantile of that binomial (13 of 600), so the stated power is neither optimistic nor vacuous."""
    n, alpha, power, runs = 5000, 1e-3, 0.99, 600
    base = np.array([8, 6, 5, 4, 3, 2, 1.5, 1.0])
    p0 = np.concatenate([base, base]) / (2 * base.sum())
    half = np.arange(16) < 8  # each half holds null mass exactly 1/2
    tv = stats.min_detectable_tv(n, 15, alpha, power)
    assert 0.05 < tv < 0.06

    rng = np.random.default_rng(4242)
    p1 = _worst_case_alternative(p0, half, tv)
    assert 0.5 * np.abs(p1 - p0).sum() == pytest.approx(tv, rel=1e-12)
    assert math.sqrt(((p1 - p0) ** 2 / p0).sum()) == pytest.approx(2 * tv, rel=1e-12)  # worst case: w = 2 TV
    results = [test(counts, p0, alpha=alpha, power=power) for counts in rng.multinomial(n, p1, size=runs)]
    assert all(r.dof == 15 and r.min_detectable_tv == pytest.approx(tv) for r in results)
    detected = sum(r.p_value < alpha for r in results)
    assert detected >= sps.binom.ppf(0.001, runs, power)

    weak = _worst_case_alternative(p0, half, tv / 4)
    weak_power = stats.power_at(n, 15, alpha, 2 * tv / 4)
    assert weak_power < 0.02
    detected_weak = sum(test(counts, p0, alpha=alpha).p_value < alpha for counts in rng.multinomial(n, weak, size=runs))
    assert detected_weak <= sps.binom.isf(0.001, runs, weak_power)
    assert detected_weak < detected / 10


def test_min_detectable_tv_scales_like_one_over_sqrt_n():
    for dof in (1, 15, 63):
        for n in (1_000, 100_000):
            ratio = stats.min_detectable_tv(n, dof, 1e-4) / stats.min_detectable_tv(4 * n, dof, 1e-4)
            assert ratio == pytest.approx(2.0, rel=0.01)
    # more cells or a smaller alpha need a larger effect
    assert stats.min_detectable_tv(10_000, 63) > stats.min_detectable_tv(10_000, 15)
    assert stats.min_detectable_tv(10_000, 15, alpha=1e-4) > stats.min_detectable_tv(10_000, 15, alpha=1e-3)


def test_power_at_inverts_min_detectable_w():
    for n, dof, alpha, power in [(10_000, 15, 1e-4, 0.99), (500, 3, 0.05, 0.8), (10**6, 63, 1e-3, 0.5)]:
        w = stats.min_detectable_w(n, dof, alpha, power)
        assert stats.power_at(n, dof, alpha, w) == pytest.approx(power, abs=1e-9)
        assert stats.power_at(n, dof, alpha, 0.9 * w) < power
        assert stats.min_detectable_tv(n, dof, alpha, power) == w / 2
    assert stats.power_at(1000, 5, 0.01, 0.0) == pytest.approx(0.01, rel=1e-9)
    with pytest.raises(InputError, match="dof"):
        stats.min_detectable_w(100, 0)
    with pytest.raises(InputError, match="alpha"):
        stats.min_detectable_w(100, 3, alpha=1.5)


# --------------------------------------------------------------------------------------------------
# equality with scipy, pooling, result objects


def test_equals_scipy_without_pooling():
    rng = np.random.default_rng(3)
    for cells in (2, 7, 50):
        probs = rng.dirichlet(np.full(cells, 5.0))
        n = int(60 / probs.min()) + 1  # every expected count >= 60: no pooling
        observed = rng.multinomial(n, probs)
        pearson = stats.pearson(observed, probs)
        gtest = stats.gtest(observed, probs)
        assert pearson.cells == gtest.cells == cells and pearson.dof == cells - 1
        reference = sps.chisquare(observed, n * probs)
        assert pearson.statistic == pytest.approx(reference.statistic, rel=1e-12)
        assert pearson.p_value == pytest.approx(reference.pvalue, rel=1e-9, abs=1e-300)
        reference = sps.power_divergence(observed, n * probs, lambda_="log-likelihood")
        assert gtest.statistic == pytest.approx(reference.statistic, rel=1e-12)
        assert gtest.p_value == pytest.approx(reference.pvalue, rel=1e-9, abs=1e-300)
        assert np.sum(np.square(pearson.residuals)) == pytest.approx(pearson.statistic, rel=1e-12)


def test_pooling_follows_the_documented_rule():
    # the module docstring's worked example, plus a zero-probability cell (dropped)
    probs = np.array([0.40, 0.30, 0.20, 0.04, 0.03, 0.03, 0.0])
    observed = np.array([38, 33, 19, 5, 2, 3, 0])
    result = stats.pearson(observed, probs)
    assert result.pools == ((0,), (1,), (2, 3), (4, 5))
    np.testing.assert_array_equal(result.observed, [38, 33, 24, 5])
    np.testing.assert_allclose(result.expected, [40, 30, 24, 6], rtol=1e-12)
    assert result.cells == 4 and result.dof == 3 and result.p_value_method == "asymptotic"
    np.testing.assert_allclose(result.residuals, (result.observed - result.expected) / np.sqrt(result.expected))
    assert result.statistic == pytest.approx(sps.chisquare(result.observed, result.expected).statistic, rel=1e-12)

    # small cells pooled in ascending order: {1,1,1,1,1} reaches 5, the leftover {1,1} joins the next cell
    assert stats.pool_cells([1, 1, 1, 1, 1, 1, 1, 10], 5) == ((0, 1, 2, 3, 4), (5, 6, 7))
    # order of the input does not matter, only the expected counts (ties broken by index)
    assert stats.pool_cells([10, 1, 7, 1, 1, 1, 1, 1, 1], 5) == ((0,), (1, 3, 4, 5, 6), (2, 7, 8))
    # a leftover pool at the very end joins the last closed pool
    assert stats.pool_cells([3, 3, 3], 5) == ((0, 1, 2),)
    # nothing small: nothing pooled
    assert stats.pool_cells([5, 6, 7], 5) == ((0,), (1,), (2,))


def test_vacuous_and_to_dict():
    result = stats.gtest([0, 7, 0], [0.0, 1.0, 0.0])
    assert (result.statistic, result.p_value, result.dof, result.cells) == (0.0, 1.0, 0, 1)
    assert math.isnan(result.min_detectable_tv) and "vacuous" in result.note
    as_dict = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert as_dict["min_detectable_tv"] is None and as_dict["pools"] == [[1]] and as_dict["observed"] == [7]

    result = stats.pearson([30, 70], [0.3, 0.7])
    as_dict = json.loads(json.dumps(result.to_dict(), allow_nan=False))
    assert set(as_dict) >= {"statistic", "p_value", "dof", "n", "method", "p_value_method", "cells", "alpha",
                            "min_detectable_tv", "min_detectable_w", "residuals", "observed", "expected"}
    assert as_dict["n"] == 100 and as_dict["method"] == "pearson" and as_dict["statistic"] == 0.0
    assert isinstance(as_dict["dof"], int) and isinstance(as_dict["observed"][0], int)
    with pytest.raises(ValueError):
        result.residuals[0] = 1.0  # result arrays are read-only


def test_tiny_float_error_in_the_probabilities_is_accepted():
    probs = np.full(10, 0.1)
    for scale in (1 - 1e-11, 1 + 1e-11):  # within SUM_ATOL = 1e-9: accepted
        assert stats.pearson(np.full(10, 10), probs * scale).statistic == pytest.approx(0.0, abs=1e-9)
    with pytest.raises(InputError, match="sum to"):  # outside: rejected
        stats.pearson(np.full(10, 10), probs * (1 + 1e-8))


# --------------------------------------------------------------------------------------------------
# bad input


BAD_INPUTS = [
    ([1, 2, 3], [0.2, np.nan, 0.8], "not finite"),
    ([1, np.inf, 3], [0.2, 0.3, 0.5], "non-finite count"),
    ([1, 2, 3], [0.5, -0.1, 0.6], "negative probability"),
    ([1, -2, 3], [0.2, 0.3, 0.5], "negative count"),
    ([1, 2.5, 3], [0.2, 0.3, 0.5], "non-integer count"),
    ([1, 2, 3], [0.2, 0.3, 0.4], "sum to"),
    ([1, 2, 3], [0.5, 0.5], "length mismatch"),
    ([0, 0, 0], [0.2, 0.3, 0.5], "n = 0"),
    ([[1, 2], [3, 4]], [0.5, 0.5], "1-D"),
    ([], [], "no cells"),
]


@pytest.mark.parametrize("test", [stats.pearson, stats.gtest], ids=["pearson", "gtest"])
@pytest.mark.parametrize("observed,probs,message", BAD_INPUTS, ids=[m for _, _, m in BAD_INPUTS])
def test_bad_input_raises_input_error(test, observed, probs, message):
    with pytest.raises(InputError, match=message) as info:
        test(observed, probs)
    assert not isinstance(info.value, stats.ImpossibleObservation)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("test", [stats.pearson, stats.gtest], ids=["pearson", "gtest"])
def test_observation_in_a_zero_probability_cell_is_impossible(test):
    with pytest.raises(stats.ImpossibleObservation, match="cell 2 .* 4 time") as info:
        test([5, 6, 4, 0], [0.5, 0.5, 0.0, 0.0])
    assert (info.value.cell, info.value.count) == (2, 4)
    assert isinstance(info.value, InputError)


def test_bad_options_raise_input_error():
    for options, message in [({"min_expected": 0}, "min_expected"), ({"alpha": 0}, "alpha"),
                             ({"power": 1}, "power"), ({"mc_samples": 0}, "mc_samples"),
                             ({"mc_samples": 2.5}, "mc_samples")]:
        with pytest.raises(InputError, match=message):
            stats.pearson([5, 5], [0.5, 0.5], **options)


# --------------------------------------------------------------------------------------------------
# observed_counts


def test_observed_counts_matches_bincount_in_support_order():
    rng = np.random.default_rng(11)
    support = rng.permutation(np.arange(1000, dtype=np.int64) * 7_919_000_003 - 12345)  # large, unsorted codes
    picks = rng.integers(0, 1000, size=200_000)
    counts = stats.observed_counts(support[picks].reshape(400, 500), support)
    np.testing.assert_array_equal(counts, np.bincount(picks, minlength=1000))
    assert counts.dtype == np.int64
    np.testing.assert_array_equal(stats.observed_counts(np.array([], np.int64), support), np.zeros(1000))


def test_observed_counts_rejects_codes_outside_the_support():
    with pytest.raises(stats.ImpossibleObservation, match="sample code 9 .*2 occurrence") as info:
        stats.observed_counts([3, 9, 5, 9, 3], np.array([5, 3, 1]))
    assert (info.value.cell, info.value.count) == (9, 2)
    with pytest.raises(InputError, match="not distinct"):
        stats.observed_counts([3], [3, 3])
    with pytest.raises(InputError, match="integers"):
        stats.observed_counts([3.5], [3])


# --------------------------------------------------------------------------------------------------
# Holm


def test_holm_hand_checked_example():
    # sorted 0.005, 0.01, 0.03, 0.04 times 4, 3, 2, 1 = 0.02, 0.03, 0.06, 0.04; running max 0.02, 0.03, 0.06, 0.06
    result = stats.holm([0.01, 0.04, 0.03, 0.005], alpha=0.05)
    np.testing.assert_allclose(result.adjusted_p, [0.03, 0.06, 0.06, 0.02], rtol=1e-12)
    np.testing.assert_array_equal(result.rejected, [True, False, False, True])
    assert result.alpha == 0.05
    assert json.loads(json.dumps(result.to_dict()))["rejected"] == [True, False, False, True]


def test_holm_adjusted_p_values_are_monotone_and_capped():
    rng = np.random.default_rng(5)
    for m in (1, 2, 10, 57):
        p = np.concatenate([rng.uniform(0, 1, m), rng.uniform(0, 1e-3, m)])
        p[0] = p[1]  # a tie
        result = stats.holm(p, alpha=1e-2)
        order = np.argsort(p, kind="stable")
        assert np.all(np.diff(result.adjusted_p[order]) >= 0)
        assert np.all(result.adjusted_p <= 1) and np.all(result.adjusted_p >= p)
        assert result.adjusted_p[0] == result.adjusted_p[1]
        np.testing.assert_array_equal(result.rejected, result.adjusted_p <= 1e-2)
        # step-down by definition: reject while p_(j) <= alpha / (2m - j + 1)
        expected = np.zeros(p.size, bool)
        for j, index in enumerate(order):
            if p[index] > 1e-2 / (p.size - j):
                break
            expected[index] = True
        np.testing.assert_array_equal(result.rejected, expected)
    assert stats.holm([]).rejected.size == 0


def test_holm_rejects_bad_p_values():
    with pytest.raises(InputError, match="entry 1 is NaN"):
        stats.holm([0.1, np.nan])
    with pytest.raises(InputError, match="not in \\[0, 1\\]"):
        stats.holm([0.1, 1.5])


# --------------------------------------------------------------------------------------------------
# binomial


def test_binomial_test_p_value_and_exact_power():
    result = stats.binomial_test(1380, 2000, 0.7, alpha=1e-3)
    assert result.statistic == 0.69 and result.n == 2000 and result.p0 == 0.7
    assert result.p_value == pytest.approx(sps.binomtest(1380, 2000, 0.7).pvalue, rel=1e-12)
    d = result.min_detectable_diff
    # normal approximation as a sanity bound on the exact answer (within 10%)
    z = sps.norm.isf(1e-3 / 2) + sps.norm.isf(0.01)
    assert d == pytest.approx(z * math.sqrt(0.7 * 0.3 / 2000), rel=0.1)
    # simulation of scipy's own test at the worse direction: 1000 runs each side, detections at least the
    # 0.1% quantile of Binomial(1000, 0.99) (984): a region computed for the wrong test would miss this
    rng = np.random.default_rng(9)
    for p1 in (0.7 - d, 0.7 + d):
        hits = sum(sps.binomtest(int(k), 2000, 0.7).pvalue <= 1e-3 for k in rng.binomial(2000, p1, size=1000))
        assert hits >= sps.binom.ppf(0.001, 1000, 0.99)


def test_binomial_test_at_the_boundary():
    # p0 = 1: any failure rejects; power (1 - d)^n... smallest d with 1 - (1 - d)^n >= power
    result = stats.binomial_test(10, 10, 1.0, power=0.99)
    assert result.p_value == 1.0
    assert result.min_detectable_diff == pytest.approx(1 - 0.01 ** (1 / 10), rel=1e-9)
    assert stats.binomial_test(9, 10, 1.0).p_value == 0.0
    # far too few trials to detect anything upward from 0.9999
    assert stats.binomial_test(10, 10, 0.9999).min_detectable_diff == math.inf
    assert json.loads(json.dumps(stats.binomial_test(10, 10, 0.9999).to_dict()))["min_detectable_diff"] is None
    for args, message in [((3, 2, 0.5), "successes"), ((1, 0, 0.5), "n must"), ((1, 2, 1.5), "p0"),
                          ((1.5, 2, 0.5), "integer")]:
        with pytest.raises(InputError, match=message):
            stats.binomial_test(*args)
