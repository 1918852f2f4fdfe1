"""The serving path at the engine level (`checks/engine_serving.py`, capability "serving"): every row passes
on our engine in process (`adapters/specverify_serving.py`) and each zoo mutant 45-51, 54 and 55 (`zoo/serving.py`, the
server variants in process) fails the row meant for it; the protocol's declarations and outputs are
checked. Every row is exact (a comparison on a toy model, float64 rows), so there is no false-alarm rate
to state: the exact engine passes and each mutant fails deterministically (fixed seeds)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytest.importorskip("torch")

from specverify.adapters.serving_level import EngineLevelEngine, ServingOutput, ServingRequest  # noqa: E402
from specverify.adapters.specverify_serving import SpecverifyServing  # noqa: E402
from specverify.battery.base import Context  # noqa: E402
from specverify.checks import engine_serving  # noqa: E402
from specverify.errors import AdapterError  # noqa: E402
from specverify.zoo import TARGETS, make  # noqa: E402
from specverify.zoo.serving import ROW  # noqa: E402

ROWS = ("engine.logprobs", "engine.stop", "engine.length", "engine.stream", "engine.seeds", "engine.prefix_cache",
        "engine.preemption")


def _by_row(rows):
    return {r.name.split("[")[0]: r for r in rows}


def test_our_engine_passes_every_engine_level_serving_row():
    rows = _by_row(engine_serving.run(SpecverifyServing(), Context()))
    assert {k: rows[k].verdict for k in ROWS} == {k: "pass" for k in ROWS}, \
        [(r.name, r.detail) for r in rows.values() if r.verdict != "pass"]
    assert all(rows[k].exact for k in ROWS)
    assert rows["engine.logprobs"].data["compared"] >= 80 and "toy target" in rows["engine.logprobs"].detail
    assert len(rows["engine.stop"].data["positions"]) >= 10               # stops completed all along the runs
    assert rows["engine.preemption"].data["decode_preemptions_at_once"] > 0   # the stress happened, mid-decode
    assert min(rows["engine.prefix_cache"].data["cached_warm"]) > 0
    n = rows["engine.seeds.n_independent"]                                 # not at this level: said, not passed
    assert n.verdict == "skip" and n.data["not_covered"]
    law = rows["engine.preemption.law"]      # a chi-squared test: false alarm at most alpha (1e-3), fixed seed
    assert law.verdict == "pass" and not law.exact and law.p_value > 1e-3, law.detail
    assert law.data["decode_preemptions"] > 0 and law.n >= 500 and law.dof >= 10


def test_on_multibyte_text_every_row_passes_and_the_stream_sees_characters_split_across_tokens():
    """The toy's text as byte pieces (a quote, the euro sign as a byte pair E2 82 + AC, an emoji): every row
    passes on our engine, the runs do hold multi-byte characters, some split across two tokens, and the
    stream row compares deltas == text == the pieces' bytes decoded. Mutant 55 (a step ending inside a
    character streams U+FFFD at once) fails only the stream row there."""
    from specverify.models.pieces import multibyte_codec
    from specverify.adapters.protocol import check_adapter
    adapter = SpecverifyServing(text="multibyte")
    check_adapter(adapter, "specverify-serving[text multibyte]")
    rows = _by_row(engine_serving.run(adapter, Context()))
    assert {k: rows[k].verdict for k in ROWS} == {k: "pass" for k in ROWS}, \
        [(r.name, r.detail) for r in rows.values() if r.verdict != "pass"]
    assert "detokenised ids" in rows["engine.stream"].detail
    codec = multibyte_codec(4)
    outs = adapter.complete(tuple(ServingRequest((1, 2, 3, 0, 1, 2), 12, 1.0, seed, (), None, True)
                                  for seed in range(20)))
    for o in outs:
        assert o.text == codec.encode(o.ids) and "".join(o.deltas) == o.text
    pairs = [o for o in outs if any(o.ids[i:i + 2] == (1, 2) for i in range(len(o.ids) - 1))]
    assert pairs and all("\u20ac" in o.text for o in pairs)        # "€" from the byte pair
    # a step boundary inside the character: one step's ids end with the lead bytes, the next starts with the tail
    assert any(a and b and a[-1] == 1 and b[0] == 2 for o in pairs for a, b in zip(o.delta_ids, o.delta_ids[1:]))
    assert any("\U0001F600" in o.text for o in outs) and any('"' in o.text for o in outs)
    broken = _by_row(engine_serving.run(make("stream-splits-characters"), Context()))
    assert broken["engine.stream"].verdict == "fail" and "\ufffd" in broken["engine.stream"].detail
    assert all(broken[k].verdict == "pass" for k in ROWS if k != "engine.stream")
    words = _by_row(engine_serving.run(SpecverifyServing("stream-splits-characters", text="words"), Context()))
    assert words["engine.stream"].verdict == "pass"      # ASCII words never split a character: why the text matters


def test_the_preemption_law_row_states_its_power_and_fails_the_stale_draft_mutant():
    """The law row is a Pearson chi-squared test at the audit's alpha (1e-3 by default; fixed seeds: the
    exact engine's p-value is the same every run). Its power: the smallest total-variation deviation from
    the exact law detected with probability 0.99 at these runs and cells must be below 0.25 (mutant 54
    moves far more mass than that on the runs it preempts). The mutant fails it."""
    from specverify.checks import serving
    from specverify.stats.power import min_detectable_tv
    exact = serving.preemption_law_row(EngineLevelEngine(SpecverifyServing()), Context())
    assert exact.verdict == "pass" and exact.p_value > 1e-3, exact.detail
    tv = min_detectable_tv(exact.n, exact.dof, alpha=1e-3, power=0.99)
    assert tv < 0.25, tv
    law = serving.preemption_law_row(EngineLevelEngine(make("preempt-accepts-stale-drafts")), Context())
    assert law.verdict == "fail" and law.data["decode_preemptions"] > 0, law.detail


@pytest.mark.parametrize("name", sorted(ROW))
def test_each_serving_mutant_fails_the_row_meant_for_it(name):
    assert TARGETS[name] == ("engine_serving",)
    rows = _by_row(engine_serving.run(make(name), Context()))
    row = rows[ROW[name]]
    assert row.verdict == "fail", (row.name, row.detail)
    assert row.exact or row.p_value < 1e-3, (row.name, row.detail)      # the law row: a test at alpha 1e-3
    if ROW[name] == "engine.preemption.law":     # the exact comparisons miss it: only the law sees it
        assert rows["engine.preemption"].verdict == "pass", rows["engine.preemption"].detail


def test_the_zoo_holds_the_server_variants_as_mutants_45_to_51():
    from specverify.server.variants import VARIANTS
    from specverify.zoo.registry import CATALOGUE
    numbers = {CATALOGUE[n].number: n for n in ROW}
    assert sorted(numbers) == list(range(45, 52)) + [54, 55]
    assert {make(n).variant for n in ROW} == set(VARIANTS) - {"exact", "recovered-from-p"}


def test_an_exact_engine_without_a_kv_budget_is_no_pass_on_preemption():
    """A wave that preempts nothing is a SKIP (not covered), never a PASS."""
    adapter = SpecverifyServing()
    from specverify.server.app import engine_factory
    from specverify.server.batching import Batcher
    from dataclasses import replace
    adapter.batcher = Batcher(engine_factory(adapter.model, replace(adapter.config, kv_budget=None)))
    from specverify.checks import serving
    row = serving.preemption_row(EngineLevelEngine(adapter), Context())
    assert row.verdict == "skip" and row.data["not_covered"] and row.data["preemptions_at_once"] == 0
    law = serving.preemption_law_row(EngineLevelEngine(adapter), Context())
    assert law.verdict == "skip" and law.data["not_covered"] and law.data["preemptions"] == 0


class _Stub:
    """A "serving" adapter answering every request with `answer(request)`."""

    capabilities = {"serving"}
    serving_model = "tiny:4,7"
    name, version = "stub", None

    def __init__(self, answer, features=("text", "stop", "seed", "usage")):
        self.answer, self.serving_features = answer, features

    def complete(self, requests):
        return [self.answer(r) for r in requests]


def test_declarations_are_checked_before_any_work():
    from specverify.adapters.protocol import check_adapter
    ok = _Stub(lambda r: None)
    check_adapter(ok, "stub")
    bad_model = _Stub(lambda r: None)
    bad_model.serving_model = "smollm2"
    with pytest.raises(AdapterError, match="serving_model"):
        check_adapter(bad_model, "stub")
    with pytest.raises(AdapterError, match="unknown serving feature.*logprob\\b"):
        check_adapter(_Stub(lambda r: None, features=("logprob",)), "stub")
    with pytest.raises(AdapterError, match="serving_features must be a collection"):
        check_adapter(_Stub(lambda r: None, features="logprobs"), "stub")


def test_malformed_outputs_are_an_adapter_error_naming_the_output():
    req = dict(prompt=(1, 2), max_tokens=3, temperature=0.0)
    for answer, words in ((lambda r: ServingOutput((1, 9), "length"), "not token ids"),
                          (lambda r: ServingOutput((1, 2), "eos"), "finish_reason 'eos'"),
                          (lambda r: (1, 2), "not a ServingOutput")):
        engine = EngineLevelEngine(_Stub(answer))
        with pytest.raises(AdapterError, match=words):
            engine.client.many([req], 1)


def test_a_missing_feature_is_a_skip_listed_as_not_covered():
    """An adapter without logprobs or streams: those rows SKIP with a reason, the others still run."""
    def answer(r: ServingRequest):
        ids = tuple((sum(r.prompt) + j) % 4 for j in range(r.max_tokens))
        return ServingOutput(ids, "length", " ".join(f"t{t}" for t in ids), completion_tokens=len(ids))
    rows = _by_row(engine_serving.run(_Stub(answer), Context()))
    for k in ("engine.logprobs", "engine.stream", "engine.preemption"):
        assert rows[k].verdict == "skip" and rows[k].data["not_covered"], (k, rows[k].detail)
    assert rows["engine.length"].verdict == "pass" and "engine.length.usage" not in rows      # usage declared
    no_usage = _Stub(answer, features=("text", "stop", "seed"))
    rows = _by_row(engine_serving.run(no_usage, Context()))
    assert rows["engine.length"].verdict == "pass" and "usage not checked" in rows["engine.length"].detail
    assert rows["engine.length.usage"].verdict == "skip" and rows["engine.length.usage"].data["not_covered"]


def test_the_length_row_catches_a_crossed_cap_without_usage():
    """With no usage block the caps are still checked: one token past max_tokens fails."""
    def answer(r: ServingRequest):
        ids = tuple((sum(r.prompt) + j) % 4 for j in range(r.max_tokens + (r.max_tokens == 5)))
        return ServingOutput(ids, "length", " ".join(f"t{t}" for t in ids))
    from specverify.checks import serving
    row = serving.length_row(EngineLevelEngine(_Stub(answer, features=("text",))), Context())
    assert row.verdict == "fail" and "the cap crossed" in row.detail


def test_audit_runs_the_serving_adapter_in_its_own_process(tmp_path):
    """Through the isolation layer (the default): `complete` and `counters` cross the process boundary."""
    out = tmp_path / "a.json"
    proc = subprocess.run([sys.executable, "-m", "specverify", "audit", "specverify-serving", "--checks",
                           "engine_serving", "--json", str(out)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(out.read_text())
    rows = {c["name"].split("[")[0]: c for c in result["checks"]}
    assert result["verdict"] == "pass" and {rows[k]["verdict"] for k in ROWS} == {"pass"}
    assert rows["engine.preemption"]["data"]["decode_preemptions_at_once"] > 0
    assert "n > 1" in result["not_covered"]["engine_serving"]


def test_the_minimal_adapter_of_the_protocol_page_runs_as_documented():
    """docs/adapter-protocol.md's GreedyToy: logprobs, length and stream pass; stop, seeds and preemption
    are SKIPs (it declares no stop or seed, has no counters)."""
    import pathlib
    import re
    page = (pathlib.Path(__file__).parent.parent / "docs" / "adapter-protocol.md").read_text()
    code = re.search(r"```python\n(import numpy as np\n.*?class GreedyToy.*?)```", page, re.S).group(1)
    space: dict = {}
    exec(compile(code, "greedy_toy.py", "exec"), space)
    rows = _by_row(engine_serving.run(space["factory"](), Context()))
    assert {k: rows[k].verdict for k in ("engine.logprobs", "engine.length", "engine.stream")} == \
        {"engine.logprobs": "pass", "engine.length": "pass", "engine.stream": "pass"}
    for k in ("engine.stop", "engine.seeds", "engine.preemption"):
        assert rows[k].verdict == "skip" and rows[k].data["not_covered"], (k, rows[k].detail)


@pytest.mark.slow      # ~130 generate calls: 67 s under load 15 on 2 shared cores
def test_transformers_assisted_generation_at_the_serving_level():
    """transformers-serving: the raw `logits` assisted generation returns per new token give every
    logprob within LOGPROB_ATOL of the toy target's (generate keeps float32 logits), its streamer's
    step chunks concatenate to the ids; what its API lacks is a SKIP, never a pass."""
    pytest.importorskip("transformers")
    from specverify.adapters.hf_serving import TransformersServing
    from specverify.checks import serving
    level = EngineLevelEngine(TransformersServing())
    assert not level.float64_logprobs
    rows = {r.name.split("[")[0]: r for r in (serving.logprobs_row(level, Context()), serving.stream_row(level, Context()),
                                             serving.stop_row(level, Context()), serving.preemption_row(level, Context()),
                                             serving.length_row(level, Context()))}
    assert rows["server.length"].verdict == "pass" and "usage not checked" in rows["server.length"].detail
    assert rows["server.logprobs"].verdict == "pass" and "within 0.001" in rows["server.logprobs"].detail
    assert rows["server.logprobs"].data["compared"] >= 80
    assert rows["server.stream"].verdict == "pass", rows["server.stream"].detail
    assert rows["server.stop"].verdict == rows["server.preemption"].verdict == "skip"
