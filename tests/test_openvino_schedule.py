"""OpenVINO GenAI's draft schedule and counters as the adapter reads them (`adapters.openvino`: steps_of,
trace_of, expected_counters) -- pure functions, no OpenVINO needed -- and the acceptance check's
counters row (`checks.engine_acceptance.counters_row`): an engine whose own counters disagree with the
traces its declared schedule gives fails, one that agrees passes (our engine, capped like OpenVINO, both ways).

The numbers pinned are the ones measured on openvino-genai 2026.4.1 (greedy, draft = target: every
draft accepted; tests/test_openvino.py re-measures them where OpenVINO is installed). False alarms:
the audits here are one fixed-seed draw at the audit's family-wise alpha 1e-3; the planted mismatch
fails exactly (no statistic)."""

from __future__ import annotations

import numpy as np
import pytest

from specverify.adapters import openvino as ovad
from specverify.adapters.specverify_engine import SpecverifyEngine
from specverify.audit import Context, run_audit
from specverify.errors import AdapterError
from specverify.reference import acceptance as acc
from specverify.reference.span_drafters import OVPromptLookupSpan, RecentNgramSpan


def identity_chunks(kappa: int, length: int) -> list:
    """Step chunk sizes of a run whose drafts are all accepted under `capped`: 1, then k + 1 a step."""
    sizes, emitted = [], 0
    while emitted < length:
        k = acc.drafts_at(acc.CAPPED, kappa, emitted, length)
        sizes.append(k + 1)
        emitted += k + 1
    return sizes


def test_the_measured_identity_counters_are_capped_drafts_minus_the_finishing_step():
    """Measured counters (kappa 2, lengths 1..8; kappa 3, 1..12) = `expected_counters` of capped's steps;
    the drafts actually made are capped's, more than the counters show."""
    measured = {2: [0, 0, 1, 2, 2, 2, 2, 4], 3: [0, 0, 1, 2, 3, 3, 3, 3, 3, 6, 6, 6]}
    drafted = {2: [0, 0, 1, 2, 2, 3, 4, 4], 3: [0, 0, 1, 2, 3, 3, 4, 5, 6, 6, 7, 8]}
    for kappa, counts in measured.items():
        got, made = [], []
        for length in range(1, len(counts) + 1):
            sizes = identity_chunks(kappa, length)
            d, a = ovad.expected_counters(sizes, kappa, length)
            got.append(d + (a if d == 0 else 0))        # the adapter's num_drafted: accepted + rejected
            made.append(sum(k for k, _ in ovad.trace_of(sizes, kappa, length)))
        assert got == counts, (kappa, got)
        assert made == drafted[kappa], (kappa, made)


def test_worked_examples_and_a_chunk_the_schedule_cannot_give():
    assert ovad.trace_of([1, 3, 2], 2, 6) == [(2, 2), (1, 1)]
    assert ovad.expected_counters([1, 3], 2, 4) == (0, 2)          # the only verify step finishes: fallback
    assert ovad.expected_counters([1, 1, 2], 2, 4) == (2, 0)
    assert ovad.expected_counters([1, 1, 3, 1, 1, 1], 2, 8) == (7, 2)   # measured, greedy, draft != target
    with pytest.raises(AdapterError, match="capped schedule drafts 1"):
        ovad.trace_of([1, 3, 3], 2, 6)                              # after 4 of 6 tokens: 1 draft, <= 2 tokens
    with pytest.raises(AdapterError, match="prefill step emitted 2"):
        ovad.trace_of([2, 1], 2, 3)


class Miscounted(SpecverifyEngine):
    """Our engine (capped schedule) reporting that one run's counters disagreed with its trace."""

    name = "specverify-miscounted"
    capabilities = {"engine"}

    def generate(self, *args, **kw):
        tokens, info = super().generate(*args, **kw)
        return tokens, {**info, "counter_mismatches": {"runs": 1, "example": {"run": 0}}}


class Counted(Miscounted):
    name = "specverify-counted"

    def generate(self, *args, **kw):
        tokens, info = SpecverifyEngine.generate(self, *args, **kw)
        return tokens, {**info, "counter_mismatches": {"runs": 0, "example": None}}


def test_counter_mismatches_fail_the_acceptance_rows_and_agreement_passes():
    bad = run_audit(Miscounted(), Context(samples=2000), ["engine_acceptance"])
    rows = {r.name: r for r in bad.checks if r.check == "engine_acceptance"}
    failed = [r for n, r in rows.items() if n.endswith("counters]")]
    assert len(failed) == 2 and all(r.verdict == "fail" and "1 of" in r.detail for r in failed), list(rows)
    good = run_audit(Counted(), Context(samples=2000), ["engine_acceptance"])
    rows = [r for r in good.checks if r.check == "engine_acceptance"]
    assert [r.verdict for r in rows] == ["pass", "pass"] and not any("counters" in r.name for r in rows), \
        [(r.name, r.detail) for r in rows]


def test_the_adapter_declares_capped_and_lookup_its_own_rule():
    assert ovad.OpenVINOEngine.draft_schedule == acc.CAPPED
    assert getattr(ovad.OpenVINOEngine, "verify_rule", acc.CHAIN) == acc.CHAIN
    src = open(ovad.__file__).read()
    assert "self.span_drafter = OVPromptLookupSpan(NGRAM)" in src and "self.verify_rule = SAMPLE_MATCH" in src


def test_lookup_traces_from_step_chunks_and_chunks_the_rule_cannot_give():
    rule = OVPromptLookupSpan(2)
    # the docstring's worked example
    assert ovad.lookup_trace(rule, (1,), [(2,), (1,), (2, 3), (1,), (0,)], 2, 6) == ([(2, 1)], None)
    # all drafts kept: (1,) then span (2, 1) kept whole, bonus 0
    assert ovad.lookup_trace(rule, (1,), [(2,), (1,), (2, 1, 0), (3,)], 2, 6)[0] == [(2, 2)]
    # a bonus equal to the rule's next draft: that draft was not the engine's
    trace, bad = ovad.lookup_trace(rule, (1,), [(2,), (1,), (2, 1), (3,)], 2, 5)
    assert bad is not None and bad["step"] == 2 and bad["span"] == [2, 1]
    # a kept token that is not the rule's draft
    _, bad = ovad.lookup_trace(rule, (1,), [(2,), (1,), (0, 3), (3,)], 2, 5)
    assert bad is not None and bad["chunk"] == [0, 3]
    # two tokens from a step where the rule drafts nothing
    _, bad = ovad.lookup_trace(rule, (1,), [(2,), (1, 3)], 2, 4)
    assert bad is not None and bad["step"] == 1 and bad["span"] == []
    # the latest-match rule cannot give chunks the earliest-match rule gives: after (1, 2, 3, 1, 2, 0, 1, 2)
    # (1, 2) occurs at 0 and 3; one draft (k = min(3, 3 - 1 - 1)): 3 by OpenVINO's rule, 0 by the latest match
    prompt, chunks = (1, 2, 3, 1, 2, 0, 1), [(2,), (3, 0)]
    assert ovad.lookup_trace(rule, prompt, chunks, 3, 3) == ([(1, 1)], None)
    assert ovad.lookup_trace(RecentNgramSpan(1, 2), prompt, chunks, 3, 3)[1] is not None
    with pytest.raises(AdapterError, match="prefill step emitted 2"):
        ovad.lookup_trace(rule, (1,), [(2, 1)], 2, 4)


def test_the_simulated_source_rule_keeps_an_identity_draft_at_its_closed_form_rate():
    """`findings.openvino_acceptance.simulate` (OpenVINO's sampled rule as its source reads) with draft =
    target: the first draft of the first verify step is kept with probability
    sum_x p(x) sum_y p(y) min(1, (floor(100 p(x) / p(y)) + 1) / 101), averaged over the prefill's token --
    below 1, where any exact rule keeps every identity draft. 20,000 simulated runs, seed 0; exact
    binomial test at level 1e-3 (false-alarm rate 1e-3); the rate is about 0.90 here, so the exact rule's
    rate 1 is about 45 standard errors away: a simulation that kept drafts by the chain rule fails."""
    from scipy.stats import binomtest

    from specverify.findings import openvino_acceptance as oa
    from specverify.reference.toy import ToyModel
    from specverify.reference.transforms import Transform

    target = ToyModel(4, 5, scale=0.7, zero_frac=0.2)
    t = Transform(temperature=0.7)

    def keep_rate(prefix) -> float:
        p = np.asarray(target.probs(prefix, t))
        rate = 0.0
        for x in np.flatnonzero(p > 0):
            for y in np.flatnonzero(p > 0):
                rate += p[x] * p[y] * min(1.0, (np.floor(100 * p[x] / p[y]) + 1) / 101)
        return rate

    root = np.asarray(target.probs(oa.PROMPT, t))
    expected = sum(root[y0] * keep_rate(oa.PROMPT + (int(y0),)) for y0 in np.flatnonzero(root > 0))
    runs = oa.simulate(target, target, t, 20_000, 0)
    kept = sum(1 for sizes in runs if sizes[1] >= 2)
    assert expected < 0.95
    assert binomtest(kept, len(runs), expected).pvalue > 1e-3, (kept / len(runs), expected)
