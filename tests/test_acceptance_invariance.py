"""`acceptance_invariance`: acceptance must not depend on the prefix cache, the prefill chunk size, the
position in a long context or the draft schedule -- two-sample rows on the engine's own counters.

Both ways: our engine passes all four rows; for each knob an engine whose drafter goes out of sync only
when that knob is set (`zoo.our_engine`) fails that row. False alarms: each audit is one fixed-seed draw
of a family-wise 1e-3 test (Holm over the rows; each row's p-value is 1 / max e of an anytime-valid
two-sample e-process). Power: each row states its min detectable TV of the full-step law (~0.15 at 500
runs per arm); the planted bugs move the mean accepted per full step from ~1.7 to ~0.85 of 3, a TV of
the step law near 0.4."""

from __future__ import annotations

import numpy as np
import pytest

from specverify.adapters.reference import ReferenceEngine
from specverify.adapters.specverify_engine import SpecverifyEngine
from specverify.audit import Context, run_audit
from specverify.checks import acceptance_invariance as ai
from specverify.engine import api
from specverify.engine.engine import SamplingParams
from specverify.errors import AdapterError, InputError
from specverify.reference import circulant
from specverify.zoo import our_engine

CHECK = ["acceptance_invariance"]
SAMPLES = 10_000            # 500 runs per arm (the minimum)


class OurEngine(SpecverifyEngine):
    capabilities = {"engine"}


def planted(cls):
    class Planted(SpecverifyEngine):
        name = f"specverify-{cls.__name__}"
        capabilities = {"engine"}
        engine_class = cls
    return Planted


def rows_of(result):
    return {r.data.get("knob", r.name): r for r in result.checks if r.check == "acceptance_invariance"}


def test_circulant_worked_example_and_step_law():
    t = circulant.CirculantMarkov(np.log([0.6, 0.3, 0.1]))
    d = circulant.CirculantMarkov(np.log([0.5, 0.3, 0.2]))
    a = circulant.step_acceptance(t, d)
    assert a == pytest.approx(0.9)
    assert circulant.step_law(a, 2) == pytest.approx([0.1, 0.09, 0.81])
    # rotated by the last token only: the context before it does not matter
    assert t.probs((2, 0, 1)) == pytest.approx([0.1, 0.6, 0.3])
    assert t.probs((1,)) == pytest.approx(t.probs((0, 2, 2, 1)))
    assert t.logits_after(np.array([1, -1])) == pytest.approx(np.stack([t.logits((1,)), t.logits(())]))


def test_our_engine_passes_every_row_and_states_power():
    result = run_audit(OurEngine(), Context(samples=SAMPLES), CHECK)
    rows = rows_of(result)
    assert set(rows) == set(ai.KNOBS)
    for knob, r in rows.items():
        assert r.verdict == "pass", (knob, r.detail)
        assert r.n > 1000 and 0 < r.min_detectable_tv < 0.25, (knob, r.n, r.min_detectable_tv)
        arms = r.data["arms"]
        exact = next(iter(arms.values()))["mean_accepted_full_exact"]
        for arm in arms.values():         # each arm's mean accepted per full step near the exact value
            assert abs(arm["mean_accepted_full"] - exact) < 0.15, (knob, arm)
    assert result.verdict == "pass"


@pytest.mark.parametrize("cls, knob", [
    (our_engine.DraftLagOnCacheHit, "prefix_cache"),
    (our_engine.DraftLagWhenChunked, "prefill_chunk"),
    (our_engine.DraftLagPastPosition, "position"),
    (our_engine.DraftKvNotIngestedAfterK0, "kappa_schedule"),
])
def test_a_drafter_out_of_sync_under_one_knob_fails_that_row(cls, knob):
    result = run_audit(planted(cls)(), Context(samples=SAMPLES), CHECK)
    rows = rows_of(result)
    assert rows[knob].verdict == "fail", rows[knob].detail
    assert rows[knob].data["acceptance_arms"]["direction"] == "below"
    if cls is not our_engine.DraftKvNotIngestedAfterK0:       # it also changes the warm arm (its prefill drafts)
        assert all(r.verdict == "pass" for k, r in rows.items() if k != knob), [(k, r.detail) for k, r in rows.items()]


def test_an_exact_output_with_acceptance_depending_on_a_knob_is_exact_but_slow():
    result = run_audit(planted(our_engine.DraftKvNotIngestedAfterK0)(), Context(samples=SAMPLES),
                       ["runs", "acceptance_invariance"])
    assert [r.verdict for r in result.checks if r.check == "runs"] == ["pass", "pass"]     # the output is exact
    assert result.deviation["kind"] == "exact-but-slow", result.deviation
    assert "acceptance depends on kappa_schedule" in result.deviation["text"]


def test_an_adapter_without_knobs_is_not_covered_never_passed():
    # alone, the check decides nothing for it: an error naming the missing knob, never a pass
    with pytest.raises(AdapterError, match="declares no 'prefix_cache' knob"):
        run_audit(ReferenceEngine(), Context(samples=SAMPLES), CHECK)
    rows = ai.run(ReferenceEngine(), Context(samples=SAMPLES))
    assert len(rows) == len(ai.KNOBS) and all(r.verdict == "skip" and r.data["not_covered"] for r in rows)


def test_an_unknown_knob_is_an_adapter_error():
    class Typo(OurEngine):
        acceptance_knobs = {"prefix_cahce"}
    from specverify.adapters.protocol import check_adapter
    with pytest.raises(AdapterError, match="unknown acceptance knob"):
        check_adapter(Typo(), "typo")
    check_adapter(OurEngine(), "ours")                  # the real declaration is accepted


def test_totals_only_counters_are_a_skip():
    class TotalsOnly(OurEngine):
        def generate(self, *args, **kw):
            tokens, info = super().generate(*args, **kw)
            return tokens, {k: info[k] for k in ("num_drafted", "num_accepted")}
    # every row a SKIP: an audit of this check alone checked nothing, which is an error naming why (not a pass)
    with pytest.raises(AdapterError, match="supports none of the checks run.*verify_counts"):
        run_audit(TotalsOnly(), Context(samples=SAMPLES), CHECK)


def test_chunked_prefill_emits_the_same_tokens_as_a_whole_prefill():
    # one request a run (in a batch, the neighbours' schedule moves too). Chunks of 6 and 7 leave a last chunk
    # of 4 and 5 tokens; a last chunk of ONE token (chunk 1 or 3 here) is a decode step that drafts, one verify
    # step earlier than after a whole prefill: the same law with other coins (docs/acceptance.md), not compared
    target, draft = circulant.pair(8, 3)
    prompt = tuple(range(8)) * 5
    runs = {}
    for chunk in (None, 6, 7):
        runs[chunk] = []
        for seed in range(8):
            res = api.generate(target, draft, [prompt], sampling=[SamplingParams(temperature=0.7, max_tokens=10, seed=seed)],
                               spec=api.SpecOptions("draft", kappa=3), run=api.RunOptions(prefill_chunk=chunk))
            runs[chunk].append(res.tokens[0])
            if chunk is not None:       # the chunked prefill takes ceil(40 / chunk) steps before it emits
                assert res.metrics.num_steps > len(prompt) // chunk
    assert len({tuple(t) for t in runs[None]}) > 1          # the seeds matter: the comparison can fail
    assert runs[6] == runs[None] and runs[7] == runs[None]
    with pytest.raises(InputError, match="prefill_chunk"):
        api.RunOptions(prefill_chunk=0)
