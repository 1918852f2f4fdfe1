"""The pytest gate as a downstream project uses it: a project in a temporary directory with the
README's example adapter (correct) and a copy with one bug (resample from p instead of the residual),
and a test file using the installed plugin's `specverify` fixture and marker, run by pytest in a
subprocess (the plugin is found through its pytest11 entry point, as in any project that installed
specverify). The correct adapter passes; the buggy one fails with the failing checks, their statistic,
p-value and min detectable TV, and a command that reproduces the failure."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1] / "docs" / "examples" / "my_sampler.py"   # = the README's adapter (tests/test_docs.py)

TEST_FILE = '''
import pytest
from my_sampler import factory
from buggy_sampler import factory as buggy_factory

CHECKS = ["marginal", "joint", "acceptance", "endpoints", "composition"]


@pytest.mark.specverify(samples=5000, checks=CHECKS)
def test_my_sampler_is_exact(specverify):
    specverify.assert_exact(factory)


@pytest.mark.specverify(samples=5000, checks=CHECKS)
def test_buggy_sampler_is_exact(specverify):
    specverify.assert_exact(buggy_factory)


def test_audit_returns_the_result(specverify):
    result = specverify.audit(factory, samples=2000, checks=["endpoints"])
    assert result.verdict == "pass" and result.checks
'''


def readme_adapter() -> str:
    assert EXAMPLE.is_file(), "docs/examples/my_sampler.py (the README's example adapter) is missing"
    return EXAMPLE.read_text()


def project(tmp_path: Path) -> Path:
    good = readme_adapter()
    buggy = good.replace("np.maximum(p[i] - q_i, 0.0)", "p[i]").replace('name = "my-sampler"', 'name = "buggy-sampler"')
    assert buggy != good
    (tmp_path / "my_sampler.py").write_text(good)
    (tmp_path / "buggy_sampler.py").write_text(buggy)
    (tmp_path / "test_exact.py").write_text(TEST_FILE)
    return tmp_path


def run(args, cwd):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=cwd, timeout=600)


def test_the_downstream_gate_passes_a_correct_sampler_and_fails_a_buggy_one(tmp_path):
    root = project(tmp_path)
    reports = tmp_path / "reports"
    proc = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "test_exact.py", "--specverify-report", str(reports),
                "--specverify-jobs", "1"], root)
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert re.search(r"1 failed, 2 passed", out), out
    assert "test_buggy_sampler_is_exact" in out and "FAILED test_exact.py::test_my_sampler_is_exact" not in out
    # the first line is the summary: rows failed, the kind of deviation, the closest known bug (issue 32)
    first = re.search(r"specverify: buggy-sampler: (\d+)/(\d+) rows failed \(biased output law\); closest known bug: "
                      r"resample-from-p", out)
    assert first and 0 < int(first.group(1)) <= int(first.group(2)), out
    # pytest's short summary cuts the first line to the terminal's width; the plugin's section has it whole
    section = out[out.index("= specverify ="):]
    assert re.search(r"test_exact.py::test_buggy_sampler_is_exact: buggy-sampler: \d+/\d+ rows failed "
                     r"\(biased output law\); closest known bug: resample-from-p", section), out
    assert "as recovered token" in out and "hint: closest known bugs:" in out
    # --specverify-report: every audited test's JSON and its report
    for test in ("test_my_sampler_is_exact", "test_buggy_sampler_is_exact"):
        name = f"test_exact.py_{test}"
        doc = json.loads((reports / f"{name}.json").read_text())
        assert doc["verdict"] == ("fail" if "buggy" in test else "pass")
        assert (reports / name / "index.html").is_file() and (reports / name / "README.md").is_file()
    assert "report: " in out
    # the failure names the checks with statistic, p-value and power, and how to reproduce it
    assert "buggy-sampler is not exact" in out
    # the gate stops decisively: a failing row states its e-value (or fixed-budget statistic), p, power, n
    assert re.search(r"chain\.marginal\[\w[^\]]*\]\s+(statistic [\d.e+]+ \(dof \d+\), p|e-value exp\([\d.e+]+\) >= "
                     r"[\d.e+]+ after \d+ look\(s\), anytime p) = [\d.e+-]+, min detectable TV 0\.\d+, n = \d+", out), out
    cmd = re.search(r"reproduce: (specverify audit \S+ .*)", out)
    assert cmd, out
    assert "buggy_sampler.py:factory" in cmd.group(1) and "--samples 5000" in cmd.group(1)
    # the command reproduces the failure (same seed, samples and checks): exit 1
    again = run(["-m", "specverify", *cmd.group(1).split()[1:], "--quiet"], root)
    assert again.returncode == 1, again.stderr


@pytest.mark.slow      # heavy for CI's 25 minutes (measured 42-210 s); run with -m slow
def test_the_readme_adapter_passes_the_whole_battery(tmp_path):
    (tmp_path / "my_sampler.py").write_text(readme_adapter())
    proc = run(["-m", "specverify", "audit", "my_sampler.py:factory", "--samples", "3000", "--quiet"], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_plugin_is_registered_and_adapter_errors_fail_the_test_with_one_line(tmp_path):
    (tmp_path / "test_broken.py").write_text(
        "def test_broken(specverify):\n"
        "    specverify.assert_exact('no_such_module_abc:factory')\n")
    # -rN: no short summary, whose line carries the message or not depending on the terminal's width
    proc = run(["-m", "pytest", "-q", "-rN", "-p", "no:cacheprovider", "test_broken.py"], tmp_path)
    assert proc.returncode == 1
    assert "specverify: plug-in 'no_such_module_abc:factory': no module named 'no_such_module_abc'" in proc.stdout
    assert "Traceback" not in proc.stdout
    # once: the failure was raised inside the except block, and the chained error printed it again
    assert proc.stdout.count("no module named 'no_such_module_abc'") == 1, proc.stdout
    assert "During handling of the above exception" not in proc.stdout
