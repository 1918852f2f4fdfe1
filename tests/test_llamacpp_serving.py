"""llama-cpp-python's `create_completion` at the serving engine level (`specverify audit llamacpp-serving`,
`adapters/llamacpp_serving.py`), and what it needed of the protocol: an adapter that serves a real model
with exact one-character pieces (`serving_codec`) instead of a toy.

Every row here is exact (ids, text, finish reasons compared as equal; logprobs within LOGPROB_ATOL of
the engine's own teacher-forced rows): no false-alarm rate to state. Both directions: a correct codec
stub passes the stop row and one that keeps ids past the stop fails it; llama-cpp-python passes its rows
but the stream one (the report's finding) and a wrapper that reads the ids from the cut text fails stop.
Without llama_cpp the engine tests skip with the install hint, and the audit exits 2 naming it."""

from __future__ import annotations


import pytest

pytest.importorskip("torch")

from specverify import installed  # noqa: E402
from specverify.adapters.serving_level import EngineLevelEngine, ServingOutput  # noqa: E402
from specverify.battery.base import Context  # noqa: E402
from specverify.checks import engine_serving, serving  # noqa: E402
from specverify.errors import AdapterError  # noqa: E402
from specverify.models import pieces  # noqa: E402
from specverify.reference import serving as ref  # noqa: E402

HINT = installed.HINTS["llamacpp"]


class _Pieces:
    """A "serving" adapter on a made-up deterministic model over 4 one-character pieces: the next token
    is the sum of the context mod 4; stop strings honoured by `reference.serving.finish` (or, with
    `keep_past_stop`, the text cut but every id kept: the per-step stop bug)."""

    capabilities = {"serving"}
    serving_model = "made-up-4-pieces"
    serving_features = ("text", "stop", "seed", "usage")
    name, version = "pieces-stub", None

    def __init__(self, keep_past_stop: bool = False):
        self.serving_codec = pieces.codec(4)
        self.keep_past_stop = keep_past_stop

    def complete(self, requests):
        out = []
        for r in requests:
            ctx, ids = list(r.prompt), []
            for _ in range(r.max_tokens):
                ids.append(sum(ctx + ids) % 4)
            done = ref.finish(ids, max_tokens=r.max_tokens, detokenize=self.serving_codec.encode, stop=r.stop)
            kept = tuple(ids) if self.keep_past_stop else done.ids
            out.append(ServingOutput(kept, done.finish_reason, done.text, completion_tokens=len(kept)))
        return out


def test_a_codec_declaration_is_checked():
    from specverify.adapters.protocol import check_adapter
    check_adapter(_Pieces(), "stub")
    level = EngineLevelEngine(_Pieces())
    assert level.vocab == 4 and level.decode((0, 3, 1)) == "adb"
    wrong_type = _Pieces()
    wrong_type.serving_codec = "abcd"
    with pytest.raises(AdapterError, match="serving_codec must be"):
        check_adapter(wrong_type, "stub")
    toy_named = _Pieces()
    toy_named.serving_model = "tiny:4,7"
    with pytest.raises(AdapterError, match="names the real model"):
        check_adapter(toy_named, "stub")


def test_the_stop_row_reads_text_through_the_codec_both_directions():
    good = serving.stop_row(EngineLevelEngine(_Pieces()), Context())
    assert good.verdict == "pass", good.detail
    bad = serving.stop_row(EngineLevelEngine(_Pieces(keep_past_stop=True)), Context())
    assert bad.verdict == "fail" and "plain decode keeps" in bad.detail, bad.detail


def _llamacpp():
    if not installed.available("llama_cpp"):
        pytest.skip(f"llama-cpp-python is not installed; to run: {HINT}")
    pytest.importorskip("gguf", reason=installed.HINTS["gguf"])
    from specverify.adapters.llamacpp_serving import LlamaCppServing
    return LlamaCppServing


def test_llamacpp_create_completion_rows():
    """logprobs, stop, length (with usage) and seeds pass; the stream row fails on a stopped request (the
    streamed events name fewer tokens than the answer: reports/llamacpp-serving-0.3.36); what the API
    lacks is a SKIP under not covered, never a pass."""
    cls = _llamacpp()
    rows = {r.name.split("[")[0]: r for r in engine_serving.run(cls(), Context())}
    for k in ("engine.logprobs", "engine.stop", "engine.length", "engine.seeds"):
        assert rows[k].verdict == "pass", (k, rows[k].detail)
    assert "within 0.001" in rows["engine.logprobs"].detail and rows["engine.logprobs"].data["compared"] >= 80
    assert rows["engine.length"].data["usage_checked"] and "engine.length.usage" not in rows
    assert len(rows["engine.stop"].data["positions"]) >= 10
    assert rows["engine.stream"].verdict == "fail" and "stop" in rows["engine.stream"].detail \
        and "streamed ids" in rows["engine.stream"].detail, rows["engine.stream"].detail
    for k in ("engine.prefix_cache", "engine.preemption", "engine.seeds.n_independent"):
        assert rows[k].verdict == "skip" and rows[k].data["not_covered"], (k, rows[k].detail)


def test_llamacpp_ids_read_from_the_cut_text_fail_the_stop_row():
    """The other direction on the real engine: ids taken from the text (cut before the stop string)
    instead of logprobs.tokens lose the completing tokens, and the stop row sees it."""
    cls = _llamacpp()

    class FromText(cls):
        def _plain(self, r, res):
            o = super()._plain(r, res)
            ids = self.serving_codec.decode(o.text)
            return ServingOutput(ids, o.finish_reason, o.text, o.logprobs and o.logprobs[:len(ids)],
                                 o.top and o.top[:len(ids)], completion_tokens=len(ids))

    row = serving.stop_row(EngineLevelEngine(FromText()), Context())
    assert row.verdict == "fail" and "plain decode keeps" in row.detail, row.detail


def test_audit_without_llama_cpp_exits_2_with_the_install_hint(audit_needs_install):
    audit_needs_install('llama_cpp', 'llamacpp-serving', 'install_llamacpp.sh')


class _Scored(_Pieces):
    """_Pieces with logprobs: the row of the made-up model is log_softmax(logits) (`as_logits`: the raw
    logits sent as logprobs -- what vLLM's logprobs_mode="raw_logits" returns)."""

    serving_features = ("logprobs", "text", "stop", "seed", "usage")

    def __init__(self, as_logits: bool = False):
        super().__init__()
        self.as_logits = as_logits

    def complete(self, requests):
        import numpy as np
        out = []
        for r in requests:
            ctx, ids, lps, tops = list(r.prompt), [], [], []
            for _ in range(r.max_tokens):
                logits = np.cos(np.arange(4) * (1 + sum(ctx + ids) % 7))     # [V] the made-up row
                row = logits if self.as_logits else ref.log_softmax(logits)
                tok = int(np.argmax(logits))
                ids.append(tok)
                lps.append(float(row[tok]))
                tops.append({i: float(row[i]) for i in range(4)})
            out.append(ServingOutput(tuple(ids), "length", self.serving_codec.encode(ids), tuple(lps), tuple(tops),
                                     completion_tokens=len(ids)))
        return out


def test_whole_row_top_lists_must_be_log_probabilities():
    """Without a toy law the logprobs row compares the engine with its own teacher-forced answers, so
    logits sent as logprobs agree with themselves; a whole row's log-sum-exp must then be 0."""
    good = serving.logprobs_row(EngineLevelEngine(_Scored()), Context())
    assert good.verdict == "pass" and good.data["whole_rows"] >= 48, good.detail
    bad = serving.logprobs_row(EngineLevelEngine(_Scored(as_logits=True)), Context())
    assert bad.verdict == "fail" and "not log-probabilities" in bad.detail, bad.detail
