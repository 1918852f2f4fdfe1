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
(`--specverify-samples`, `--specverify-seed`, `--specverify-alpha`, `--specverify-timeout`; all
derived from the declarations in `specverify.settings`), the
adapter's own `audit_defaults`, the defaults of `specverify audit` (`specverify.settings`: 200000
samples, seed 0, alpha 1e-3, all checks, bitwise size standard).
"""

from __future__ import annotations

import pytest

from specverify.format import fmt

from specverify import settings as settings_mod
from specverify.verdicts import PASS


def pytest_addoption(parser):
    """The `--specverify-NAME` options: every setting declared for the "option" door (`specverify.settings`)."""
    settings_mod.add_pytest_options(parser.getgroup("specverify", "specverify exactness gate"))


def pytest_configure(config):
    config.addinivalue_line("markers", settings_mod.marker_line())


class ExactnessGate:
    """The `specverify` fixture: audit an engine with this test's settings, or assert it is exact."""

    def __init__(self, settings: dict, error: str | None = None):
        self.settings = settings
        self.error = error          # a bad marker or option: the test fails with it at its first audit

    def audit(self, engine, **overrides):
        """Run the battery; returns `specverify.audit.AuditResult`. A usage error (a bad setting, an
        unknown capability, a missing method) or a broken adapter fails the test with one line."""
        from specverify.audit import BATTERY, prepare
        from specverify.errors import AdapterError, InputError

        if self.error:
            pytest.fail(self.error, pytrace=False)
        try:
            keys = settings_mod.marker_keywords()
            unknown = set(overrides) - set(keys)
            if unknown:
                raise InputError(f"unknown setting(s) {', '.join(sorted(unknown))}; known: {', '.join(keys)}")
            given = dict(self.settings)
            given.update(settings_mod.check_given(overrides, BATTERY, lambda k: settings_mod.spelled(k, "keyword")))
            given = settings_mod.with_door_defaults(given, "option")   # the gate stops decisively, fails fast
            audit = prepare(engine, given)
            result = audit.run()
        except (AdapterError, InputError) as exc:
            error = f"specverify: {exc}"
        else:
            error = None
        if error is not None:           # outside the except: no chained exception printing it twice
            pytest.fail(error, pytrace=False)
        result.spec = audit.spec
        result.settings = audit.settings.to_dict()
        return result

    def assert_exact(self, engine, **overrides):
        """Fail the calling test, with a reproducible report, unless every check passes."""
        result = self.audit(engine, **overrides)
        if result.verdict != PASS:
            pytest.fail(report(result), pytrace=False)
        return result


def _g(x) -> str:
    """A number of an e-process for a message ("inf" stays "inf")."""
    return x if isinstance(x, str) else fmt(x, ".4g")


def report(result) -> str:
    """The failure message: one line per failing check, then the command that reproduces it."""
    failed = result.failed()
    lines = [f"specverify: {result.engine} is not exact -- {len(failed)} of {len(result.checks)} checks failed "
             f"({result.family()}, seed {result.seed}, {result.samples} samples per problem)"]
    width = max(len(c.name) for c in failed)
    for c in failed:
        if c.exact:
            lines.append(f"  {c.name.ljust(width)}  exact failure: {c.detail}")
        elif "sequential" in c.data:
            seq = c.data["sequential"]
            seen = (f"e-value exp({_g(seq.get('max_log_e'))}) >= {_g(seq.get('threshold_e'))} after {seq.get('looks')} "
                    f"look(s), anytime p" if "threshold_e" in seq else
                    f"at look {seq.get('looks')} (level {fmt(seq.get('level_this_look'), '.3g')}), p")
            lines.append(f"  {c.name.ljust(width)}  {seen} = {fmt(c.p_value, '.3g')}, min detectable TV "
                         f"{fmt(c.min_detectable_tv, '.4f')}, n = {c.n}")
        else:
            lines.append(f"  {c.name.ljust(width)}  statistic {fmt(c.statistic, '.4g')} (dof {fmt(c.dof, 'd')}), "
                         f"p = {fmt(c.p_value, '.3g')}, min detectable TV {fmt(c.min_detectable_tv, '.4f')}, n = {c.n}")
    s = getattr(result, "settings", {})
    spec = getattr(result, "spec", None)
    checks = s.get("checks")
    cmd = (f"specverify audit {spec} --seed {result.seed} --samples {result.samples} --alpha {result.alpha:g}"
           + (f" --checks {','.join(checks)}" if checks else "")
           + (f" --stop decisive --power-tv {s.get('power_tv', 0.01):g}" + (" --fail-fast" if s.get("fail_fast") else "")
              if s.get("stop") == "decisive" else ""))
    lines.append(f"reproduce: {cmd}" if spec else
                 f"reproduce: (give a module-level factory to get a command) {cmd.replace('None', '<engine>')}")
    return "\n".join(lines)


@pytest.fixture
def specverify(request):
    """An ExactnessGate with this test's settings (marker, command line); each value is checked here,
    and a bad one fails the test with one line naming it."""
    from specverify.audit import BATTERY
    from specverify.errors import InputError

    try:
        options = {s.name: request.config.getoption(f"specverify_{s.name}", default=None)
                   for s in settings_mod.at_door("option")}
        settings = settings_mod.check_given(options, BATTERY, lambda k: settings_mod.spelled(k, "option"))
        marker = request.node.get_closest_marker("specverify")
        if marker is not None:
            settings_mod.check_marker(marker.args, marker.kwargs)
            settings.update(settings_mod.check_given(marker.kwargs, BATTERY,
                                                     lambda k: settings_mod.spelled(k, "marker")))
    except InputError as exc:
        return ExactnessGate({}, error=f"specverify: {exc}")   # fails the test when it audits
    return ExactnessGate(settings)
