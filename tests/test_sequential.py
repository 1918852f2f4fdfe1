"""Anytime-valid e-processes (specverify/stats/sequential.py): validity under continuous monitoring,
stated power on planted deviations, rates both ways, two samples both ways, family-wise rules.

Simulations use fixed seeds, so every rate asserted here is a fixed number; the bounds leave room for
the simulation's own error where a statement is about a probability (see each test).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import special, stats

from specverify.errors import InputError
from specverify.stats import (
    BUDGET,
    POWERED,
    REJECTED,
    MultinomialEProcess,
    RateEProcess,
    TwoSampleEProcess,
    concentration_grid,
    doubling,
    family_rejections,
    holm,
    multinomial_log_e,
    rate_log_e,
    run_sequential,
    sequential_min_detectable_tv,
    sequential_n_for_tv,
    tuned_concentration,
)

ALPHA = 0.05


def zipf_law(k: int, s: float = 1.1) -> np.ndarray:
    weights = 1.0 / np.arange(1, k + 1) ** s
    return weights / weights.sum()


def planted(k: int, tv: float) -> tuple[np.ndarray, np.ndarray]:
    """The uniform law over k (even) cells and the worst-direction deviation of total variation tv:
    mass moved proportionally from one half of the cells to the other (w = 2 tv exactly)."""
    p = np.full(k, 1.0 / k)
    q = p.copy()
    q[: k // 2] *= 1 + 2 * tv
    q[k // 2:] *= 1 - 2 * tv
    return p, q


def cumulative_counts(rng, q, sizes, runs) -> np.ndarray:
    """(runs, looks, k) cumulative counts for batches of the given sizes drawn from q."""
    batches = np.stack([rng.multinomial(s, q, size=runs) for s in sizes], axis=1)
    return np.cumsum(batches, axis=1)


def doubling_sizes(first: int, n: int) -> list[int]:
    sizes = [first]
    while sum(sizes) < n:
        sizes.append(min(sum(sizes), n - sum(sizes)))
    return sizes


# ---------------------------------------------------------------------------------------------------
# the e-value itself


def test_log_e_is_the_dirichlet_multinomial_likelihood_ratio():
    law = zipf_law(6)
    counts = np.array([9, 4, 0, 3, 1, 2])
    c = 7.5
    expected = (stats.dirichlet_multinomial.logpmf(counts, c * law, counts.sum())
                - stats.multinomial.logpmf(counts, counts.sum(), law))
    assert multinomial_log_e(counts, law, c) == pytest.approx(expected, rel=1e-12, abs=1e-12)
    process = MultinomialEProcess(law, c)
    process.update(counts[:3].tolist() + [0, 0, 0])
    result = process.update([0, 0, 0] + counts[3:].tolist())
    assert result.log_e == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert result.n == counts.sum()
    assert result.p_value_anytime == pytest.approx(min(1.0, math.exp(-result.max_log_e)))


def test_grid_is_the_average_of_its_members():
    law, counts = zipf_law(5), np.array([30, 5, 9, 2, 1])
    grid = (400.0, 50.0, 6.0)
    members = [math.exp(multinomial_log_e(counts, law, c)) for c in grid]
    assert math.exp(multinomial_log_e(counts, law, grid)) == pytest.approx(np.mean(members), rel=1e-12)


def test_count_in_a_zero_probability_cell_is_a_certain_rejection():
    process = MultinomialEProcess([0.5, 0.5, 0.0], 10.0)
    assert process.update([3, 4, 0]).impossible is False
    result = process.update([0, 0, 1])
    assert result.impossible and result.e == math.inf and result.p_value_anytime == 0.0
    assert result.to_dict()["e"] is None  # JSON-safe


def test_bad_input_raises():
    with pytest.raises(InputError):
        MultinomialEProcess([0.5, 0.6])
    with pytest.raises(InputError):
        MultinomialEProcess([0.5, 0.5], 10.0).update([1, 2, 3])
    with pytest.raises(InputError):
        RateEProcess(0.5, sides="up")
    with pytest.raises(InputError):
        family_rejections([1.0, 2.0], rule="sidak")


# ---------------------------------------------------------------------------------------------------
# validity under continuous monitoring


def test_null_false_alarm_with_a_look_after_every_batch():
    """1000 null runs over a Zipf law of 10 cells, a look after every batch of 10 samples up to 1000
    (100 looks each): the fraction that ever reaches 1/alpha stays <= alpha."""
    law = zipf_law(10)
    rng = np.random.default_rng(2025)
    cum = cumulative_counts(rng, law, [10] * 100, runs=1000)
    grid = concentration_grid(10, 1000, ALPHA)
    ever = multinomial_log_e(cum, law, grid).max(axis=1) >= math.log(1 / ALPHA)
    assert ever.mean() <= ALPHA


def test_naive_pearson_retested_at_every_look_inflates_the_false_alarm_rate():
    """The broken comparator on the same kind of data: a fixed-n chi-squared test re-run after every
    batch (looks from n = 100 on) rejects a true null far more often than alpha. This proves the
    monitoring test above can fail."""
    law = zipf_law(10)
    rng = np.random.default_rng(7)
    cum = cumulative_counts(rng, law, [100] + [10] * 90, runs=1000)
    n = cum.sum(axis=-1, keepdims=True)
    expected = n * law
    chi2 = ((cum - expected) ** 2 / expected).sum(axis=-1)
    ever = (stats.chi2.sf(chi2, df=9) <= ALPHA).any(axis=1)
    assert ever.mean() > 2 * ALPHA


# ---------------------------------------------------------------------------------------------------
# stated power


@pytest.mark.parametrize("k, tv", [(2, 0.05), (10, 0.05), (20, 0.1)])
def test_planted_deviation_at_the_stated_tv_is_caught(k, tv):
    """A sampler biased by exactly the stated min TV (worst direction), looked at in doublings from 64
    up to the n where the stated min TV equals tv, is rejected in >= 95% of 200 seeded runs. The stated
    power is 0.99; 0.95 is the slack for 200 runs (if the true rate were 0.99, seeing <= 190 of 200
    has probability about 5e-4)."""
    n = sequential_n_for_tv(k, tv, ALPHA / 4)
    grid = concentration_grid(k, n, ALPHA)
    stated = sequential_min_detectable_tv(k, n, ALPHA, 0.99, grid)
    assert stated == pytest.approx(tv, rel=0.02)
    p, q = planted(k, stated)
    cum = cumulative_counts(np.random.default_rng(k), q, doubling_sizes(64, n), runs=200)
    caught = multinomial_log_e(cum, p, grid).max(axis=1) >= math.log(1 / ALPHA)
    assert caught.mean() >= 0.95


def test_power_statement_is_monotone_and_inverted_by_n_for_tv():
    values = [sequential_min_detectable_tv(10, n, ALPHA) for n in (100, 1000, 10_000, 100_000)]
    assert values == sorted(values, reverse=True)
    n = sequential_n_for_tv(10, 0.03, ALPHA)
    assert sequential_min_detectable_tv(10, n, ALPHA) <= 0.03 < sequential_min_detectable_tv(10, n - 1, ALPHA)
    assert tuned_concentration(10, 20_000) > tuned_concentration(10, 2_000) > 0


# ---------------------------------------------------------------------------------------------------
# the sequential driver


def test_run_sequential_decisions():
    law = zipf_law(8)
    rng = np.random.default_rng(3)
    gross = np.roll(law, 1)
    run = run_sequential(lambda size: rng.multinomial(size, gross), law, ALPHA, power_tv=0.01)
    assert run.decision == REJECTED and run.n <= 256 and run.looks <= 3

    run = run_sequential(lambda size: rng.multinomial(size, law), law, ALPHA, power_tv=0.05,
                         batch_schedule=doubling(100))
    assert run.decision == POWERED and run.min_tv <= 0.05 and run.max_log_e < math.log(1 / ALPHA)

    run = run_sequential(lambda size: rng.multinomial(size, law), law, ALPHA, power_tv=0.01, max_n=3000)
    assert run.decision == BUDGET and run.n == 3000 and run.min_tv > 0.01
    assert run.to_dict()["decision"] == BUDGET


def test_run_sequential_on_a_law_with_one_outcome():
    run = run_sequential(lambda size: np.array([size, 0]), [1.0, 0.0], ALPHA, power_tv=0.01)
    assert run.decision == POWERED and 1 - (1 - run.min_tv) ** run.n == pytest.approx(0.99)
    run = run_sequential(lambda size: np.array([size - 1, 1]), [1.0, 0.0], ALPHA, power_tv=0.01)
    assert run.decision == REJECTED and run.n == 64 and run.e == math.inf


# ---------------------------------------------------------------------------------------------------
# rates


def _rate_runs(p0, rate, sides, runs, sizes, seed):
    rng = np.random.default_rng(seed)
    rejected = 0
    for _ in range(runs):
        process = RateEProcess(p0, sides, n_target=sum(sizes))
        for size in sizes:
            if process.update(rng.binomial(size, rate), size).max_log_e >= math.log(1 / ALPHA):
                rejected += 1
                break
    return rejected / runs


def test_rate_null_false_alarm_with_continuous_monitoring():
    """1000 null runs per side, a look after every batch of 20 up to 1000 (50 looks)."""
    rng = np.random.default_rng(11)
    grid = concentration_grid(2, 1000, ALPHA)
    trials = np.arange(1, 51) * 20
    for sides in ("two", "less", "greater"):
        successes = np.cumsum(rng.binomial(20, 0.3, size=(1000, 50)), axis=1)
        ever = rate_log_e(successes, trials, 0.3, sides, grid).max(axis=1) >= math.log(1 / ALPHA)
        assert ever.mean() <= ALPHA


def test_rate_process_matches_its_closed_form():
    process = RateEProcess(0.3, "two", 40.0)
    process.update(5, 10)
    result = process.update(9, 20)
    a, b, s, f = 12.0, 28.0, 14, 16
    expected = (special.betaln(a + s, b + f) - special.betaln(a, b)) - s * math.log(0.3) - f * math.log(0.7)
    assert result.log_e == pytest.approx(expected, rel=1e-12)
    assert RateEProcess(0.3, "greater", 40.0).update(14, 30).log_e > result.log_e  # half the prior, on the data's side


def test_rate_both_ways():
    sizes = doubling_sizes(64, 4096)
    assert _rate_runs(0.8, 0.75, "two", 50, sizes, seed=1) >= 0.9
    assert _rate_runs(0.8, 0.85, "two", 50, sizes, seed=2) >= 0.9
    assert _rate_runs(0.8, 0.75, "less", 50, sizes, seed=3) >= 0.9
    assert _rate_runs(0.8, 0.85, "greater", 50, sizes, seed=4) >= 0.9
    # a one-sided process does not reject the other direction
    assert _rate_runs(0.8, 0.75, "greater", 50, sizes, seed=5) == 0.0
    assert _rate_runs(0.8, 0.85, "less", 50, sizes, seed=6) == 0.0


def test_far_tail_rate_zero_is_violated_by_one_success():
    process = RateEProcess(0.0, "greater")
    assert process.update(0, 1000).e == 1.0
    assert process.update(1, 10).impossible


# ---------------------------------------------------------------------------------------------------
# two samples


def _two_sample_runs(k, tv, n_per_arm, runs, seed, first=64):
    p, q = planted(k, tv)
    rng = np.random.default_rng(seed)
    rejected = 0
    for run in range(runs):
        process = TwoSampleEProcess(k, n_target=n_per_arm, seed=run)
        for size in doubling_sizes(first, n_per_arm):
            if process.update(rng.multinomial(size, p), rng.multinomial(size, q)).max_log_e >= math.log(1 / ALPHA):
                rejected += 1
                break
    return rejected / runs


def test_two_sample_same_law_passes():
    """100 runs with both arms from the same law, looks after every doubling up to 2000 per arm
    (the slow suite runs 300 at 20000 per arm)."""
    assert _two_sample_runs(10, 0.0, 2000, 100, seed=8, first=16) <= ALPHA


def test_two_sample_unequal_batches_stay_valid():
    law = zipf_law(6)
    rng = np.random.default_rng(9)
    rejected = 0
    for run in range(100):
        process = TwoSampleEProcess(6, n_target=1500, seed=run)
        for size_a, size_b in [(10, 50), (100, 20), (300, 300), (1000, 7)]:
            result = process.update(rng.multinomial(size_a, law), rng.multinomial(size_b, law))
            rejected += result.max_log_e >= math.log(1 / ALPHA)
            if result.max_log_e >= math.log(1 / ALPHA):
                break
    assert rejected / 100 <= ALPHA
    assert result.arms == (int(process.counts_a.sum()), int(process.counts_b.sum()))


def test_two_sample_tv_005_apart_rejects():
    """Arms 0.05 apart in TV over 10 cells, 12000 samples per arm: rejected in >= 90% of 30 runs."""
    assert _two_sample_runs(10, 0.05, 12_000, 30, seed=10) >= 0.9


# ---------------------------------------------------------------------------------------------------
# family-wise rules


def test_family_rejections():
    e = [1.0, 200.0, 50.0, 1e6]
    bonferroni = family_rejections(e, ALPHA, "bonferroni")  # threshold m / alpha = 80
    assert bonferroni.rejected.tolist() == [False, True, False, True]
    holm_rule = family_rejections(e, ALPHA, "holm")
    assert holm_rule.rejected.tolist() == holm([1.0, 1 / 200, 1 / 50, 1e-6], ALPHA).rejected.tolist()
    assert holm_rule.rejected.tolist() == [False, True, True, True]
    assert family_rejections([math.inf, 0.0], ALPHA).p_values.tolist() == [0.0, 1.0]


def test_family_false_alarm_with_rows_stopping_at_different_times():
    """400 null audits of 5 rows, each row monitored after every batch of 20 and stopped at its own
    (random) length; Bonferroni on the rows' running maxima rejects some row in <= alpha of audits."""
    rng = np.random.default_rng(12)
    law = zipf_law(4)
    grid = concentration_grid(4, 500, ALPHA / 5)
    cum = cumulative_counts(rng, law, [20] * 50, runs=400 * 5)
    running = np.maximum.accumulate(multinomial_log_e(cum, law, grid), axis=1)
    stops = rng.integers(1, 50, size=400 * 5)
    at_stop = running[np.arange(400 * 5), stops].reshape(400, 5)
    any_rejected = [family_rejections(np.exp(row), ALPHA).rejected.any() for row in at_stop]
    assert np.mean(any_rejected) <= ALPHA


# ---------------------------------------------------------------------------------------------------
# heavier calibration


@pytest.mark.slow
@pytest.mark.parametrize("k", [2, 20, 100])
def test_null_false_alarm_at_larger_sizes(k):
    """2000 null runs up to 20000 samples, looks after every batch of 200 (100 looks)."""
    law = zipf_law(k)
    rng = np.random.default_rng(100 + k)
    grid = concentration_grid(k, 20_000, ALPHA)
    ever = np.zeros(2000, bool)
    for chunk in range(4):
        cum = cumulative_counts(rng, law, [200] * 100, runs=500)
        ever[chunk * 500:(chunk + 1) * 500] = multinomial_log_e(cum, law, grid).max(axis=1) >= math.log(1 / ALPHA)
    assert ever.mean() <= ALPHA


@pytest.mark.slow
def test_two_sample_null_at_larger_sizes():
    assert _two_sample_runs(20, 0.0, 20_000, 300, seed=13) <= ALPHA


@pytest.mark.slow
def test_log_e_matches_savvi():
    multinomial = pytest.importorskip("savvi.multinomial")
    law = zipf_law(7)
    rng = np.random.default_rng(14)
    ours = MultinomialEProcess(law, 250.0)
    theirs = multinomial.Multinomial(ALPHA, law / law.sum(), k=250.0)
    for _ in range(20):
        counts = rng.multinomial(50, np.roll(law, 1) * 0.1 + law * 0.9)
        result = ours.update(counts)
        theirs.update(counts)
        assert result.log_e == pytest.approx(math.log(theirs.odds), rel=1e-9, abs=1e-9)
