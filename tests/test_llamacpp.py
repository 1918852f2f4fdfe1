"""llama.cpp through llama-cpp-python: the GGUF export, the engine-level adapter and the bitwise level.

Skips where llama-cpp-python is absent (install: bash specverify/findings/install_llamacpp.sh VENV).
Each test can fail: the export is compared with the float64 forward (and a wrong RoPE layout is
caught), greedy runs with the argmax path, sampled runs with the exact law by chi-squared (and a
mutated temperature mapping is caught), a seed with its replay.
"""

from __future__ import annotations

import numpy as np
import pytest

from specverify.reference.processors import Grammar, Processors
from specverify.reference.transforms import Transform

INSTALL = "llama-cpp-python not installed: bash specverify/findings/install_llamacpp.sh VENV"
PROMPT, KAPPA, LENGTH = (1,), 2, 3


def test_gbnf_of_a_dfa_lists_exactly_the_allowed_tokens():
    from specverify.adapters.llamacpp import gbnf
    g = Grammar(((1, -1, 0), (-1, 1, 0)))
    assert gbnf(g) == 'root ::= s0\ns0 ::= "t0" s1 | "t2" s0\ns1 ::= "t1" s1 | "t2" s0\n'


def test_draft_counts_stop_at_the_first_mismatch_and_at_the_run_end():
    from specverify.adapters.llamacpp import counts
    # prompt (1,), emitted 5 5 7 ; a call at position 1 drafted [5, 6] (one accepted), at 3 [7, 9] (9 never reached)
    assert counts([(1, [5, 6]), (3, [7, 9])], [1, 5, 5, 7], 4) == (3, 2)


def test_draft_steps_are_each_calls_verified_drafts_and_kept_ones():
    from specverify.adapters.llamacpp import LlamaCpp, steps
    assert steps([(1, [5, 6]), (3, [7, 9])], [1, 5, 5, 7], 4) == [(2, 1), (1, 1)]
    assert steps([(1, [5, 6])], [1, 5, 6, 2], 4) == [(2, 2)]
    assert LlamaCpp.verify_rule == "sample-match"


def test_an_absent_engine_is_one_line_with_the_install_command(monkeypatch):
    from specverify import installed
    from specverify.adapters.llamacpp import LlamaCpp
    from specverify.errors import InputError
    real = installed.available
    monkeypatch.setattr(installed, "available", lambda m: m != "llama_cpp" and real(m))
    with pytest.raises(InputError, match="install_llamacpp.sh"):
        LlamaCpp("lookup")
    with pytest.raises(InputError, match="method"):
        LlamaCpp("eagle")


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    pytest.importorskip("llama_cpp", reason=INSTALL)
    pytest.importorskip("transformers", reason="pip install 'specverify[transformers]'")
    import os
    os.environ.setdefault("SPECVERIFY_CACHE", str(tmp_path_factory.mktemp("cache")))
    from specverify.adapters.llamacpp import LlamaCpp
    return {m: LlamaCpp(m) for m in ("lookup", "draft")}


def _tabulated(engine, vocab, seed):
    from specverify.models import tiny as tiny_llama
    return tuple(tiny_llama.tabulated(f) for f in engine["lookup"].own_models(vocab, seed))


@pytest.fixture(scope="module")
def models(engine):
    return _tabulated(engine, 4, 0)


def test_gguf_logits_match_the_float64_forward(engine, models):
    target, _ = models
    llm = engine["lookup"]._llm(target, "target")
    for prefix in [(1,), (1, 2), (3, 0, 2, 1, 1)]:
        llm.reset()
        llm.eval(list(prefix))
        row = np.asarray(llm.scores[len(prefix) - 1], np.float64)
        got, want = row[:target.vocab_size], target.logits(prefix)
        assert (row[target.vocab_size:] == 0).all()          # the special tokens' zero head rows
        assert np.abs(got - want).max() <= 1e-5 * max(1.0, np.abs(want).max()), (prefix, got, want)


def test_a_wrong_rope_layout_is_caught(engine, models, tmp_path, monkeypatch):
    """The export without the rotate-half -> adjacent-pair reordering gives logits far from the law."""
    import shutil
    from specverify.models import gguf
    target, _ = models
    folder = tmp_path / "copy"
    shutil.copytree(target.handle, folder)
    for f in folder.glob("*.gguf"):
        f.unlink()
    monkeypatch.setattr(gguf, "_rope_rows", lambda w, heads: w)
    path = gguf.export(folder)
    import llama_cpp
    llm = llama_cpp.Llama(str(path), n_ctx=64, n_threads=1, logits_all=True, type_k=0, type_v=0, verbose=False)
    llm.eval([3, 0, 2, 1, 1])
    got = np.asarray(llm.scores[4], np.float64)[:target.vocab_size]
    assert np.abs(got - target.logits((3, 0, 2, 1, 1))).max() > 1e-3


@pytest.mark.parametrize("method", ["lookup", "draft"])
def test_greedy_runs_follow_the_argmax_path(engine, models, method):
    target, draft = models
    tokens, info = engine[method].generate(target, draft, PROMPT, KAPPA, Transform(temperature=0.0), 0, 5, 6)
    path = []
    for _ in range(6):
        path.append(int(np.argmax(target.probs(PROMPT + tuple(path)))))
    assert (tokens == np.array(path)).all(), (tokens[0], path)
    if method == "draft":
        assert 0 <= info["num_accepted"] <= info["num_drafted"]


def test_draft_runs_report_steps_the_declared_law_allows(engine, models):
    """Sampled runs of the draft method: each run's (drafted, accepted) trace has probability > 0 under the
    declared prefill-to-length sample-match law, and the traces add up to the totals."""
    from specverify.reference import acceptance as law_mod
    target, draft = models
    eng = engine["draft"]
    transform = Transform(temperature=0.7)
    _, info = eng.generate(target, draft, PROMPT, KAPPA, transform, 3, 60, LENGTH)
    law = law_mod.run_acceptance_law(target, draft, PROMPT, KAPPA, LENGTH, transform, eng.draft_schedule,
                                     eng.verify_rule)
    traces = [tuple(map(tuple, t)) for t in info["verify_counts"]]
    assert len(traces) == 60 and all(t in law.index() for t in traces), set(traces) - set(law.traces)
    assert sum(k for t in traces for k, _ in t) == info["num_drafted"]
    assert info["num_verifies"] == sum(len(t) for t in traces)


def test_lookup_runs_report_steps_its_own_rules_law_allows(engine, models):
    """Sampled runs of prompt lookup: each run's trace has probability > 0 under the law of its declared span
    drafter (llama-cpp-python's own rule); no num_* totals (the identity rows' premise q = p does not hold)."""
    from specverify.reference import acceptance as law_mod
    target, draft = models
    eng = engine["lookup"]
    transform = Transform(temperature=0.7)
    prompt = (1, 2, 1)                          # an early match: spans from the first step after the prefill
    _, info = eng.generate(target, draft, prompt, KAPPA, transform, 3, 60, LENGTH)
    law = law_mod.run_acceptance_law(target, eng.span_drafter, prompt, KAPPA, LENGTH, transform, eng.draft_schedule,
                                     eng.verify_rule)
    traces = [tuple(map(tuple, t)) for t in info["verify_counts"]]
    assert len(traces) == 60 and all(t in law.index() for t in traces), set(traces) - set(law.traces)
    assert sum(k for t in traces for k, _ in t) == info["ngram_drafted"] and "num_accepted" not in info


def test_lookup_traces_tell_its_rule_from_the_latest_match_rule(engine, models):
    """From a prompt where the earliest and the latest match differ, 1000 sampled lookup runs pass the law
    of llama-cpp-python's own rule (Pearson, level 1e-3) and fail the law of the rule that takes the latest
    match (our engine's; a trace of probability 0 there, or Pearson p < 1e-3): the per-step row can tell
    the two rules apart."""
    from collections import Counter

    from specverify import stats
    from specverify.reference import acceptance as law_mod
    from specverify.reference.span_drafters import RecentNgramSpan
    target, draft = models
    eng = engine["lookup"]
    transform, prompt, kappa, length = Transform(temperature=0.7), (1, 2, 3, 1, 2, 0, 1, 2), 3, 4
    _, info = eng.generate(target, draft, prompt, kappa, transform, 5, 1000, length)
    runs = [tuple(map(tuple, t)) for t in info["verify_counts"]]
    own = law_mod.run_acceptance_law(target, eng.span_drafter, prompt, kappa, length, transform, eng.draft_schedule)
    counts = np.zeros(len(own.traces), np.int64)
    for t, c in Counter(runs).items():
        counts[own.index()[t]] = c                       # KeyError: a trace its own rule's law calls impossible
    assert stats.pearson(counts, own.probs, alpha=1e-3).p_value > 1e-3
    latest = law_mod.run_acceptance_law(target, RecentNgramSpan(1, 2), prompt, kappa, length, transform,
                                        eng.draft_schedule)
    if all(t in latest.index() for t in runs):
        counts = np.zeros(len(latest.traces), np.int64)
        for t, c in Counter(runs).items():
            counts[latest.index()[t]] = c
        assert stats.pearson(counts, latest.probs, alpha=1e-3).p_value < 1e-3


def _law_p_value(target, tokens, transform):
    from specverify import stats
    from specverify.reference import laws
    law = laws.target_law(laws.Transformed(target, transform), PROMPT, LENGTH)
    counts = stats.observed_counts(laws.encode(tokens, law.vocab_size), law.codes())   # raises on p = 0
    return stats.pearson(counts, law.probs, min_expected=5.0).p_value


@pytest.mark.parametrize("method", ["lookup", "draft"])
def test_sampled_runs_have_the_exact_law(engine, models, method):
    """600 runs of 3 tokens at temperature 0.8: a false alarm at 1e-3 in one of two tests is 2e-3."""
    target, draft = models
    t = Transform(temperature=0.8, top_k=3)
    tokens, _ = engine[method].generate(target, draft, PROMPT, KAPPA, t, 7, 600, LENGTH)
    assert _law_p_value(target, tokens, t) > 1e-3


def test_a_mutated_temperature_mapping_is_caught(engine, models, monkeypatch):
    """The same runs with the engine told temperature 0.4 instead of 0.8: the law test fails."""
    target, draft = models
    a = engine["lookup"]
    real = a.sampling
    monkeypatch.setattr(a, "sampling", lambda t: {**real(t), "temp": 0.4})
    tokens, _ = a.generate(target, draft, PROMPT, KAPPA, Transform(temperature=0.8), 7, 600, LENGTH)
    assert _law_p_value(target, tokens, Transform(temperature=0.8)) < 1e-6


def test_a_run_is_reproducible_from_its_seed(engine, models):
    target, draft = models
    a = engine["draft"]
    first, _ = a.generate(target, draft, PROMPT, KAPPA, Transform(), 100, 40, 4)
    again, _ = a.generate(target, draft, PROMPT, KAPPA, Transform(), 110, 10, 4)     # runs 10..19 of the first call
    assert (first[10:20] == again).all()
    assert not (first[:10] == first[10:20]).all()


def test_top_p_with_a_temperature_is_refused(engine, models):
    from specverify.errors import InputError
    target, draft = models
    with pytest.raises(InputError, match="top-p before temperature"):
        engine["lookup"].generate(target, draft, PROMPT, KAPPA, Transform(temperature=0.7, top_p=0.8), 0, 1, 2)


def test_processors_see_the_drafts_under_speculation(engine):
    """llama-cpp-python 0.3.36 hands a logits processor input_ids that include the drafts after the
    row being sampled (findings: reports/llamacpp-lookup-*): a banned sequence (2, 2) is emitted with
    prompt lookup, never in plain decoding of the same processors (draft model detached)."""
    a = engine["lookup"]
    target, draft = _tabulated(engine, 5, 3)
    settings = Processors(banned_sequences=((2, 2),))

    def violations(tokens):
        return sum(any(s[i] == 2 and s[i + 1] == 2 for i in range(len(s) - 1)) for s in ([1, 2] + list(r) for r in tokens))

    tokens, _ = a.generate(target, draft, (1, 2), 3, Transform(), 0, 600, 4, processors=settings)
    llm = a._llm(target, "target")
    from specverify.adapters.llamacpp import _processors
    kw, _ = _processors(a.llama, a.grammar, settings, 2, 5)
    plain = []
    for i in range(600):
        llm.set_seed(i)
        row = []
        for tok in llm.generate([1, 2], **{**a.sampling(Transform()), **kw}):
            row.append(int(tok))
            if len(row) == 4:
                break
        plain.append(row)
    assert violations(plain) == 0
    assert violations(tokens) > 0


def test_bitwise_tiny_greedy_lookup_keeps_the_token_ids(engine):
    from specverify.adapters import llamacpp_bitwise
    from specverify.adapters.bitwise_level import Spec
    a = llamacpp_bitwise.tiny()
    rng = np.random.default_rng(0)
    for _ in range(2):
        prompt = tuple(int(x) for x in rng.integers(0, llamacpp_bitwise.TINY_VOCAB, 10))
        ids0, rows0 = a.decode(prompt, 16, Spec())
        for spec in (Spec("prompt_lookup", 3), Spec("draft", 3)):
            ids1, rows1 = a.decode(prompt, 16, spec)
            assert ids1 == ids0
            assert rows1.shape == rows0.shape == (16, llamacpp_bitwise.TINY_VOCAB)
            assert np.abs(rows1 - rows0).max() < 1e-4        # f32 model: last bits only


def test_bitwise_refuses_layouts_it_cannot_run(engine):
    """generate decodes one sequence: a batch or ragged layout is an error, never silently batch 1."""
    from specverify.adapters import llamacpp_bitwise
    from specverify.adapters.bitwise_level import GreedyRequest, Layout, Spec
    from specverify.errors import InputError
    a = llamacpp_bitwise.tiny()
    assert a.bitwise_info().layouts == ()
    for layout in (Layout(batch_size=2), Layout(batch_size=2, ragged=True)):
        with pytest.raises(InputError, match="one sequence"):
            a.decode_greedy(GreedyRequest(prompts=((1, 2), (3, 4)), max_new_tokens=2, spec=Spec(), layout=layout))
    with pytest.raises(InputError, match="unknown proposer"):
        a.decode_greedy(GreedyRequest(prompts=((1, 2),), max_new_tokens=2, spec=Spec("eagle", 2)))
