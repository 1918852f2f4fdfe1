"""Decisive audits (`--stop decisive`, `battery.decisive`): family-wise false alarms under continuous
monitoring stay <= alpha, a deviation of the stated TV is caught, a real exact engine passes with every
row stating its n and min TV, a real mutant fails fast naming its row and what did not run, and
`--stop fixed` is the fixed-budget audit.

The calibration runs the decisive driver on a synthetic battery (three checks of multinomial, rate and
p-value rows whose draws come from the round's context, exactly as a check's do), so thousands of
audits take seconds; the real audits show the wiring.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import numpy as np
import pytest

from specverify import stats
from specverify.audit import prepare
from specverify.battery import decisive
from specverify.battery.base import CheckResult, Context
from specverify.verdicts import FAIL, PASS, SKIP

LAW = np.array([0.4, 0.25, 0.15, 0.1, 0.06, 0.04])
RATE = 0.3
CHECKS = ("alpha", "beta", "gamma")


def planted(tv: float) -> np.ndarray:
    """LAW with mass tv moved from the upper half of the cells to the lower half (proportionally):
    TV(planted, LAW) = tv exactly."""
    q = LAW.copy()
    top, low = slice(0, 3), slice(3, 6)
    q[top] -= tv * LAW[top] / LAW[top].sum()
    q[low] += tv * LAW[low] / LAW[low].sum()
    return q


def synthetic_check(law_of_row):
    """run_check(ctx_r, name) of a synthetic battery: per check two multinomial rows, one rate row and
    one p-value row, each drawing ctx_r.samples samples from `law_of_row(check, row)`."""
    def run_check(ctx_r, name):
        rows = []
        for i in range(2):
            rng = ctx_r.draws("synthetic", name, i)
            counts = rng.multinomial(ctx_r.samples, law_of_row(name, i))
            rows.append(CheckResult(f"{name}.multi[{i}]", PASS, n=ctx_r.samples, p_value=0.5, dof=5,
                                    data={"observed": counts.tolist(), "expected": (LAW * ctx_r.samples).tolist()}))
        rng = ctx_r.draws("synthetic", name, "rate")
        hits = int(rng.binomial(ctx_r.samples, RATE))
        rows.append(CheckResult(f"{name}.rate", PASS, n=ctx_r.samples, p_value=0.5, dof=1,
                                data={"accepted": hits, "alpha": RATE}))
        rng = ctx_r.draws("synthetic", name, "p")
        counts = rng.multinomial(ctx_r.samples, LAW)
        res = stats.pearson(counts, LAW, alpha=ctx_r.alpha)
        rows.append(CheckResult(f"{name}.pvalue", PASS, n=ctx_r.samples, p_value=res.p_value, dof=res.dof,
                                statistic=res.statistic))
        rows.append(CheckResult(f"{name}.exact", PASS, exact=True, n=1))
        return rows
    return run_check


def synthetic_audit(seed: int, law_of_row, *, alpha=0.05, cap=8000, power_tv=0.02, fail_fast=False):
    ctx = Context(seed=seed, samples=cap, alpha=alpha)
    out = decisive.run(ctx, list(CHECKS), synthetic_check(law_of_row), scales=lambda n: True,
                       power_tv=power_tv, fail_fast=fail_fast, first=500)
    return out


def any_failed(out) -> bool:
    return any(r.verdict == FAIL for rows in out.rows.values() for r in rows)


def test_null_family_wise_false_alarms_stay_below_alpha():
    """400 exact synthetic audits at alpha 0.05 (12 statistical rows each, looked at after every
    round: 500, 1000, ..., 8000 samples): the family-wise false-alarm rate is <= alpha. With 400 audits,
    a true rate of 0.05 gives more than 30 alarms with probability ~0.08 (binomial), so 30 allows for
    the simulation's own noise; the e-processes' real rate is far below (docs/statistics.md)."""
    alarms = sum(any_failed(synthetic_audit(seed, lambda c, i: LAW)) for seed in range(400))
    assert alarms <= 30, alarms


def test_a_naive_rule_would_inflate_the_same_monitoring():
    """The comparator that makes the test above able to fail: a fixed-level Pearson test re-run at
    every round on the pooled counts (what "look early" does without e-values) alarms far more often
    than its per-look level on the same null draws."""
    level, alarms = 0.05 / 6, 0
    for seed in range(400):
        ctx = Context(seed=seed, samples=8000, alpha=0.05)
        pooled, hit = {}, False
        for r in range(5):
            ctx_r = dataclasses.replace(ctx, samples=min(8000, 500 * 2 ** r), round=r)
            for row in synthetic_check(lambda c, i: LAW)(ctx_r, "alpha")[:2]:
                pooled[row.name] = pooled.get(row.name, 0) + np.asarray(row.data["observed"])
                hit |= stats.pearson(pooled[row.name], LAW, alpha=level).p_value <= level
        alarms += hit
    assert alarms / 400 > 2 * 0.05 / 3, alarms     # 2 rows at level alpha/6 with one look would give ~alpha/3


def test_a_deviation_of_the_stated_tv_is_caught():
    """A row biased by TV 0.05 in the worst direction (mass moved proportionally between halves) is
    rejected in >= 95 of 100 audits before the cap, and every exact row of the same audits passes."""
    bad = planted(0.05)
    caught = 0
    for seed in range(100):
        out = synthetic_audit(seed, lambda c, i: bad if (c, i) == ("beta", 1) else LAW, cap=64000, power_tv=0.01)
        rows = {r.name: r for rs in out.rows.values() for r in rs}
        caught += rows["beta.multi[1]"].verdict == FAIL
    assert caught >= 95, caught


def test_rows_state_their_decision_n_and_min_tv_and_inconclusive_rows_are_listed():
    out = synthetic_audit(1, lambda c, i: LAW, cap=2000, power_tv=0.001)
    rows = [r for rs in out.rows.values() for r in rs if not r.exact]
    assert rows and all(r.data["sequential"]["decision"] == stats.BUDGET for r in rows if r.name.endswith("]"))
    assert all(r.verdict == PASS and r.min_detectable_tv > 0.001 and r.n == 500 + 1000 + 2000
               for r in rows if r.name.endswith("]"))
    assert set(out.not_covered) == set(CHECKS) and all("inconclusive" in v for v in out.not_covered.values())
    out = synthetic_audit(1, lambda c, i: LAW, cap=64000, power_tv=0.2)
    assert all(r.data["sequential"]["decision"] == stats.POWERED for rs in out.rows.values() for r in rs if not r.exact)
    assert out.rounds == 1 and not out.not_covered


def test_fail_fast_stops_at_the_first_failing_row_and_lists_the_rest():
    out = synthetic_audit(2, lambda c, i: planted(0.3) if c == "alpha" else LAW, fail_fast=True)
    assert out.stopped_at and out.stopped_at.startswith("alpha.")
    assert {k for k, v in out.not_covered.items() if "not run" in v} == {"beta", "gamma"}
    undecided = [r for r in out.rows["alpha"] if r.verdict == SKIP]
    assert all("fail-fast" in r.detail for r in undecided)
    if undecided:
        assert "not decided" in out.not_covered["alpha"]


def test_decisive_reference_passes_and_states_every_row():
    audit = prepare("reference", {"checks": ("marginal", "joint", "acceptance", "endpoints"), "samples": 4000,
                                  "stop": "decisive", "power_tv": 0.2, "alpha": 0.001}, isolated=False)
    result = audit.run()
    assert result.verdict == PASS and result.stop["mode"] == "decisive"
    stat = [r for r in result.checks if "sequential" in r.data]
    assert len(stat) > 20
    for r in stat:
        seq = r.data["sequential"]
        assert seq["decision"] in (stats.POWERED, stats.BUDGET) and r.n == seq["n"] > 0
        assert r.min_detectable_tv is not None and 0 < r.min_detectable_tv
    assert "round(s)" in result.family()


def test_decisive_mutant_fails_fast_naming_the_row():
    audit = prepare("mutant:threshold-on-p", {"samples": 4000, "stop": "decisive", "fail_fast": True}, isolated=False)
    result = audit.run()
    assert result.verdict == FAIL and result.deviation["kind"] == "biased"
    assert result.stop["stopped_at"] in {r.name for r in result.failed()}
    assert any("not run" in v for v in result.not_covered.values())


def test_fail_fast_without_decisive_is_a_usage_error():
    out = subprocess.run([sys.executable, "-m", "specverify", "audit", "reference", "--fail-fast"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--fail-fast needs --stop decisive" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


@pytest.mark.slow
def test_null_calibration_2000_audits():
    """2000 exact synthetic audits, alpha 0.05: family-wise false alarms <= alpha (a true 0.05 gives
    more than 120 alarms with probability ~0.05)."""
    alarms = sum(any_failed(synthetic_audit(seed, lambda c, i: LAW)) for seed in range(10_000, 12_000))
    assert alarms <= 120, alarms


def test_stop_fixed_is_the_fixed_budget_audit(tmp_path):
    """--stop fixed gives exactly the rows of an audit that does not name --stop (today's behaviour)."""
    base = ["audit", "reference", "--checks", "marginal,acceptance", "--samples", "2000", "-q", "--in-process"]
    got = []
    for extra in ([], ["--stop", "fixed"]):
        path = tmp_path / f"{len(extra)}.json"
        subprocess.run([sys.executable, "-m", "specverify", *base, *extra, "--json", str(path)], check=True,
                       timeout=300, capture_output=True)
        rows = json.loads(path.read_text())["checks"]
        got.append([(r["name"], r["verdict"], r["statistic"], r["p_value"], r["n"]) for r in rows])
        assert "stop" not in json.loads(path.read_text())
    assert got[0] == got[1]


@pytest.mark.slow
def test_null_calibration_of_real_decisive_audits():
    """1000 decisive audits of the exact reference (one-step checks, alpha 0.05, rounds of 250, 500,
    1000, 2000 samples, each looked at): the family-wise false-alarm rate is <= alpha (a true 0.05 gives
    more than 65 alarms with probability ~0.03)."""
    from specverify.adapters.reference import ReferenceEngine
    from specverify.audit import run_audit

    alarms = 0
    for seed in range(1000):
        ctx = Context(seed=20_000 + seed, samples=2000, alpha=0.05)
        result = run_audit(ReferenceEngine(), ctx, ["marginal", "joint", "acceptance"], stop="decisive",
                           power_tv=0.001, first_round=250)
        alarms += result.verdict == FAIL
    assert alarms <= 65, alarms


def test_far_tail_stops_its_draws_early_only_when_its_row_rejects():
    """far_tail does not scale with --samples, but a decisive audit stops its draws once the row's rate
    e-process rejects (a float32 cumulative sum never draws the tail: rejected long before the plan);
    the track rejects at the same n, and the draws are the fixed audit's first ones. An exact sampler
    draws the whole plan. large_scale 0.5: a plan of 3200 draws."""
    from specverify.adapters.reference import ReferenceEngine
    from specverify.audit import run_audit
    from specverify.zoo import make

    def tail_row(result):
        return next(r for r in result.checks if r.name.startswith("chain.far_tail[") or r.name.startswith("far_tail["))

    ctx = Context(seed=3, alpha=1e-3, large_scale=0.5)
    bad = tail_row(run_audit(make("fp32-cumsum-draw"), ctx, ["far_tail"], stop="decisive", power_tv=0.05))
    assert bad.verdict == FAIL and bad.data["sequential"]["decision"] == stats.REJECTED
    assert bad.n < 3200 and bad.n % 800 == 0 and bad.data["n_target"] == 3200 and bad.data["tail_hits"] == 0
    good = tail_row(run_audit(ReferenceEngine(), ctx, ["far_tail"], stop="decisive", power_tv=0.05))
    fixed = tail_row(run_audit(ReferenceEngine(), ctx, ["far_tail"]))
    assert good.verdict == PASS and good.n == fixed.n == 3200
    assert good.data["tail_hits"] == fixed.data["tail_hits"]
