"""Rare-event rows (issue 31): exact Clopper-Pearson bounds, the draws a target rate needs, impossible
emissions at the seeded level, shards that sum to the same row wherever they run.

Statistics: the rows are exact (one impossible emission is a certain bug: false-alarm rate 0). The
planted mutant (tests/plugins/rare_endpoint.py) emits an impossible token in 1e-5 of seeded requests;
at --rare-rate 1e-5 and alpha 1e-3 the row draws 690,773 requests and sees it with probability
1 - (1 - 1e-5) ** 690773 = 1 - 1e-3 (its stated power), seed fixed."""

import math
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
from scipy import stats as sps

import specverify
from specverify import stats
from specverify.battery.base import Context
from specverify.checks import rare_event
from specverify.errors import InputError
from specverify.reference.batch import PAD

MUTANT = "tests/plugins/rare_endpoint.py:PlantedEndpoint"
EXACT_SEEDED = "specverify.reference.vector:VectorSampler"      # the seeded level only (no engine level)


def test_rate_bound_is_clopper_pearson_and_sizes_the_draws():
    for events, n, alpha in [(0, 1000, 0.05), (3, 10_000, 1e-3), (50, 60, 0.01)]:
        b = stats.rate_bound(events, n, alpha=alpha)
        ci = sps.binomtest(events, n).proportion_ci(confidence_level=1 - 2 * alpha, method="exact")
        assert math.isclose(b.upper, ci.high, rel_tol=1e-6) and math.isclose(b.lower, ci.low, rel_tol=1e-6)
    assert math.isclose(stats.rate_bound(0, 30_000_000, alpha=0.05).upper, 1 - 0.05 ** (1 / 30_000_000), rel_tol=1e-9)
    n = stats.draws_for_rate(1e-7, 0.05)
    assert 2.9e7 < n < 3.1e7                        # the "about 3e7 draws with no event, at 95%"
    assert stats.rate_bound(0, n, alpha=0.05).upper <= 1e-7 < stats.rate_bound(0, n - 1, alpha=0.05).upper
    assert math.isclose(stats.detection_probability(1e-7, n), 1 - 0.05, rel_tol=1e-6)
    with pytest.raises(InputError):
        stats.rate_bound(5, 3)
    with pytest.raises(InputError):
        stats.draws_for_rate(0.0, 0.05)


def test_impossible_steps_names_every_way_to_emit_a_zero_probability_token():
    target = np.array([[0.0, 0.5, 0.5, 0.0], [0.0, 0.2, 0.8, 0.0], [0.3, 0.7, 0.0, 0.0]])    # [k + 1 = 3, V = 4]
    draft = np.array([[0.0, 1.0, 0.0, 0.0], [0.25, 0.25, 0.25, 0.25]])                     # [k = 2, V]
    drafts = np.array([[1, 2], [1, 2], [1, 3], [1, 3], [1, 2], [1, 2], [1, 3], [1, 2]])
    out = np.array([[1, 2, 0],          # accepted both, bonus 0 (p = 0.3): possible
                    [1, 2, 2],          # bonus 2 of probability 0
                    [1, 3, 1],          # draft 3 (p = 0) accepted
                    [1, 2, PAD],        # draft 3 rejected, 2 recovered (residual 0.55): possible
                    [1, 0, PAD],        # recovered 0: residual max(0, 0 - 0.25) = 0
                    [1, 1, 7],          # recovered 1 then a token after the rejection
                    [1, 2, 4],          # accepted 1 and 2, bonus id 4 outside [0, V)
                    [1, 2, 9]])         # bonus id 9 outside [0, V)
    bad = rare_event.impossible_steps(out, drafts, target, draft)
    assert bad.tolist() == [False, True, True, False, True, True, True, True]


def _rows(result):
    return [(c.name, c.verdict, c.n, c.detail) for c in result.checks]


def test_a_planted_1e5_endpoint_bug_is_caught_and_the_exact_sampler_passes_with_its_bound():
    bad = specverify.audit(MUTANT, checks=["rare_event", "endpoints"], rare_rate=1e-5, alpha=1e-3, seed=0)
    rows = {c.name: c for c in bad.checks}
    row = rows["seeded.rare_event[V=16 kappa=0,2]"]
    assert row.verdict == "fail" and row.exact and row.n == stats.draws_for_rate(1e-5, 1e-3) == 690_773
    assert row.data["events"] >= 1 and row.data["first"][0]["tokens"][-1] == 15      # id V - 1, probability 0
    # with injected coins the mutant is exact: only drawing enough of its own coins shows it
    assert all(c.verdict in ("pass", "warn") for c in bad.checks if c.check == "endpoints")
    good = specverify.audit(EXACT_SEEDED, checks=["rare_event"], rare_rate=1e-5, alpha=1e-3, seed=0)
    row = {c.name: c for c in good.checks}["seeded.rare_event[V=16 kappa=0,2]"]
    assert good.verdict == "pass" and row.verdict == "pass" and row.data["events"] == 0
    assert row.data["rate_upper"] <= 1e-5 and "rate < 1e-05 at alpha 0.001 (Clopper-Pearson)" in row.detail
    assert math.isclose(row.data["detect_target"], 1 - 1e-3, rel_tol=1e-4)


def test_shards_sum_to_the_same_row_in_any_order_and_none_is_counted_twice():
    ctx = replace(Context(seed=3, alpha=1e-3), rare_rate=3e-6)        # 2,302,582 draws: three shards
    specs = rare_event.plan(ctx, "seeded")
    assert [s["size"] for s in specs] == [1_000_000, 1_000_000, 302_582]
    assert len({s["base"] for s in specs}) == 1 and [s["start"] for s in specs] == [0, 1_000_000, 2_000_000]
    found = [{"index": s["index"], "n": s["size"], "events": i, "first": []} for i, s in enumerate(specs)]
    a = rare_event.row("seeded", specs, found, 0.0, ctx)
    b = rare_event.row("seeded", specs, found[::-1], 0.0, ctx)
    assert (a.verdict, a.n, a.data["events"]) == (b.verdict, b.n, b.data["events"]) == ("fail", 2_302_582, 3)
    with pytest.raises(RuntimeError, match="do not match the plan"):
        rare_event.row("seeded", specs, found + found[:1], 0.0, ctx)       # a retried shard reported twice
    with pytest.raises(RuntimeError, match="missing"):
        rare_event.row("seeded", specs, found[1:], 0.0, ctx)


def test_a_shard_runner_gives_the_rows_of_the_local_run(monkeypatch):
    monkeypatch.setattr(rare_event, "SHARD_DRAWS", 300_000)          # 690,773 draws: three shards
    calls = []

    def backwards(func, specs):             # an executor that runs the shards in another order
        calls.append(len(specs))
        from specverify.isolation import open_adapter
        with open_adapter(EXACT_SEEDED, timeout=120.0) as engine:
            ctx = replace(Context(seed=1, alpha=1e-3), rare_rate=1e-5, factory=engine.fresh)
            return [func(engine, ctx, s) for s in reversed(specs)]

    from specverify.isolation import open_adapter
    with open_adapter(MUTANT, timeout=120.0) as engine:
        ctx = replace(Context(seed=1, alpha=1e-3), rare_rate=1e-5, factory=engine.fresh)
        local = rare_event.run(engine, ctx)
    with open_adapter(EXACT_SEEDED, timeout=120.0) as engine:
        ctx = replace(Context(seed=1, alpha=1e-3), rare_rate=1e-5, factory=engine.fresh)
        here = rare_event.run(engine, ctx)
        there = rare_event.run(engine, replace(ctx, shards=backwards))
    assert calls == [3]
    assert [(r.name, r.verdict, r.n, r.detail) for r in here] == [(r.name, r.verdict, r.n, r.detail) for r in there]
    assert local[0].verdict == "fail" and local[0].n == here[0].n and here[0].verdict == "pass"


def test_rare_rate_out_of_range_is_exit_2():
    out = subprocess.run([sys.executable, "-m", "specverify", "audit", "reference", "--checks", "rare_event",
                          "--rare-rate", "0"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--rare-rate 0.0: must be an event rate in [1e-12, 1)" in out.stderr
    assert "Traceback" not in out.stderr
