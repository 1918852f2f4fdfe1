"""The documentation: the README stays a quickstart (under 300 lines, the two set-up commands that
.ci/run and the tests read, the example adapter), and the docs site builds with `mkdocs build --strict`
(a broken link or anchor, a missing snippet or nav entry fails the build). The README's adapter is the
file docs/examples/my_sampler.py, which the pytest-plugin tests audit; here it also runs against the
reference's rules on a small batch."""

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
EXAMPLES = ROOT / "docs" / "examples"


def fenced_after(marker: str, lang: str) -> str:
    block = re.search(rf"<!-- {marker} -->\s*```{lang}\n(.*?)```", README.read_text(), re.S)
    assert block, f"README.md has no ```{lang} block after <!-- {marker} -->"
    return block.group(1)


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_readme_is_a_quickstart():
    assert len(README.read_text().splitlines()) < 300


def test_the_readme_holds_both_set_up_commands():
    main = fenced_after("main-command", "sh").strip()
    test = fenced_after("test-command", "sh").strip()
    assert len(main.splitlines()) == len(test.splitlines()) == 1
    assert main.startswith("python3 -m venv .venv") and "specverify audit specverify" in main
    assert test.startswith("python3 -m venv .venv") and 'pytest -m "not slow" -q' in test


def test_ci_reads_the_test_command_from_the_readme():
    """.ci/run's own awk program extracts exactly the README's test command."""
    awk = re.search(r"cmd=\$\(awk '(.*?)' README.md\)", (ROOT / ".ci" / "run").read_text()).group(1)
    got = subprocess.run(["awk", awk, str(README)], capture_output=True, text=True, check=True).stdout
    assert got.strip() == fenced_after("test-command", "sh").strip()


def test_the_readme_adapter_is_the_docs_example():
    assert fenced_after("example-adapter", "python") == (EXAMPLES / "my_sampler.py").read_text()


def test_the_docs_include_the_example_files():
    """The docs pages include the examples by snippet, so they show the files the tests run."""
    assert '--8<-- "docs/examples/my_sampler.py"' in (ROOT / "docs" / "adapter-protocol.md").read_text()
    assert '--8<-- "docs/examples/my_greedy.py"' in (ROOT / "docs" / "bitwise.md").read_text()


def test_the_example_adapter_passes_an_audit():
    """docs/examples/my_sampler.py audited in this process: the exact rows (coin endpoints, batch
    composition, the greedy rule) and the marginal rows at a small sample size all pass. The whole battery
    through the pytest plugin: tests/test_pytest_plugin.py."""
    from specverify.audit import prepare
    checks = ["marginal", "endpoints", "composition", "greedy"]
    result = prepare(f"{EXAMPLES / 'my_sampler.py'}:factory", {"checks": checks, "samples": 1000}).run(jobs=1)
    assert result.verdict == "pass", [c.name for c in result.failed()]
    assert {c.name.split(".")[0] for c in result.checks} >= {"chain", "greedy"}


def test_the_greedy_example_runs():
    mod = load(EXAMPLES / "my_greedy.py", "my_greedy_docs")
    engine = mod.factory()
    assert engine.capabilities == {"bitwise"} and engine.bitwise_info().vocab_size == mod.V


def test_the_site_builds_strict(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed: pip install -e '.[test]' (mkdocs-material)")
    pytest.importorskip("material", reason="mkdocs-material is not installed: pip install -e '.[test]'")
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    cli = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "specverify audit" in cli and "--samples" in cli, "the CLI reference was not generated"


def test_the_readme_links_point_at_files():
    """mkdocs checks the site's links; the README is not part of the site, so its relative links
    (the docs pages of the engines table and the documentation list) are checked here."""
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README.read_text())
    relative = [link for link in links if "://" not in link]
    assert relative, "the README links to no docs page"
    missing = [link for link in relative if not (ROOT / link).exists()]
    assert not missing, missing
