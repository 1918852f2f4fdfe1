"""ONNX Runtime GenAI's Generator at the serving engine level (`specverify audit ortgenai-serving`,
`adapters/ortgenai_serving.py`).

Exact rows (ids and text equal): no false-alarm rate to state. Without the engine: the piece tokenizer
it serves is exact both ways (transformers), and the audit exits 2 with the install line. With the
engine (slow: the first run exports the pair with the model builder): length, stream and seeds pass,
logprobs / stop / usage are SKIPs under not covered; a wrapper that streams only each round's last token
fails the stream row (the other direction)."""

from __future__ import annotations


import pytest

from specverify import installed
from specverify.models import pieces


def test_the_piece_tokenizer_is_exact_both_ways():
    pytest.importorskip("transformers")
    from specverify.adapters.ortgenai_serving import EOS_PIECE, VOCAB, piece_tokenizer
    tok = piece_tokenizer(VOCAB)
    codec = pieces.codec(VOCAB)
    ids = [0, 1, 2, 3, 3, 0, 2]
    assert tok.decode(ids) == codec.encode(ids) == "abcddac"
    assert tok("abcddac", add_special_tokens=False)["input_ids"] == ids
    assert tok.convert_tokens_to_ids(EOS_PIECE) == VOCAB


def _ort():
    if not installed.available("onnxruntime_genai"):
        from specverify.adapters.ortgenai import INSTALL
        pytest.skip(f"onnxruntime-genai is not installed; to run: {INSTALL}")
    from specverify.adapters.ortgenai_serving import OrtGenAIServing
    return OrtGenAIServing


@pytest.mark.slow
def test_ortgenai_generator_rows_and_a_stream_that_drops_tokens():
    from specverify.adapters.serving_level import EngineLevelEngine, ServingOutput
    from specverify.battery.base import Context
    from specverify.checks import engine_serving, serving
    cls = _ort()
    engine = cls()
    rows = {r.name.split("[")[0]: r for r in engine_serving.run(engine, Context())}
    for k in ("engine.length", "engine.stream", "engine.seeds"):
        assert rows[k].verdict == "pass", (k, rows[k].detail)
    for k in ("engine.logprobs", "engine.stop", "engine.length.usage", "engine.prefix_cache", "engine.preemption"):
        assert rows[k].verdict == "skip" and rows[k].data["not_covered"], (k, rows[k].detail)
    assert engine.steps["accepted"] > 0          # drafts were kept: the rows saw speculative rounds

    class LastOfPair(cls):                         # every other event dropped from the stream
        def _one(self, r):
            o = super()._one(r)
            if not r.stream:
                return o
            return ServingOutput(o.ids, o.finish_reason, o.text, deltas=o.deltas[1::2], delta_ids=o.delta_ids[1::2])

    bad = serving.stream_row(EngineLevelEngine(LastOfPair()), Context())
    assert bad.verdict == "fail" and "streamed" in bad.detail, bad.detail


def test_audit_without_ortgenai_exits_2_with_the_install_hint(audit_needs_install):
    audit_needs_install('onnxruntime_genai', 'ortgenai-serving', 'install_ortgenai.sh')
