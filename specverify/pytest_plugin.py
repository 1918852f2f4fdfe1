"""pytest plugin: a CI gate that fails a test when a sampler or engine is not exact.

Installed with specverify (entry point `pytest11: specverify`); nothing to import. In a downstream
project's tests:

    import pytest
    from mypkg.spec import factory          # factory() -> an adapter (`specverify.adapters.protocol`)

    def test_sampler_is_exact(specverify):
        specverify.assert_exact(factory)    # or "mypkg.spec:factory", "path/to/file.py:factory"

    @pytest.mark.specverify(samples=50_000, checks=["marginal", "joint", "endpoints"])
    def test_sampler_quick(specverify):
        specverify.assert_exact(factory)

`assert_exact(engine, **settings)` runs the audit battery (`specverify.audit.run_audit`) and, if any
check fails, fails the test with one line per failing check -- name, statistic, p-value, minimum
detectable TV -- and the `specverify audit ...` command that reproduces it. `audit(engine, ...)` returns
the `AuditResult` without asserting. `engine` is a registered name or plug-in spec, a factory (any
zero-argument callable returning an adapter, a class included), or an adapter instance (then the
seeded checks, which need fresh instances, are skipped).

Settings (the first given wins): keyword arguments, the `specverify` marker, the command line
(`--specverify-samples`, `--specverify-seed`, `--specverify-alpha`, `--specverify-timeout`), the
defaults of `specverify audit` (200000 samples, seed 0, alpha 1e-3, all checks).
"""

from __future__ import annotations

import inspect
import os

import pytest

from specverify.format import fmt

SETTINGS = ("samples", "seed", "alpha", "timeout", "checks")
DEFAULTS = {"samples": 200_000, "seed": 0, "alpha": 1e-3, "timeout": 120.0, "checks": None}


def pytest_addoption(parser):
    group = parser.getgroup("specverify", "specverify exactness gate")
    group.addoption("--specverify-samples", type=int, default=None, help="samples per statistical problem")
    group.addoption("--specverify-seed", type=int, default=None, help="seed of the audit")
    group.addoption("--specverify-alpha", type=float, default=None, help="family-wise false-alarm rate")
    group.addoption("--specverify-timeout", type=float, default=None, help="seconds one adapter call may take")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "specverify(samples=None, seed=None, alpha=None, timeout=None, checks=None): settings of the "
        "specverify exactness gate (the `specverify` fixture) in this test")


def _spec_of(obj) -> str | None:
    """A `path/to/file.py:name` or `pkg.module:name` spec that reloads `obj`, if there is one."""
    name = getattr(obj, "__qualname__", None)
    if not name or "<" in name or "." in name:
        return None
    module = getattr(obj, "__module__", None)
    try:
        path = inspect.getsourcefile(obj)
    except TypeError:
        path = None
    if path:
        rel = os.path.relpath(path)
        return f"{rel if not rel.startswith('..') else path}:{name}"
    return f"{module}:{name}" if module and module != "__main__" else None


class ExactnessGate:
    """The `specverify` fixture: audit an engine with this test's settings, or assert it is exact."""

    def __init__(self, settings: dict):
        self.settings = settings

    def _resolve(self, engine):
        from specverify.adapters.registry import factory as named_factory

        if isinstance(engine, str):
            factory = named_factory(engine)                 # resolved once (a plug-in file is executed once)
            return factory(), factory, engine
        if hasattr(engine, "capabilities") and not inspect.isclass(engine):
            return engine, None, None                       # an instance: no fresh copies
        if callable(engine):
            return engine(), engine, _spec_of(engine)
        raise TypeError(f"specverify: cannot audit {engine!r}: give a name, a factory or an adapter")

    def audit(self, engine, **overrides):
        """Run the battery; returns `specverify.audit.AuditResult` (AdapterError if the adapter breaks)."""
        from specverify.audit import BATTERY, Context, run_audit
        from specverify.errors import InputError

        s = {**self.settings, **{k: v for k, v in overrides.items() if v is not None}}
        unknown = set(s) - set(SETTINGS)
        if unknown:
            raise TypeError(f"specverify: unknown setting(s) {sorted(unknown)}; known: {SETTINGS}")
        checks = s.get("checks")
        if checks:
            checks = [checks] if isinstance(checks, str) else list(checks)
            bad = [c for c in checks if c not in BATTERY]
            if bad:
                raise InputError(f"unknown check(s) {bad}; available: {BATTERY}")
        adapter, factory, spec = self._resolve(engine)
        ctx = Context(seed=s["seed"], samples=s["samples"], alpha=s["alpha"], timeout=s["timeout"])
        result = run_audit(adapter, ctx, checks, factory=factory)
        result.spec = spec
        result.settings = {**s, "checks": checks}
        return result

    def assert_exact(self, engine, **overrides):
        """Fail the calling test, with a reproducible report, unless every check passes."""
        from specverify.errors import AdapterError, InputError

        try:
            result = self.audit(engine, **overrides)
        except (AdapterError, InputError) as exc:
            pytest.fail(f"specverify: {exc}", pytrace=False)
        if result.verdict != "pass":
            pytest.fail(report(result), pytrace=False)
        return result


def report(result) -> str:
    """The failure message: one line per failing check, then the command that reproduces it."""
    failed = result.failed()
    lines = [f"specverify: {result.engine} is not exact -- {len(failed)} of {len(result.checks)} checks failed "
             f"(family-wise alpha {result.alpha:g} by Holm, seed {result.seed}, {result.samples} samples per problem)"]
    width = max(len(c.name) for c in failed)
    for c in failed:
        if c.exact:
            lines.append(f"  {c.name.ljust(width)}  exact failure: {c.detail}")
        else:
            lines.append(f"  {c.name.ljust(width)}  statistic {fmt(c.statistic, '.4g')} (dof {fmt(c.dof, 'd')}), "
                         f"p = {fmt(c.p_value, '.3g')}, min detectable TV {fmt(c.min_detectable_tv, '.4f')}, n = {c.n}")
    s = getattr(result, "settings", {})
    spec = getattr(result, "spec", None)
    checks = s.get("checks")
    cmd = (f"specverify audit {spec} --seed {result.seed} --samples {result.samples} --alpha {result.alpha:g}"
           + (f" --checks {','.join(checks)}" if checks else ""))
    lines.append(f"reproduce: {cmd}" if spec else
                 f"reproduce: (give a module-level factory to get a command) {cmd.replace('None', '<engine>')}")
    return "\n".join(lines)


@pytest.fixture
def specverify(request):
    """An ExactnessGate with this test's settings (marker, command line, defaults)."""
    settings = dict(DEFAULTS)
    for key in ("samples", "seed", "alpha", "timeout"):
        value = request.config.getoption(f"--specverify-{key}", default=None)
        if value is not None:
            settings[key] = value
    marker = request.node.get_closest_marker("specverify")
    if marker is not None:
        unknown = set(marker.kwargs) - set(SETTINGS)
        if unknown or marker.args:
            raise pytest.UsageError(f"@pytest.mark.specverify takes keyword settings {SETTINGS}, got "
                                    f"{list(marker.args) + sorted(unknown)}")
        settings.update({k: v for k, v in marker.kwargs.items() if v is not None})
    return ExactnessGate(settings)
