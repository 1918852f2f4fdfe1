"""Span drafters (`reference.span_drafters`): llama-cpp-python's prompt lookup and vLLM's n-gram rule, and
the exact acceptance law of runs that draft with them (`reference.acceptance.run_acceptance_law`, k depending
on the context) against a Monte Carlo of the reference engine with the same drafter
(`reference.span_engine.SpanEngine`), both ways: the right drafter passes, a drafter with an off-by-one in
the match fails.

False alarms: each Monte Carlo comparison is one fixed-seed Pearson test at alpha = 1e-3 (seeds fixed,
never retried). Power: the off-by-one drafter makes runs whose trace has exact probability 0 under the
right law in about 20% of runs (measured: 3881-4790 of 20 000), so one such run decides; the chi-squared
at 20 000 runs detects a TV of about 0.03 (`min_detectable_tv`) on the 75-129 traces."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from specverify import stats
from specverify.audit import Context, run_audit
from specverify.errors import AdapterError, InputError
from specverify.reference import acceptance as law_mod
from specverify.reference.span_drafters import (HFPromptLookupSpan, NgramSpan, OVPromptLookupSpan, PromptLookupSpan,
                                               ShiftedSpan)
from specverify.reference.span_engine import SpanEngine
from specverify.reference.toy import ToyModel
from specverify.reference.transforms import Transform

EXAMPLE = (2, 1, 0, 3, 2, 1, 3, 3, 2, 1)
ALPHA = 1e-3
RUNS = 20_000
PROMPT, KAPPA, LENGTH = (2, 1, 2), 3, 5


# ----------------------------------------------------------------------------- the rules

def test_prompt_lookup_takes_the_earliest_match_of_the_longest_n_up_to_its_max():
    d = PromptLookupSpan(max_ngram_size=2)
    assert d.propose(EXAMPLE, 3) == (0, 3, 2)            # (2, 1) first at 0 (the docstring's example)
    assert d.propose((1, 2, 3), 3) == ()                 # nothing matches: a plain step
    assert d.propose((1, 1), 3) == (1,)                  # cut at the end of the sequence
    assert d.propose((1, 2, 3, 1, 2), 2) == (3, 1)       # kappa caps the span
    assert d.propose((5, 1, 7, 1), 3) == (7, 1)          # n = 1 when no 2-gram matches
    assert d.propose((4,), 3) == ()                      # one token: no n to search


def test_vllm_ngram_takes_the_longest_n_then_its_earliest_occurrence():
    d = NgramSpan(min_n=1, max_n=3)
    assert d.propose(EXAMPLE, 3) == (3, 3, 2)            # the 3-gram (3, 2, 1) at 3 beats (2, 1) at 0
    assert d.propose((1, 2, 1, 2), 3) == (1, 2)          # the docstring's example: cut at the end
    assert d.propose((1, 2, 3), 3) == ()
    assert d.propose((1, 1, 1), 3) == (1,)               # (1, 1) at 0 overlaps the suffix: allowed
    assert NgramSpan(min_n=2, max_n=3).propose((5, 1, 7, 1), 3) == ()    # only a 1-gram matches
    assert NgramSpan(1, 3, max_model_len=11).propose(EXAMPLE, 3) == (3,)   # 11 - 10 tokens of room
    with pytest.raises(InputError, match="min_n"):
        NgramSpan(min_n=3, max_n=2)


def test_the_two_rules_differ_only_where_a_longer_match_is_later():
    # on every context where max_n = 2 and no 3-gram matches, the rules agree
    rng = np.random.default_rng(0)
    llama, vllm2 = PromptLookupSpan(2), NgramSpan(1, 2)
    for _ in range(2000):
        seq = tuple(int(x) for x in rng.integers(0, 3, size=int(rng.integers(1, 10))))
        assert llama.propose(seq, 3) == vllm2.propose(seq, 3), seq


def test_transformers_prompt_lookup_is_llamacpps_rule_with_its_docstring_examples():
    d = HFPromptLookupSpan(2)
    assert d.propose((0, 1, 2, 0, 1), 3) == (2, 0, 1)
    assert d.propose((2, 2), 3) == (2,)
    assert d.propose((0, 1), 3) == ()
    rng = np.random.default_rng(1)
    for _ in range(2000):
        seq = tuple(int(x) for x in rng.integers(0, 3, size=int(rng.integers(1, 10))))
        n, kappa = int(rng.integers(1, 4)), int(rng.integers(1, 4))
        assert d.__class__(n).propose(seq, kappa) == PromptLookupSpan(n).propose(seq, kappa), seq


def test_openvino_prompt_lookup_halves_n_on_short_contexts_and_takes_the_earliest_match():
    d = OVPromptLookupSpan(2)
    assert d.propose(EXAMPLE, 3) == (0, 3, 2)            # the docstring's examples
    assert d.propose((1, 1), 3) == (1,)
    assert d.propose((3, 1, 3), 3) == (1, 3)
    assert OVPromptLookupSpan(4).propose((1, 2, 1, 2), 3) == (1, 2)
    assert OVPromptLookupSpan(3).propose((1, 1, 1), 3) == (1, 1)       # n = 3 // 2 = 1 here ...
    assert HFPromptLookupSpan(3).propose((1, 1, 1), 3) == (1,)         # ... n = 2 in transformers' rule
    assert d.propose((4,), 3) == ()                      # 2 >= 1: n = 0, nothing to search
    assert d.propose(EXAMPLE, 0) == ()                   # kappa 0 (one token left): no drafts
    with pytest.raises(InputError, match="max_ngram_size"):
        OVPromptLookupSpan(0)
    # at max_ngram_size <= 2 the two rules agree on every context; at 3 they do not
    rng = np.random.default_rng(2)
    differ = 0
    for _ in range(2000):
        seq = tuple(int(x) for x in rng.integers(0, 3, size=int(rng.integers(1, 10))))
        for n in (1, 2):
            assert OVPromptLookupSpan(n).propose(seq, 3) == HFPromptLookupSpan(n).propose(seq, 3), (seq, n)
        differ += OVPromptLookupSpan(3).propose(seq, 3) != HFPromptLookupSpan(3).propose(seq, 3)
    assert differ > 20



def target():
    return ToyModel(4, 5, scale=0.7, zero_frac=0.2)


def mc_counts(engine, law, seed: int, transform):
    _, info = engine.generate(target(), None, PROMPT, KAPPA, transform, seed, RUNS, LENGTH)
    counts, impossible = law.counts(info["verify_counts"])
    return counts, impossible, info


@pytest.mark.parametrize("drafter, schedule", [(PromptLookupSpan(2), law_mod.PREFILL_TO_LENGTH),
                                               (HFPromptLookupSpan(2), law_mod.TOKENS_LEFT),
                                               (OVPromptLookupSpan(2), law_mod.CAPPED),
                                               (NgramSpan(1, 3), law_mod.PREFILL_FIXED),
                                               (NgramSpan(1, 3), law_mod.FIXED)])
def test_the_exact_law_matches_the_reference_engine_and_an_off_by_one_drafter_fails(drafter, schedule):
    transform = Transform(temperature=0.7)
    law = law_mod.run_acceptance_law(target(), drafter, PROMPT, KAPPA, LENGTH, transform, schedule)
    assert law.probs.sum() == pytest.approx(1.0, abs=1e-12)
    assert len(law.traces) > 10 and 1.0 < law.E < 1.0 + KAPPA
    # steps of k = 0 (nothing matched) are plain: never in a trace; a span shorter than kappa is
    assert all(k >= 1 for t in law.traces for k, _ in t)
    assert any(k < KAPPA for t in law.traces for k, _ in t)
    counts, impossible, info = mc_counts(SpanEngine(drafter, schedule), law, 11, transform)
    assert impossible == 0
    res = stats.pearson(counts, law.probs, alpha=ALPHA)
    assert res.p_value > ALPHA, res
    e_obs = 1 + info["num_accepted"] / info["num_verifies"]
    lo, hi = law.e_range(RUNS, ALPHA)
    assert lo <= e_obs <= hi
    counts, impossible, _ = mc_counts(SpanEngine(ShiftedSpan(drafter), schedule), law, 11, transform)
    assert impossible > RUNS // 20 or stats.pearson(counts, law.probs, alpha=ALPHA).p_value < ALPHA


def test_a_plain_step_where_nothing_matches_and_greedy_runs_have_one_trace():
    # the prompt (1,) has no earlier token to match: under "fixed" the first step is plain too
    law = law_mod.run_acceptance_law(target(), NgramSpan(1, 3), (1,), KAPPA, LENGTH, Transform(temperature=0.0),
                                     law_mod.FIXED)
    assert len(law.traces) == 1
    (trace,) = law.traces
    _, info = SpanEngine(NgramSpan(1, 3), law_mod.FIXED).generate(target(), None, (1,), KAPPA,
                                                                 Transform(temperature=0.0), 0, 64, LENGTH)
    assert all(tuple(tuple(s) for s in t) == trace for t in info["verify_counts"])


def test_the_law_of_a_span_drafter_is_not_the_token_at_a_time_lookup_law():
    transform = Transform(temperature=0.7)
    span = law_mod.run_acceptance_law(target(), PromptLookupSpan(2), PROMPT, KAPPA, LENGTH, transform, law_mod.FIXED)
    token = law_mod.run_acceptance_law(target(), law_mod.LookupDrafter(4, 2), PROMPT, KAPPA, LENGTH, transform,
                                       law_mod.FIXED)
    assert set(span.traces) != set(token.traces)


# ----------------------------------------------------------------------------- the check

def test_engine_acceptance_uses_the_declared_span_drafter_both_ways():
    good = run_audit(SpanEngine(NgramSpan(1, 3), law_mod.PREFILL_FIXED), Context(samples=20_000),
                     ["engine_acceptance"])
    rows = [r for r in good.checks if r.check == "engine_acceptance"]
    assert good.verdict == "pass" and len(rows) == 2, [(r.name, r.detail) for r in rows]
    assert "NgramSpan(min_n=1, max_n=3)" in rows[0].name and "per-step" in rows[0].name
    wrong = SpanEngine(ShiftedSpan(NgramSpan(1, 3)), law_mod.PREFILL_FIXED)
    wrong.span_drafter = NgramSpan(1, 3)                # declares the right rule, drafts off by one
    bad = run_audit(wrong, Context(samples=20_000), ["engine_acceptance"])
    assert bad.verdict == "fail"


def test_a_declared_span_drafter_that_is_not_one_is_an_adapter_error():
    from specverify.adapters.protocol import check_adapter

    class Odd(SpanEngine):
        name = "odd"

    odd = Odd(NgramSpan(1, 3))
    odd.span_drafter = object()
    with pytest.raises(AdapterError, match="span_drafter object is not"):
        check_adapter(odd, "odd")


class NgramPrefillFixed(SpanEngine):
    """A registered-free span engine for the isolation test (built in the worker by its class)."""

    name = "toy-span-engine-ngram"

    def __init__(self):
        super().__init__(NgramSpan(1, 3), law_mod.PREFILL_FIXED)


def test_the_span_drafter_declaration_reaches_an_isolated_handle_and_its_audit():
    from specverify.isolation import open_adapter

    with open_adapter(NgramPrefillFixed, timeout=120) as h:
        assert h.isolated
        assert isinstance(h.span_drafter, NgramSpan) and h.span_drafter.law_key == NgramSpan(1, 3).law_key
        result = run_audit(h, Context(samples=2000), ["engine_acceptance"])
    rows = [r for r in result.checks if r.check == "engine_acceptance"]
    assert result.verdict == "pass" and all("NgramSpan" in r.name for r in rows), [(r.name, r.detail) for r in rows]


# ----------------------------------------------------------------------------- our engine's n-gram proposer

def test_our_engines_ngram_proposer_is_the_latest_match_rule_not_vllms_nor_llamacpps():
    from specverify.engine.proposers import NgramProposer
    from specverify.reference.span_drafters import RecentNgramSpan

    ours, rule = NgramProposer(n_max=3, n_min=1), RecentNgramSpan(1, 3)
    assert rule.propose((1, 2, 3, 1, 2, 0, 1, 2), 3) == (0, 1, 2)          # the docstring's example
    assert NgramSpan(1, 3).propose((1, 2, 3, 1, 2, 0, 1, 2), 3) == (3, 1, 2)
    rng = np.random.default_rng(1)
    differs = 0
    for _ in range(3000):
        seq = tuple(int(x) for x in rng.integers(0, 3, size=int(rng.integers(1, 13))))
        k = int(rng.integers(1, 5))
        assert tuple(ours.lookup(seq, k)) == rule.propose(seq, k), seq
        differs += rule.propose(seq, k) != NgramSpan(1, 3).propose(seq, k)
    assert differs > 100


def test_our_engines_ngram_runs_follow_their_own_rules_law_and_fail_vllms():
    """4000 runs from a prompt where the latest and the earliest match differ: our engine's traces pass its
    own rule's law (level 1e-3) and include traces of probability 0 under vLLM's rule (about a third)."""
    from specverify.adapters.specverify_engine import SpecverifyNgram
    from specverify.reference.span_drafters import RecentNgramSpan

    prompt, kappa, length, transform = (1, 2, 3, 1, 2, 0, 1, 2), 3, 4, Transform(temperature=0.7)
    _, info = SpecverifyNgram().generate(target(), target(), prompt, kappa, transform, 3, 4000, length)
    assert set(info) == {"verify_counts"}                # no totals: the identity rows do not apply
    runs = [tuple(tuple(s) for s in t) for t in info["verify_counts"]]
    own = law_mod.run_acceptance_law(target(), RecentNgramSpan(1, 3), prompt, kappa, length, transform, law_mod.CAPPED)
    counts = np.zeros(len(own.traces), np.int64)
    for t, c in Counter(runs).items():
        counts[own.index()[t]] = c                        # KeyError: a trace the own law calls impossible
    assert stats.pearson(counts, own.probs, alpha=ALPHA).p_value > ALPHA
    vllm_law = law_mod.run_acceptance_law(target(), NgramSpan(1, 3), prompt, kappa, length, transform, law_mod.CAPPED)
    assert sum(t not in vllm_law.index() for t in runs) > 400
    assert own.E - vllm_law.E > 0.1                        # 1.4348 vs 1.2393


def test_the_specverify_ngram_audit_passes_and_a_greedy_row_without_verify_steps_is_a_skip():
    from specverify.adapters.specverify_engine import SpecverifyNgram

    result = run_audit(SpecverifyNgram(), Context(samples=20_000), ["engine_acceptance"])
    rows = {r.name.split("[")[0]: r for r in result.checks if r.check == "engine_acceptance"}
    assert rows["engine.acceptance"].verdict == "pass", rows["engine.acceptance"].detail
    assert "RecentNgramSpan(n_min=1, n_max=3)" in rows["engine.acceptance"].name
    # the battery's greedy path never matches an earlier n-gram: nothing to test there, so not a PASS
    assert rows["engine.acceptance_greedy"].verdict == "skip"
    assert "greedy acceptance (no verify step)" in str(rows["engine.acceptance_greedy"].data["not_covered"])
