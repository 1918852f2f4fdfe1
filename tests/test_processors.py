"""Logits processors under speculation (`reference.processors`, `checks.processors`, `zoo.processors`).

- the reference definitions against hand-computed small cases (the module docstring's worked example
  number for number, then each stage alone);
- the exact run law: a probability distribution, runs that end at their first stop token, equal to
  the plain target law when nothing is on;
- bad settings are one-line InputErrors; the adapter's `processors` declaration is validated like its
  capabilities, and what it does not declare is listed as not covered;
- the reference passes every processor row; each processor mutant is caught, at the default sizes, by
  the row meant for its bug class.
False alarms: the reference's rows are one fixed-seed draw of the audit's family-wise 1e-3 test.
"""

import math
import subprocess
import sys

import numpy as np
import pytest

from specverify.adapters.protocol import check_adapter
from specverify.adapters.reference import ReferenceEngine
from specverify.audit import Context, run_audit
from specverify.errors import AdapterError, InputError
from specverify.reference import laws
from specverify.reference.batch import PAD
from specverify.reference.processors import DEAD, NAMES, Grammar, Processors, model_probs, probs, process, stopped
from specverify.reference.toy import ToyModel
from specverify.reference.toy_engine import SpecEngine
from specverify.reference.transforms import Transform
from specverify.zoo import make

RAW = [1.0, 2.0, -0.5, 0.5]


# ------------------------------------------------------------------ the definitions, by hand

def test_the_docstrings_worked_example_number_for_number():
    s = Processors(repetition_penalty=2.0, frequency_penalty=0.5, presence_penalty=0.25, logit_bias={3: 1.0},
                   banned_tokens=(0,), stop_tokens=(3,), min_tokens=3)
    got = process(RAW, (1,), [[2, 2]], s)
    assert got.tolist() == [-math.inf, 1.0, -2.25, -math.inf]
    z = math.exp(1.0) + math.exp(-2.25)
    np.testing.assert_allclose(probs(RAW, (1,), [[2, 2]], None, s), [0, math.exp(1.0) / z, math.exp(-2.25) / z, 0],
                               rtol=1e-15)
    assert probs(RAW, (1,), [[2, 2]], None, Processors(**{**s.__dict__, "min_p": 0.05})).tolist() == [0, 1, 0, 0]


def test_repetition_penalty_reads_prompt_and_output_once_each_token():
    # token 1 in the prompt (positive: divided), token 2 twice in the output (negative: multiplied once)
    got = process(RAW, (1,), [[2, 2]], Processors(repetition_penalty=4.0))
    assert got.tolist() == [1.0, 0.5, -2.0, 0.5]


def test_frequency_and_presence_count_output_tokens_only():
    got = process(RAW, (3, 3), [[1, 1, 1, 2, PAD]], Processors(frequency_penalty=0.5, presence_penalty=0.25))
    # token 3 only in the prompt: untouched; token 1: 3 * 0.5 + 0.25; token 2: 0.5 + 0.25
    assert got.tolist() == [1.0, 2.0 - 1.75, -0.5 - 0.75, 0.5]


def test_banned_sequences_read_the_prompt_and_the_output_tail():
    s = Processors(banned_sequences=((2, 3), (1, 2, 0), (1,)))
    a = process(np.tile(RAW, (3, 1)), (1,), [[2, PAD], [PAD, PAD], [2, 1]], s)
    assert a[0].tolist() == [-math.inf, -math.inf, -0.5, -math.inf]   # prompt + out = (1, 2): 3 and 0 banned
    assert a[1].tolist() == [1.0, -math.inf, -0.5, 0.5]           # prompt (1,) alone: neither tail matches
    assert a[2].tolist() == [1.0, -math.inf, -0.5, 0.5]           # ends with (2, 1): nothing but 1


def test_min_tokens_masks_every_stop_token_until_n_outputs():
    s = Processors(min_tokens=2, stop_tokens=(0, 3))
    a = process(np.tile(RAW, (3, 1)), (), [[PAD, PAD], [1, PAD], [1, 2]], s)
    assert a[0].tolist() == a[1].tolist() == [-math.inf, 2.0, -0.5, -math.inf]
    assert a[2].tolist() == RAW


def test_the_grammar_state_walks_the_output_and_dies_on_an_illegal_token():
    g = Grammar(((1, -1, 0, -1), (-1, 0, -1, 1)))
    assert g.state(()) == 0 and g.state((0,)) == 1 and g.state((0, 3, 1)) == 0
    assert g.state((1,)) == DEAD and g.state((1, 0)) == DEAD and not g.allowed(DEAD).any()
    a = process(np.tile(RAW, (2, 1)), (), [[PAD], [0]], Processors(grammar=g))
    assert a[0].tolist() == [1.0, -math.inf, -0.5, -math.inf] and a[1].tolist() == [-math.inf, 2.0, -math.inf, 0.5]
    with pytest.raises(InputError, match="leave no token"):
        process(RAW, (), [[1]], Processors(grammar=g))


def test_min_p_keeps_tokens_above_the_fraction_of_the_top_one_and_renormalises():
    p = probs([0.0, math.log(0.5), math.log(0.09), math.log(0.2)], (), [[]], None, Processors(min_p=0.1))
    # probabilities proportional to 1, 0.5, 0.09, 0.2; 0.09 < 0.1 * 1 is dropped
    np.testing.assert_allclose(p, np.array([1, 0.5, 0, 0.2]) / 1.7, rtol=1e-14)


def test_order_logit_bias_after_penalties_and_temperature_after_both():
    s = Processors(repetition_penalty=2.0, logit_bias={1: 1.0})
    # bias after the penalty: (2.0 / 2) + 1 = 2.0 (the other order would give 1.5)
    assert process(RAW, (1,), [[]], s)[1] == 2.0
    p = probs(RAW, (1,), [[]], Transform(temperature=0.5), s)
    np.testing.assert_allclose(p, np.exp(np.array([1.0, 2.0, -0.5, 0.5]) / 0.5) / np.exp(np.array([1.0, 2.0, -0.5, 0.5]) / 0.5).sum(), rtol=1e-14)


def test_stopped_is_the_position_of_the_first_stop_token():
    assert stopped([[1, 0, 2, 0], [1, 2, 3, 4], [0, PAD, PAD, PAD]], (0,)).tolist() == [1, 4, 0]


# ------------------------------------------------------------------ exact laws

def test_the_processed_law_is_a_distribution_of_runs_that_end_at_the_first_stop():
    target = ToyModel(5, 3, scale=1.0)
    s = Processors(stop_tokens=(0,), min_tokens=1, frequency_penalty=0.7, grammar=Grammar(
        ((1, -1, 2, 0, -1), (0, 1, -1, -1, 0), (-1, 2, 0, 1, 1))))
    law = laws.processed_law(target, Transform(), s, (1, 2), 4)
    assert abs(law.total() - 1.0) < 1e-12
    for seq in law.sequences:
        assert len(seq) == 4 or seq[-1] == 0
        assert 0 not in seq[:-1] and seq[0] != 0                    # nothing after a stop; min_tokens 1
        assert s.grammar.state(seq) != DEAD
    short = [q for q in law.sequences if len(q) < 4]
    assert short                                                     # some runs do end early
    # one run's probability by hand: the product of its processed rows
    seq = law.sequences[int(np.argmax(law.probs))]
    want = np.prod([model_probs(target, (1, 2), seq[:j], None, s)[seq[j]] for j in range(len(seq))])
    assert law.to_dict()[seq] == pytest.approx(want, rel=1e-14)


def test_with_nothing_on_the_processed_law_is_the_target_law():
    target = ToyModel(4, 9, scale=0.7, zero_frac=0.2)
    a = laws.processed_law(target, Transform(top_k=2), Processors(), (1,), 3)
    b = laws.target_law(laws.Transformed(target, Transform(top_k=2)), (1,), 3)
    assert a.sequences == b.sequences and np.array_equal(a.probs, b.probs)


def test_the_toy_engine_without_processors_is_unchanged_by_an_all_off_setting():
    target = ToyModel(4, 5, scale=0.7)
    e = SpecEngine()
    a, _ = e.generate(target, target.draft(6), (1,), 2, Transform(), 3, 500, 4)
    b, _ = e.generate(target, target.draft(6), (1,), 2, Transform(), 3, 500, 4, processors=Processors())
    assert np.array_equal(a, b)


# ------------------------------------------------------------------ bad input

@pytest.mark.parametrize("kw,needle", [
    ({"repetition_penalty": 0.0}, "repetition_penalty 0.0 must be > 0"),
    ({"repetition_penalty": float("nan")}, "repetition_penalty nan must be a finite number"),
    ({"frequency_penalty": float("inf")}, "frequency_penalty inf"),
    ({"presence_penalty": "1"}, "presence_penalty '1'"),
    ({"min_p": 1.5}, "min_p 1.5 must be in [0, 1]"),
    ({"min_tokens": -1}, "min_tokens -1"),
    ({"min_tokens": 1.5}, "min_tokens 1.5"),
    ({"logit_bias": ((1, float("nan")),)}, "logit_bias"),
    ({"logit_bias": ((1, 1.0), (1, 2.0))}, "biased twice"),
    ({"banned_tokens": (-2,)}, "banned_tokens"),
    ({"banned_sequences": ((),)}, "an empty sequence"),
    ({"banned_sequences": "ab"}, "banned_sequences"),
    ({"stop_tokens": (1.5,)}, "stop_tokens"),
    ({"grammar": ((0, 1),)}, "grammar: must be a reference.processors.Grammar"),
])
def test_bad_settings_are_one_line_input_errors(kw, needle):
    with pytest.raises(InputError) as e:
        Processors(**kw)
    assert needle in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("table,needle", [
    ((), "non-empty tuple"),
    (((0, 1), (0,)), "rectangular"),
    (((0, 2),), "next state outside"),
    (((-1, -1),), "allows no token"),
])
def test_bad_grammars_are_input_errors(table, needle):
    with pytest.raises(InputError, match=needle):
        Grammar(table)


def test_token_ids_outside_the_vocabulary_are_input_errors():
    with pytest.raises(InputError, match="token id 7 outside the vocabulary"):
        process(RAW, (), [[]], Processors(stop_tokens=(7,)))
    with pytest.raises(InputError, match="grammar: table has 2 tokens"):
        process(RAW, (), [[]], Processors(grammar=Grammar(((0, 0),))))


# ------------------------------------------------------------------ the protocol

class _Declares(SpecEngine):
    name = "declares"


def test_the_processor_declaration_is_validated_like_capabilities():
    bad = _Declares()
    bad.processors = {"repetition_penalty", "min_pp"}
    with pytest.raises(AdapterError, match="unknown processor name"):
        check_adapter(bad, "x")
    bad.processors = "min_p"
    with pytest.raises(AdapterError, match="processors must be a set"):
        check_adapter(bad, "x")
    bad.processors = {"min_p"}
    bad.capabilities = {"chain"}
    bad.verify = lambda batch, coins: None
    with pytest.raises(AdapterError, match="not the \"engine\" capability"):
        check_adapter(bad, "x")
    check_adapter(SpecEngine(), "x")
    assert set(SpecEngine.processors) == set(NAMES)


class _PenaltiesOnly(SpecEngine):
    name = "penalties-only"
    processors = {"repetition_penalty", "frequency_penalty", "presence_penalty"}


def test_undeclared_processors_are_not_run_and_are_listed_as_not_covered():
    result = run_audit(_PenaltiesOnly(), Context(samples=20_000), ["processors"], factory=_PenaltiesOnly)
    ran = [r.name for r in result.checks if r.verdict == "pass"]
    assert any("repetition_penalty" in n for n in ran) and not any("grammar" in n or "min_p" in n for n in ran)
    assert "processors" in result.not_covered
    for name in ("grammar", "min_p", "stop_tokens", "logit_bias", "banned_tokens"):
        assert name in result.not_covered["processors"]


def test_an_adapter_without_processors_gets_no_processor_row():
    class Plain(SpecEngine):
        name = "plain"
    del_attr = Plain()
    del_attr.processors = set()
    result = run_audit(del_attr, Context(samples=20_000), ["processors", "runs"], factory=None)
    assert not any(r.check == "processors" and r.verdict in ("pass", "fail") for r in result.checks)
    assert "grammar" in result.not_covered["processors"]


def test_a_run_cut_short_without_processors_is_still_an_adapter_error():
    class Short(SpecEngine):
        name = "short"

        def generate(self, *a, **k):
            tokens, info = super().generate(*a, **k)
            tokens[:, -1] = PAD
            return tokens, info
    with pytest.raises(AdapterError, match="fewer than"):
        run_audit(Short(), Context(samples=20_000), ["runs"], factory=None)


# ------------------------------------------------------------------ reference passes, mutants caught

def test_the_reference_passes_every_processor_row():
    result = run_audit(ReferenceEngine(), Context(), ["processors", "identity"], factory=ReferenceEngine)
    rows = [r for r in result.checks if r.check in ("processors", "identity")]
    assert len([r for r in rows if "processors" in r.name or "stop" in r.name or "grammar" in r.name]) >= 14
    assert all(r.verdict == "pass" for r in rows), [(r.name, r.detail) for r in rows if r.verdict != "pass"]
    assert not result.not_covered
    stat = [r for r in rows if r.statistical]
    assert stat and all(0 < r.min_detectable_tv < 0.08 for r in stat)


# mutant -> the row (name prefix) meant for its bug class, which must fail at the default sizes
MEANT = {
    "penalty-committed-only": "engine.processors[frequency_penalty=1",
    "penalty-last-token-twice": "engine.processors[frequency_penalty=1",
    "processors-bonus-row-only": "engine.processors[min_p=0.2",
    "min-tokens-draft-off-by-one": "engine.processors[min_tokens=2",
    "penalties-off-when-speculating": "engine.processors[repetition_penalty=2",
    "grammar-not-advanced-in-drafts": "engine.grammar[legal tokens",
    "grammar-not-rolled-back": "engine.grammar[legal tokens",
    "tokens-after-stop": "engine.stop[nothing after stop",
    "processors-on-target-only": "engine.identity_draft[processors penalties",
}
EXACT = {"processors-bonus-row-only", "grammar-not-advanced-in-drafts",
         "grammar-not-rolled-back", "tokens-after-stop", "processors-on-target-only"}


@pytest.mark.parametrize("name", list(MEANT))
def test_each_processor_mutant_is_caught_by_the_row_meant_for_its_class(name):
    check = "identity" if name == "processors-on-target-only" else "processors"
    result = run_audit(make(name), Context(), [check], factory=lambda: make(name))
    rows = [r for r in result.checks if r.name.startswith(MEANT[name])]
    assert rows and all(r.verdict == "fail" for r in rows), [(r.name, r.verdict, r.detail) for r in rows]
    assert all(r.exact for r in rows) == (name in EXACT)


def test_the_greedy_rows_see_the_penalty_and_grammar_mutants_exactly():
    for name, row in (("penalty-committed-only", "penalties"), ("grammar-not-advanced-in-drafts", "min_tokens")):
        result = run_audit(make(name), Context(samples=20_000), ["processors"], factory=lambda: make(name))
        greedy = [r for r in result.checks if r.name.startswith(f"engine.processors_greedy[{row}")]
        assert greedy and greedy[0].verdict == "fail" and greedy[0].exact


def test_the_cli_audits_a_processor_mutant_with_exit_1():
    proc = subprocess.run([sys.executable, "-m", "specverify", "audit", "mutant:tokens-after-stop", "--checks",
                           "processors", "--samples", "20000"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr[-500:]
    assert "engine.stop[nothing after stop" in proc.stdout and "tokens after the first stop token" in proc.stdout


# ------------------------------------------------------------------ our engine

def _random_settings(rng, vocab):
    states = int(rng.integers(1, 4))
    table = tuple(tuple(int(x) for x in np.where(rng.random(vocab) < 0.3, -1, rng.integers(0, states, vocab)))
                  for _ in range(states))
    table = tuple(r if max(r) >= 0 else (0,) + r[1:] for r in table)
    return Processors(repetition_penalty=float(rng.uniform(0.5, 2.5)), frequency_penalty=float(rng.uniform(-1, 1)),
                      presence_penalty=float(rng.uniform(-1, 1)), min_tokens=int(rng.integers(0, 4)),
                      logit_bias=((int(rng.integers(vocab)), float(rng.normal())),),
                      banned_tokens=(int(rng.integers(vocab)),), stop_tokens=(0,),
                      banned_sequences=tuple(tuple(int(t) for t in rng.integers(0, vocab, int(rng.integers(1, 3))))
                                             for _ in range(2)),
                      grammar=Grammar(table) if rng.random() < 0.5 else None)


def test_the_engines_processors_equal_the_reference_row_for_row():
    from specverify.adapters.specverify_engine import engine_processors
    from specverify.engine import processors as ep
    from specverify.engine.engine import SamplingParams

    rng = np.random.default_rng(5)
    compared = 0
    for _ in range(300):
        vocab = int(rng.integers(3, 9))
        s = _random_settings(rng, vocab)
        params = SamplingParams(temperature=1.0, **engine_processors(s))
        prompt = tuple(int(t) for t in rng.integers(0, vocab, int(rng.integers(0, 4))))
        out = [int(t) for t in rng.integers(0, vocab, int(rng.integers(0, 6)))]
        logits = rng.normal(size=vocab) * 2
        try:
            ref = process(logits, prompt, [out] if out else [[]], s)
        except InputError:              # the processors leave no token (a dead grammar state): skip
            continue
        compared += 1
        got = ep.process_row(logits, prompt, out, params, params.stop_token_ids)
        assert np.array_equal(got, ref), (s, prompt, out)
    assert compared > 100


def test_our_engine_greedy_speculative_with_processors_equals_plain_greedy_and_the_processed_argmax_path():
    from specverify.adapters.specverify_engine import engine_processors
    from specverify.engine import api
    from specverify.engine.engine import SamplingParams

    target = ToyModel(5, 21, scale=1.0)
    s = Processors(repetition_penalty=1.5, frequency_penalty=0.7, presence_penalty=0.5, min_tokens=2,
                   stop_tokens=(0,), logit_bias=((0, 1.0),))
    prompts = [(a, b) for a in range(5) for b in range(5)]
    sampling = SamplingParams(temperature=0.0, max_tokens=6, **engine_processors(s))
    plain = api.generate(target, None, prompts, sampling=sampling, spec=api.SpecOptions("none", kappa=0)).tokens
    spec = api.generate(target, target.draft(22), prompts, sampling=sampling, spec=api.SpecOptions("draft", kappa=3))
    assert spec.tokens == plain
    assert spec.metrics.num_draft_tokens > 0
    for prompt, toks in zip(prompts, plain):
        assert tuple(toks) == laws.processed_greedy_path(target, s, prompt, 6)


def test_our_engine_passes_the_processor_rows_it_declares():
    from specverify.adapters.specverify_engine import SpecverifyEngine
    from specverify.checks import processors as pc

    engine, ctx = SpecverifyEngine(), Context(samples=40_000)
    settings, transform = pc.LAW_ROWS["combined"]
    rows = ([pc.law_row(engine, ctx, "combined", settings, transform, 2000)] + pc.stop_rows(engine, ctx, 2000)
            + pc.grammar_rows(engine, ctx, 2000))
    from specverify.audit import apply_holm
    apply_holm(rows, ctx)
    assert all(r.verdict == "pass" for r in rows), [(r.name, r.detail) for r in rows]
    assert set(SpecverifyEngine.processors) == set(NAMES)


@pytest.mark.parametrize("kw,needle", [
    ({"repetition_penalty": -1.0}, "repetition_penalty -1.0 must be > 0"),
    ({"min_p": 2.0}, "min_p 2.0"),
    ({"min_tokens": -3}, "min_tokens -3"),
    ({"logit_bias": ((1, float("inf")),)}, "logit_bias"),
    ({"bad_token_ids": (-1,)}, "bad_token_ids"),
    ({"bad_sequences": ((),)}, "bad_sequences"),
    ({"grammar": ((0, -1), (0,))}, "grammar: a rectangular table"),
    ({"grammar": ((-1, -1),)}, "grammar: a rectangular table"),
])
def test_bad_engine_sampling_params_are_input_errors(kw, needle):
    from specverify.engine.engine import SamplingParams
    with pytest.raises(InputError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        SamplingParams(**kw)


@pytest.mark.parametrize("flags,needle", [
    (["--logit-bias", "12"], "--logit-bias '12': expected TOKEN=BIAS"),
    (["--repetition-penalty", "0"], "repetition_penalty 0.0 must be > 0"),
    (["--min-p", "-0.5"], "min_p -0.5"),
])
def test_generate_processor_flags_are_checked_before_the_model_loads(flags, needle):
    proc = subprocess.run([sys.executable, "-m", "specverify", "generate", "hi", "--model", "/nonexistent.gguf", *flags],
                          capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and needle in lines[0], proc.stderr
