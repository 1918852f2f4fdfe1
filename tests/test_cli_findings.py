"""`specverify findings NAME [ARGS ...]`: one door to the findings scripts. --help lists every script
with one line; an unknown name is one error line and exit 2; ARGS reach the script unchanged."""

from __future__ import annotations

import importlib
import sys
import types

import pytest

from specverify.cli import main
from specverify.cli.findings import SCRIPTS


def test_every_script_is_a_findings_module_with_main():
    for name, (module, line) in SCRIPTS.items():
        assert module.startswith("specverify.findings") and line and "\n" not in line
        assert name == name.lower() and "_" not in name
        source = importlib.util.find_spec(module).origin
        text = open(source).read()
        assert "def main(argv=None) -> int:" in text, module
        assert 'if __name__ == "__main__"' not in text or module.endswith("__main__"), module


def test_help_lists_every_script_with_one_line(capsys):
    with pytest.raises(SystemExit) as e:
        main(["findings", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name, (_, line) in SCRIPTS.items():
        assert f"  {name}" in out and line in out


def test_an_unknown_name_is_one_line_and_exit_2(capsys):
    assert main(["findings", "no-such-script", "--x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown findings script 'no-such-script'" in err and "hf-bitwise" in err


def test_the_arguments_reach_the_script(monkeypatch):
    seen = []
    fake = types.ModuleType("specverify.findings.fake_script")
    fake.main = lambda argv: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, fake.__name__, fake)
    monkeypatch.setitem(SCRIPTS, "fake-script", (fake.__name__, "a fake"))
    assert main(["findings", "fake-script", "--prompts", "3", "x"]) == 3
    assert seen == [["--prompts", "3", "x"]]


def test_a_script_that_checks_its_own_arguments_says_how_it_is_called(capsys):
    assert main(["findings", "vllm-engine-guard", "nonsense"]) == 2
    assert "usage: specverify findings vllm-engine-guard" in capsys.readouterr().err
