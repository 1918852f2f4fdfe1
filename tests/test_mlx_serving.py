"""MLX-LM's `stream_generate` with a draft model at the serving engine level (`specverify audit
mlx-serving`, `adapters/mlx_serving.py`).

Every row here is exact (ids, text, finish reasons equal; logprobs within LOGPROB_ATOL of the engine's
own teacher-forced rows): no false-alarm rate to state. Both directions on the real engine: MLX-LM passes
the rows it offers, and the same adapter reporting each token's logprob from the previous token's row
(a stale row, as a stream that lags a step would) fails the logprobs row. What MLX-LM's API lacks (stop
strings, a prefix-cache count, preemption) is a SKIP under not covered, never a pass. Without MLX-LM the
engine tests skip with the install hint, and the audit exits 2 naming it."""

from __future__ import annotations


import pytest

from specverify import installed
from specverify.battery.base import Context
from specverify.checks import engine_serving, serving

INSTALL = "MLX-LM not installed: bash specverify/findings/install_mlx.sh VENV (pip install 'mlx[cpu]==0.32.4' mlx-lm==0.32.2)"


def _mlx_serving():
    if not (installed.available("mlx") and installed.available("mlx_lm")):
        pytest.skip(INSTALL)
    pytest.importorskip("transformers", reason=installed.HINTS["transformers"])
    from specverify.adapters.mlx_serving import MlxServing
    return MlxServing


def test_piece_tokenizer_round_trips_the_pieces():
    cls = _mlx_serving()
    import importlib

    from specverify.adapters.mlx_serving import piece_tokenizer
    from specverify.models import pieces
    codec = pieces.codec(4)
    tok = piece_tokenizer(codec, importlib.import_module("mlx_lm.tokenizer_utils").TokenizerWrapper)
    assert tok.decode([0, 3, 1, 2]) == "adbc" and list(tok.eos_token_ids) == []
    assert tok.encode("dcab", add_special_tokens=False) == [3, 2, 0, 1]
    assert cls.serving_features == ("logprobs", "text", "seed", "usage", "stream")


def test_mlx_stream_generate_rows():
    """logprobs, length (with usage), stream and seeds pass; stop, prefix cache, preemption and n > 1 are
    SKIPs under not covered (reports/mlx-serving-0.32.2)."""
    cls = _mlx_serving()
    rows = {r.name.split("[")[0]: r for r in engine_serving.run(cls(), Context())}
    for k in ("engine.logprobs", "engine.length", "engine.stream", "engine.seeds"):
        assert rows[k].verdict == "pass", (k, rows[k].detail)
    assert rows["engine.logprobs"].data["compared"] >= 80 and rows["engine.logprobs"].data["whole_rows"] >= 80
    assert rows["engine.length"].data["usage_checked"]
    for k in ("engine.stop", "engine.prefix_cache", "engine.preemption", "engine.seeds.n_independent"):
        assert rows[k].verdict == "skip" and rows[k].data["not_covered"], (k, rows[k].detail)


def test_mlx_logprobs_from_the_previous_row_fail_the_logprobs_row():
    """The other direction on the real engine: each token's logprob read from the row before it (the
    first token's own: a one-token teacher-forced request is unchanged) disagrees with teacher forcing."""
    cls = _mlx_serving()

    class StaleRow(cls):
        def _one(self, r):
            from dataclasses import replace
            o = super()._one(r)
            if o.logprobs is None or not o.top or len(o.top[0]) < 4:
                return o
            stale = (o.logprobs[0],) + tuple(o.top[j - 1][t] for j, t in enumerate(o.ids) if j > 0)
            return replace(o, logprobs=stale)

    from specverify.adapters.serving_level import EngineLevelEngine
    row = serving.logprobs_row(EngineLevelEngine(StaleRow()), Context())
    assert row.verdict == "fail", row.detail


def test_audit_without_mlx_exits_2_with_the_install_hint(audit_needs_install):
    audit_needs_install('mlx_lm', 'mlx-serving', 'install_mlx.sh')
