"""An engine that is not installed: `specverify audit ENGINE` and `python -m specverify.findings ENGINE`
print one line naming the install command and exit 2 (no traceback). Each case is skipped, with the
reason, where the engine is importable (it cannot be shown absent there)."""

import os
import subprocess
import sys

import pytest

ENGINES = [("vllm", "vllm"), ("vllm-block", "vllm"), ("sglang", "sglang"), ("sglang-tree-greedy", "sglang"),
           ("transformers", "transformers"), ("transformers-assisted", "transformers")]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ""                  # the --no-deps engines are found through PYTHONPATH only
    return env


def _absent(package: str) -> bool:
    proc = subprocess.run([sys.executable, "-c", f"import importlib.util, sys; "
                           f"sys.exit(importlib.util.find_spec({package!r}) is not None)"], env=_env())
    return proc.returncode == 0


@pytest.mark.parametrize("engine,package", ENGINES)
def test_audit_of_a_missing_engine_exits_2_with_the_install_hint(engine, package):
    if not _absent(package):
        pytest.skip(f"{package} is installed here: the not-installed path cannot be shown")
    proc = subprocess.run([sys.executable, "-m", "specverify", "audit", engine], capture_output=True, text=True,
                          env=_env(), timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "not installed" in lines[0] and "pip install" in lines[0], proc.stderr


def test_findings_of_a_missing_engine_exits_2():
    if not _absent("vllm"):
        pytest.skip("vllm is installed here")
    proc = subprocess.run([sys.executable, "-m", "specverify.findings", "vllm", "--out", "/nonexistent-never-written"],
                          capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 2
    assert "not installed" in proc.stderr and "pip install" in proc.stderr


def test_unknown_engine_in_findings_exits_2():
    proc = subprocess.run([sys.executable, "-m", "specverify.findings", "no-such-engine"], capture_output=True,
                          text=True, env=_env(), timeout=300)
    assert proc.returncode == 2 and "unknown engine" in proc.stderr
