"""The Python API (issue 32): `specverify.audit(engine, **settings) -> AuditResult` at the top level,
its keywords derived from the settings, a readable result, one verdict vocabulary; the module
`specverify.audit` keeps working as before."""

import inspect
import subprocess
import sys

import pytest

import specverify
from specverify import settings
from specverify.errors import InputError


def test_the_keywords_are_the_settings_and_how_to_run():
    params = inspect.signature(specverify.audit).parameters
    assert list(params)[0] == "engine"
    assert tuple(list(params)[1:]) == settings.NAMES + ("jobs", "isolated", "progress", "executor")
    for name in settings.NAMES:
        assert params[name].kind is inspect.Parameter.KEYWORD_ONLY and params[name].default is None
        assert f"{name}:" in specverify.api.audit.__doc__


def test_the_module_is_still_the_module():
    import specverify.audit as module
    from specverify.audit import AuditResult, prepare, run_audit  # noqa: F401

    assert module is specverify.audit and callable(module) and module.prepare is prepare
    assert specverify.AuditResult is AuditResult


def test_import_specverify_stays_light():
    code = "import specverify, sys; print('specverify.audit' in sys.modules, 'numpy' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]


@pytest.mark.parametrize("kw, msg", [
    ({"sample": 1000}, "unknown keyword argument(s) sample"),
    ({"samples": 5}, "samples= 5: must be an integer in"),
    ({"checks": ["marginal", "nope"]}, "unknown check(s) nope"),
    ({"fail_fast": True}, "fail_fast=True needs stop='decisive'"),
    ({"isolated": "no"}, "isolated='no'"),
])
def test_bad_keywords_are_one_input_error_before_any_work(kw, msg):
    with pytest.raises(InputError) as info:
        specverify.audit("no_such_module_xyz:factory", **kw)
    assert msg in str(info.value)


def test_an_audit_and_its_displays():
    r = specverify.audit("reference", samples=2000, checks=["marginal", "endpoints"], isolated=False)
    assert r.passed and r.verdict == specverify.PASS == "pass"
    assert r.settings["samples"] == 2000 and r.spec == "reference"
    text = str(r)
    assert text.splitlines()[0].startswith("reference: PASS -- ") and "hint" not in text
    assert repr(r).startswith("AuditResult(engine='reference', verdict='pass'")
    html = r._repr_html_()
    assert "<table>" in html and "<details>" in html and "reference: PASS" in html
    md = r._repr_markdown_()
    assert md.startswith("**reference: PASS") and "<details>" in md


def test_a_failing_audit_reads_as_one(tmp_path):
    r = specverify.audit("mutant:resample-from-p", samples=2000, checks=["marginal"], isolated=False)
    assert not r.passed and r.verdict == specverify.FAIL
    first = str(r).splitlines()[0]
    assert first.startswith("mutant:resample-from-p: FAIL (biased output law) -- ") and "rows failed" in first
    html = r._repr_html_()
    assert html.index("Failing rows") < html.index("<details>")       # failing rows first, the rest folded
    assert "&lt;" not in r.engine and "<script" not in html
