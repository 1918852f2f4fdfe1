"""The harness's drafters on the bitwise level (`battery.drafted`): the oracle's full verify chunks
(`verify.width`) and the adversarial drafter's rollbacks (`rollback[j]`) pass on our engine (tiny random
Llama, invariant backend) and catch, localised to the step and chunk position, a verify pass that
computes one chunk position another way and a rollback that keeps one rejected K/V entry."""

import pytest

from specverify.adapters.bitwise_level import (ADVERSARIAL, ORACLE, STEPS, SUBJECT, BitwiseInfo, GreedyRequest, Layout,
                                               Spec, check_info, check_request, drafted_tokens, wrong_token)
from specverify.adapters.specverify_engine import backend_available, decode_greedy
from specverify.audit import Context
from specverify.battery import drafted
from specverify.checks import bitwise
from specverify.engine.engine import Engine
from specverify.engine.model import random_llama
from specverify.errors import AdapterError, InputError

pytestmark = pytest.mark.skipif(not backend_available("invariant"), reason="the 'invariant' op backend is not registered")

V = 96
SIZES = bitwise.Sizes(4, 24, (1, 3), (), None)      # 4 prompts x 24 tokens, oracle kappa 1 and 3; rollback j < 3


class TinyEngine:
    """Our engine on a tiny random Llama at the bitwise level, taking the harness's drafters."""

    name, version, capabilities = "tiny-engine", "0", {"bitwise"}

    def __init__(self, model=None, engine_class=None):
        self.model = model or random_llama(0, vocab_size=V)
        self.engine_class = engine_class

    def bitwise_info(self):
        return BitwiseInfo(model="tiny", vocab_size=V, proposers=("ngram",), layouts=(),
                           variants={"invariant": SUBJECT}, drafted=(ORACLE, ADVERSARIAL))

    def decode_greedy(self, request):
        check_request(request, self.bitwise_info(), self.name)
        return decode_greedy(self.model, request, backend=request.variant, engine_class=self.engine_class)


def rows(engine):
    return {r.name: r for r in bitwise.run(engine, Context(), SIZES)}


def test_drafters_pass_on_our_engine_and_force_the_widths():
    got = rows(TinyEngine())
    w = got["verify.width[tiny,invariant]"]
    assert w.verdict == "pass" and w.n == 4 * 2, w.detail
    runs = w.data["drafted"]["runs"]
    assert [r["spec"] for r in runs] == ["oracle,kappa=1", "oracle,kappa=3"]
    for r, k in zip(runs, (1, 3)):         # every verify step but the last emitted kappa + 1 tokens
        assert r["widths"]["verify_steps"] > 0 and r["widths"]["at_width"] == r["widths"]["verify_steps"]
        assert r["widths"]["width"] == k + 1
    for j in range(3):
        r = got[f"rollback[tiny,invariant,j={j}]"]
        assert r.verdict == "pass", r.detail
        wd = r.data["drafted"]["runs"][0]["widths"]
        assert wd["width"] == j + 1 and wd["at_width"] == wd["verify_steps"] > 0
    assert "rollback[tiny,invariant,j=3]" not in got


class OneChunkPositionOtherReduction:
    """A verify pass whose chunk position 2 is computed by torch's own ops (another reduction order) where
    every other row goes through the invariant kernels: rows of plain decode and chunk positions 0, 1, 3
    are unchanged. The K/V written are the invariant ones (the model runs second)."""

    POSITION = 2

    def __init__(self, model):
        self.inner, self.other = model.with_backend("invariant"), model.with_backend("default")
        self.vocab_size = model.vocab_size

    def make_cache(self, *a, **kw):
        return self.inner.make_cache(*a, **kw)

    def forward(self, batch, cache):
        other = self.other.forward(batch, cache)
        rows = self.inner.forward(batch, cache).clone()              # [R, V]; rewrites the invariant K/V
        start = 0
        for n in batch.n_logits:
            if n > self.POSITION + 1:                                 # a verify chunk reaching the position
                rows[start + self.POSITION] = other[start + self.POSITION]
            start += n
        return rows


def test_a_chunk_position_with_another_reduction_is_caught_and_localised():
    eng = TinyEngine(OneChunkPositionOtherReduction(random_llama(0, vocab_size=V)))
    got = rows(eng)
    w = got["verify.width[tiny,invariant]"]
    assert w.verdict == "fail", w.detail
    d = w.data["drafted"]["first_divergence"]
    assert d["chunk_position"] == OneChunkPositionOtherReduction.POSITION
    assert d["step"] >= 1 and d["max_abs_diff"] > 0 and d["top2_margin"] is not None
    assert "chunk position 2" in w.detail and "first differing logit" in w.detail
    first_run = w.data["drafted"]["runs"][0]
    assert first_run["spec"] == "oracle,kappa=1" and first_run["identical"] == first_run["n"]   # width 2: never position 2


class KeepsOneRejectedKv(Engine):
    """Rollback that keeps the K/V of the first rejected draft: the next step's tokens sit one position
    further, and the rejected draft stays in every later context."""

    def roll_back_rejected(self, req) -> None:
        self.cache.rollback(req.kv, min(req.kv.num_computed, req.num_fed + 1))


def test_rollback_keeping_one_rejected_entry_is_caught_and_localised():
    got = rows(TinyEngine(engine_class=KeepsOneRejectedKv))
    assert got["verify.width[tiny,invariant]"].verdict == "pass"       # nothing is rejected under the oracle
    for j in range(3):
        r = got[f"rollback[tiny,invariant,j={j}]"]
        assert r.verdict == "fail", r.detail
        d = r.data["drafted"]["first_divergence"]
        # the first rejection is at step 1 (the first verify); its emitted tokens are still right (their
        # rows were computed before the rollback): the first difference is at step 2, chunk position 0
        assert (d["step"], d["chunk_position"]) == (2, 0), d
        assert d["output_index"] == 1 + (j + 1)


def test_drafted_tokens_follow_the_protocol():
    req = GreedyRequest(((5, 6),), 5, Spec(ADVERSARIAL, 3, wrong_at=1), drafts=((8, 8, 3, 5, 1),))
    assert drafted_tokens(req, 0, 1, 3, V) == [8, wrong_token(3, V), 5]
    assert drafted_tokens(req, 0, 3, 2, V) == [5, wrong_token(1, V)]
    assert drafted_tokens(req, 0, 4, 3, V) == [1]                         # past wrong_at: nothing replaced
    oracle = GreedyRequest(((5, 6),), 5, Spec(ORACLE, 3), drafts=((8, 8, 3, 5, 1),))
    assert drafted_tokens(oracle, 0, 1, 3, V) == [8, 3, 5]
    assert wrong_token(V - 1, V) == 0 and str(Spec(ADVERSARIAL, 3, wrong_at=1)) == "adversarial[j=1],kappa=3"


def test_our_engine_reports_steps_under_the_drafters():
    eng = TinyEngine()
    prompts = ((1, 2, 3, 4),)
    base = eng.decode_greedy(GreedyRequest(prompts, 9, variant="invariant"))
    res = eng.decode_greedy(GreedyRequest(prompts, 9, Spec(ORACLE, 3), variant="invariant", drafts=base.tokens))
    assert res.tokens == base.tokens and res.info[STEPS] == [[1, 4, 4]]
    adv = eng.decode_greedy(GreedyRequest(prompts, 9, Spec(ADVERSARIAL, 3, wrong_at=0), variant="invariant",
                                          drafts=base.tokens))
    assert adv.tokens == base.tokens and adv.info[STEPS] == [[1] * 9]


@pytest.mark.parametrize("request_, message", [
    (GreedyRequest(((1,),), 3, Spec(ORACLE, 2)), "drafts must hold, per prompt, 3 ids"),
    (GreedyRequest(((1,),), 3, Spec(ORACLE, 2), drafts=((1, 2),)), "drafts must hold, per prompt, 3 ids"),
    (GreedyRequest(((1,),), 3, Spec(ADVERSARIAL, 2, wrong_at=2), drafts=((1, 2, 3),)), "wrong_at 2 must be"),
    (GreedyRequest(((1,),), 3, Spec(ORACLE, 2, wrong_at=0), drafts=((1, 2, 3),)), "goes with the adversarial"),
    (GreedyRequest(((1,),), 3, Spec("ngram", 2), drafts=((1, 2, 3),)), "go with the oracle and adversarial"),
])
def test_malformed_drafted_requests_are_input_errors(request_, message):
    info = TinyEngine().bitwise_info()
    with pytest.raises(InputError, match=message):
        check_request(request_, info, "x")


def test_an_adapter_without_the_drafters_refuses_them_and_unknown_ones_are_errors():
    info = BitwiseInfo("m", 8, proposers=("ngram",))
    with pytest.raises(InputError, match="unknown proposer 'oracle'"):
        check_request(GreedyRequest(((1,),), 3, Spec(ORACLE, 2), drafts=((1, 2, 3),)), info, "x")
    with pytest.raises(AdapterError, match="unknown drafter"):
        check_info(BitwiseInfo("m", 8, drafted=("psychic",)), "x")


def test_locate():
    assert drafted.locate([1, 4, 4], 0) == (0, 0)
    assert drafted.locate([1, 4, 4], 6) == (2, 1)
    assert drafted.locate(None, 3) == (None, None)
