"""Checks that need a module from an extra (issue 32): looked up before any work; a missing one is a
SKIP row listed under not covered, or exit 2 when the user named the check. The whole path from a
wheel without extras: tests/test_packaging.py (slow)."""

import pytest

from specverify import audit as audit_mod
from specverify import checks, extras
from specverify.errors import InputError


def test_the_lookup_names_the_extra_without_importing():
    assert extras.missing(("no_such_module_xyz.sub", "sys")) == ["no_such_module_xyz.sub"]
    assert extras.install_line(["torch"]) == "pip install 'specverify[engine]'"
    assert extras.install_line(["torch", "triton", "transformers"]) == "pip install 'specverify[engine,triton,transformers]'"
    assert checks.BY_NAME["rank_agreement"].needs == ("torch",)


@pytest.fixture
def without_torch(monkeypatch):
    real = extras.missing
    monkeypatch.setattr(extras, "missing", lambda modules: [m for m in modules if m == "torch"] + real(
        [m for m in modules if m != "torch"]))


def test_a_missing_extra_is_a_skip_row_listed_as_not_covered(without_torch):
    names, missing = audit_mod.available(["marginal", "rank_agreement"], named=False)
    assert names == ["marginal"] and missing == {"rank_agreement": "needs torch: pip install 'specverify[engine]'"}
    (row,) = audit_mod.unavailable_rows(missing)
    assert row.verdict == "skip" and row.check == "rank_agreement" and "pip install 'specverify[engine]'" in row.detail


def test_a_named_check_whose_extra_is_missing_is_an_input_error_before_the_adapter_is_built(without_torch):
    with pytest.raises(InputError, match=r"check rank_agreement needs torch: pip install 'specverify\[engine\]'"):
        audit_mod.prepare("no_such_module_xyz:factory", {"checks": ["marginal", "rank_agreement"]})


def test_the_audit_skips_it_lists_it_and_passes_the_rest(without_torch, monkeypatch):
    """run_audit of the whole battery (here two checks of it) without torch: a SKIP row, not covered."""
    from specverify.adapters.registry import factory
    from specverify.battery.base import Context

    monkeypatch.setattr(audit_mod, "default_checks", lambda engine: ["endpoints", "rank_agreement"])
    result = audit_mod.run_audit(factory("reference")(), Context(samples=1000))
    assert result.verdict == "pass"
    assert result.not_covered == {"rank_agreement": "needs torch: pip install 'specverify[engine]'"}
    skipped = [c for c in result.checks if c.check == "rank_agreement"]
    assert [c.verdict for c in skipped] == ["skip"]


def test_an_adapter_missing_an_extra_module_says_what_to_install():
    from specverify.isolation import wire

    exc = ModuleNotFoundError("No module named 'torch'", name="torch")
    assert wire.failure(exc)[1] == "raised ModuleNotFoundError: No module named 'torch' (pip install 'specverify[engine]')"
    other = ModuleNotFoundError("No module named 'mypkg'", name="mypkg")
    assert wire.failure(other)[1] == "raised ModuleNotFoundError: No module named 'mypkg'"


def test_the_cpu_engine_path_needs_no_triton():
    """triton is its own extra (`specverify[triton]`): with its import blocked, the engine and its
    invariant CPU backend load (the engine's audit then passes: measured in issue 32's report)."""
    import subprocess
    import sys

    code = ("import sys, importlib.abc\n"
            "class Block(importlib.abc.MetaPathFinder):\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name.split('.')[0] == 'triton':\n"
            "            raise ModuleNotFoundError(f'No module named {name!r}', name=name)\n"
            "sys.meta_path.insert(0, Block())\n"
            "import specverify.engine\n"
            "from specverify.kernels.backend import get_backend\n"
            "print(type(get_backend('invariant')).__name__, 'triton' in sys.modules)\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split()[-1] == "False"
