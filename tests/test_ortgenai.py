"""ONNX Runtime GenAI adapter (`adapters.ortgenai`): small end-to-end runs on tiny Llamas exported by the
engine's own model builder. Skipped where the engine is not installed (CI's main environment)."""

import importlib.util
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("transformers")

from specverify.adapters import ortgenai
from specverify.models import tiny as tiny_llama
from specverify.adapters.bitwise_level import ROWS, GreedyRequest, Layout, Spec
from specverify.battery.base import Context
from specverify.checks.joint import sequence_gof
from specverify.checks.runs import SETUP, target_law
from specverify.errors import InputError
from specverify.reference.span_drafters import NgramSpan, RecentNgramSpan
from specverify.reference.transforms import Transform

INSTALLED = importlib.util.find_spec("onnxruntime_genai") is not None
needs_engine = pytest.mark.skipif(not INSTALLED, reason="onnxruntime-genai is not installed: "
                                "bash specverify/findings/install_ortgenai.sh (a venv with onnxruntime-genai==0.18.0)")
P_FLOOR = 1e-4          # a correct mapping fails a row below this with probability 1e-4 (fixed seeds)
RUNS = 1500


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """(target, draft) TabulatedModels of the battery's run setup (V = 4), exported once."""
    root = tmp_path_factory.mktemp("ortgenai")
    adapter = ortgenai.OrtGenAI(ortgenai.DRAFT, root=root)
    folders = adapter.own_models(SETUP.vocab, 7)
    return tuple(tiny_llama.tabulated(f) for f in folders)


def _law_p(adapter, pair, transform, seed=3, draft=None):
    target, d = pair
    tokens, info = adapter.generate(target, d if draft is None else draft, SETUP.prompt, SETUP.kappa, transform,
                                    seed, RUNS, SETUP.length)
    row = sequence_gof("t", tokens, target_law(target, transform), 0.0, Context(samples=RUNS))
    return row.p_value, info


@needs_engine
@pytest.mark.parametrize("method", ortgenai.METHODS)
def test_greedy_runs_follow_the_target_argmax_path(pair, method):
    target, draft = pair
    tokens, _ = ortgenai.OrtGenAI(method).generate(target, draft, SETUP.prompt, SETUP.kappa, Transform(temperature=0.0),
                                                   0, 16, SETUP.length)
    path = []
    for _ in range(SETUP.length):
        path.append(int(np.argmax(target.probs(SETUP.prompt + tuple(path)))))
    assert (tokens == np.array(path)[None, :]).all()


@needs_engine
@pytest.mark.parametrize("method", ortgenai.METHODS)
def test_runs_have_the_target_law(pair, method):
    p, info = _law_p(ortgenai.OrtGenAI(method), pair, Transform(temperature=0.6, top_k=3))
    assert p > P_FLOOR
    if method == ortgenai.DRAFT:
        assert 0 < info["num_accepted"] < info["num_drafted"]       # a noisy draft: some rejections
    else:                     # n-gram: its own rule's traces, every run's counters agreeing with them
        assert info["counter_mismatches"]["runs"] == 0, info["counter_mismatches"]
        assert info["num_accepted"] == sum(m for t in info["verify_counts"] for _, m in t)


class _TemperatureDropped(ortgenai.OrtGenAI):
    """A mutated mapping: the engine is given temperature 1 whatever the transform asks."""

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        wrong = Transform(temperature=1.0, top_k=transform.top_k, top_p=transform.top_p)
        return super().generate(target, draft, prompt, kappa, wrong, seed, n, length, processors)


@needs_engine
def test_a_mutated_temperature_mapping_is_caught(pair):
    p, _ = _law_p(_TemperatureDropped(ortgenai.DRAFT), pair, Transform(temperature=0.5))
    assert p < 1e-6


@needs_engine
def test_identity_draft_accepts_every_draft(pair):
    target, _ = pair
    _, info = ortgenai.OrtGenAI(ortgenai.DRAFT).generate(target, target, SETUP.prompt, SETUP.kappa,
                                                        Transform(temperature=0.7, top_k=3), 11, 300, 8)
    assert info["num_drafted"] > 0 and info["num_accepted"] == info["num_drafted"]


@needs_engine
def test_runs_are_reproducible_from_their_seeds(pair):
    target, draft = pair
    adapter = ortgenai.OrtGenAI(ortgenai.DRAFT)
    a, _ = adapter.generate(target, draft, SETUP.prompt, SETUP.kappa, Transform(), 100, 20, SETUP.length)
    b, _ = adapter.generate(target, draft, SETUP.prompt, SETUP.kappa, Transform(), 110, 10, SETUP.length)
    assert (a[10:] == b).all() and not (a[:10] == a[10:]).all()


@needs_engine
def test_unknown_method_is_an_input_error():
    with pytest.raises(InputError, match="unknown speculation method"):
        ortgenai.OrtGenAI("eagle")


@needs_engine
def test_bitwise_tiny_speculative_and_batched_decode_equal_plain():
    adapter = ortgenai.tiny()
    prompts = adapter.bitwise_info().prompts[:4]
    base = adapter.decode_greedy(GreedyRequest(prompts, 12, logits=ROWS))
    for spec in (Spec(ortgenai.SELF_DRAFT, 3), Spec(ortgenai.NGRAM, 2)):
        assert adapter.decode_greedy(GreedyRequest(prompts, 12, spec=spec)).tokens == base.tokens
    batched = adapter.decode_greedy(GreedyRequest(prompts, 12, layout=Layout(4), logits=ROWS))
    assert batched.tokens == base.tokens
    assert all(np.array_equal(a, b) for a, b in zip(batched.logits, base.logits))
    with pytest.raises(InputError, match="one sequence at a time with speculation"):
        adapter.decode_greedy(GreedyRequest(prompts, 4, spec=Spec(ortgenai.NGRAM, 2), layout=Layout(4)))


@pytest.mark.skipif(INSTALLED, reason="onnxruntime-genai is installed here: the not-installed path cannot be shown")
@pytest.mark.parametrize("engine", ["ortgenai", "ortgenai-ngram", "ortgenai-bitwise-tiny"])
def test_a_missing_engine_is_one_line_and_exit_2(engine):
    proc = subprocess.run([sys.executable, "-m", "specverify", "audit", engine], capture_output=True, text=True,
                          timeout=300)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "not installed" in lines[0] and "install_ortgenai.sh" in lines[0]


def _all_accepted_steps(schedule, kappa, length):
    """Drafts of each verify step of a run whose every draft is accepted (reference.acceptance.drafts_at)."""
    from specverify.reference import acceptance as acc
    steps, emitted = [], 0
    while emitted < length:
        k = acc.drafts_at(schedule, kappa, emitted, length)
        if k:
            steps.append(k)
        emitted += k + 1 if (k == 0 or emitted + k < length) else k     # no bonus when the drafts reach length
    return steps


@needs_engine
def test_declared_schedule_is_what_the_engine_drafts(pair):
    """draft_schedule = "to-length": with draft = target (every draft accepted), greedy, the engine's own
    counters give exactly the drafts and rounds `to-length` predicts at every length 1..6 (`tokens-left`,
    the nearest other schedule, predicts fewer drafts at lengths 1, 2, 4, 5)."""
    target, _ = pair
    engine = ortgenai.OrtGenAI(ortgenai.DRAFT)
    assert engine.draft_schedule == "to-length" and engine.verify_rule == "chain"
    runs = 2
    for length in range(1, 7):
        steps = _all_accepted_steps(engine.draft_schedule, SETUP.kappa, length)
        _, info = engine.generate(target, target, SETUP.prompt, SETUP.kappa, Transform(temperature=0.0), 0, runs,
                                  length)
        assert (info["num_drafted"], info["num_accepted"], info["num_verifies"]) == \
            (runs * sum(steps), runs * sum(steps), runs * len(steps)), length
    ngram = ortgenai.OrtGenAI(ortgenai.NGRAM)
    assert (ngram.draft_schedule, ngram.verify_rule) == ("to-length", "sample-match")
    assert isinstance(ngram.span_drafter, RecentNgramSpan)


def test_ngram_trace_worked_example_and_a_standard_step():
    """`ngram_trace` (pure): the measured greedy run (4 rounds, 8 proposed, 2 accepted) and a run whose
    first lookup finds nothing (a standard step, no round)."""
    rule = RecentNgramSpan(1, 1)
    assert ortgenai.ngram_trace(rule, (1, 2, 3, 1, 2, 0, 1, 2), (3,) * 6, 3, 6) == [(3, 0), (3, 0), (1, 1), (1, 1)]
    # (1,): nothing earlier -> standard step emits 2; (1, 2): nothing -> 2; (1, 2, 2): 2 at 1 -> span (2,),
    # kept (the next token is 2), bonus 0; 4 tokens done
    assert ortgenai.ngram_trace(rule, (1,), (2, 2, 2, 0), 3, 4) == [(1, 1)]
    # the earliest-match rule drafts (3, 1, 2) from the same context: the first draft is kept
    assert ortgenai.ngram_trace(NgramSpan(1, 1), (1, 2, 3, 1, 2, 0, 1, 2), (3,) * 6, 3, 6)[0] == (3, 1)


@needs_engine
def test_ngram_counters_agree_with_its_own_rule_and_not_the_earliest_match(pair):
    """From (1, 2, 3, 1, 2, 0, 1, 2) at temperature 0.7, kappa 3, 6 tokens: 200 runs' own round counters
    (rounds, proposed, accepted) agree with the latest-match rule's traces in every run and disagree with
    the earliest-match rule's in most (measured: 283 of 300 in `ortgenai_ngram_stats.out`)."""
    target, _ = pair
    engine = ortgenai.OrtGenAI(ortgenai.NGRAM)
    prompt = (1, 2, 3, 1, 2, 0, 1, 2)
    _, info = engine.generate(target, None, prompt, 3, Transform(temperature=0.7), 0, 200, 6)
    assert info["counter_mismatches"]["runs"] == 0, info["counter_mismatches"]
    engine.span_drafter = NgramSpan(1, 1)
    _, info = engine.generate(target, None, prompt, 3, Transform(temperature=0.7), 0, 200, 6)
    assert info["counter_mismatches"]["runs"] > 100
