"""`serving_skips`: an engine-level "serving" adapter may state why its engine's API cannot run a row;
the reason is appended to that row's SKIP (and so to not covered), never to a row that ran, and a
declaration naming an unknown row is an error before any work. Exact: no false-alarm rate to state."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from specverify.adapters.serving_level import ServingOutput  # noqa: E402
from specverify.battery.base import Context  # noqa: E402
from specverify.checks import engine_serving  # noqa: E402
from specverify.errors import AdapterError  # noqa: E402


class _Plain:
    """Greedy-free made-up decoding of tiny:4,7 words: ids only, text, usage (no logprobs, stop, stream)."""

    capabilities = {"serving"}
    serving_model = "tiny:4,7"
    serving_features = ("text", "seed", "usage")
    name, version = "plain-stub", None

    def __init__(self, skips=None):
        if skips is not None:
            self.serving_skips = skips

    def complete(self, requests):
        out = []
        for r in requests:
            ids = tuple((sum(r.prompt) + j) % 4 for j in range(r.max_tokens))
            out.append(ServingOutput(ids, "length", " ".join(f"t{t}" for t in ids), completion_tokens=len(ids)))
        return out


def _rows(adapter):
    return {r.name.split("[")[0]: r for r in engine_serving.run(adapter, Context())}


def test_the_reason_goes_to_the_skip_and_nowhere_else():
    why = {"logprobs": "the API returns token ids only", "length.usage": "never shown: the row runs"}
    rows = _rows(_Plain(why))
    assert rows["engine.logprobs"].verdict == "skip" and rows["engine.logprobs"].data["not_covered"]
    assert rows["engine.logprobs"].detail.endswith("-- the engine's API: the API returns token ids only")
    assert rows["engine.length"].verdict == "pass" and "never shown" not in rows["engine.length"].detail
    assert "the engine's API" not in rows["engine.stream"].detail        # no reason given: the row's own words
    sub = _rows(_Plain({"preemption": "no KV budget"}))                 # a sub-row shares its row's reason
    assert sub["engine.preemption.law"].verdict == "skip"
    assert sub["engine.preemption.law"].detail.endswith("-- the engine's API: no KV budget")
    plain = _rows(_Plain())
    assert plain["engine.logprobs"].detail + " -- the engine's API: the API returns token ids only" \
        == rows["engine.logprobs"].detail


def test_an_unknown_row_or_a_malformed_reason_is_an_error_before_any_work():
    from specverify.adapters.protocol import check_adapter
    check_adapter(_Plain({"stop": "no stop strings"}), "stub")
    with pytest.raises(AdapterError, match="unknown row.*logprob\\b"):
        check_adapter(_Plain({"logprob": "typo"}), "stub")
    with pytest.raises(AdapterError, match="serving_skips must be a dict"):
        check_adapter(_Plain({"stop": ""}), "stub")
    with pytest.raises(AdapterError, match="serving_skips must be a dict"):
        check_adapter(_Plain(["stop"]), "stub")
