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
(`--specverify-samples`, `--specverify-seed`, `--specverify-checks`, ...: every setting, derived from
the declarations in `specverify.settings`), the
adapter's own `audit_defaults`, the defaults of `specverify audit` (`specverify.settings`: 200000
samples, seed 0, alpha 1e-3, all checks, bitwise size standard). `--specverify-jobs N` runs each
audit's checks side by side; `--specverify-report DIR` writes each audit's result as DIR/<test id>.json and
its HTML + Markdown report DIR/<test id>/. A failure's first line is the audit's summary
(`name: 11/27 rows failed (biased output law); closest known bug: resample-from-p`).
"""

from __future__ import annotations

import pytest

from specverify.format import fmt

from specverify import settings as settings_mod
from specverify.verdicts import PASS


def pytest_addoption(parser):
    """The `--specverify-NAME` options: every setting declared for the "option" door (`specverify.settings`),
    and how the gate runs: `--specverify-jobs`, `--specverify-report DIR`."""
    group = parser.getgroup("specverify", "specverify exactness gate")
    settings_mod.add_pytest_options(group)
    group.addoption("--specverify-jobs", type=int, default=None, dest="specverify_jobs", metavar="N",
                    help="checks run side by side in each audit, each job with an adapter process of its own "
                         "(same rows as 1; default 1)")
    group.addoption("--specverify-report", default=None, dest="specverify_report", metavar="DIR",
                    help="write each audited test's result as DIR/<test>.json and its HTML + Markdown report DIR/<test>/")


FAILURES = pytest.StashKey[list]()
"""(test id, summary line) of every audit that failed in this session, for the terminal summary."""


def pytest_configure(config):
    config.addinivalue_line("markers", settings_mod.marker_line())
    config.stash[FAILURES] = []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """A `specverify` section after pytest's own: each failing audit's summary line in full (pytest's
    short summary cuts a failure's first line to the terminal's width)."""
    failures = config.stash.get(FAILURES, [])
    if failures:
        terminalreporter.section("specverify")
        for test, line in failures:
            terminalreporter.line(f"{test}: {line}")


class ExactnessGate:
    """The `specverify` fixture: audit an engine with this test's settings, or assert it is exact."""

    def __init__(self, settings: dict, error: str | None = None, *, jobs: int = 1, report_dir: str | None = None,
                 test: str = "test", failures: list | None = None):
        self.settings = settings
        self.error = error          # a bad marker or option: the test fails with it at its first audit
        self.jobs = jobs
        self.report_dir = report_dir    # --specverify-report: each audit's JSON and report go under it
        self.test = test                # the test's node id (names its report folder)
        self.audits = 0
        self.failures = failures        # the session's (test, summary line) of failed audits, or None

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
            result = audit.run(jobs=self.jobs)
        except (AdapterError, InputError) as exc:
            error = f"specverify: {exc}"
        else:
            error = None
        if error is not None:           # outside the except: no chained exception printing it twice
            pytest.fail(error, pytrace=False)
        result.spec = audit.spec
        result.settings = audit.settings.to_dict()
        if self.report_dir:
            self.write_report(result)
        return result

    def write_report(self, result) -> str:
        """Write `result` as DIR/<test>[-<n>].json and its HTML + Markdown report DIR/<test>[-<n>]/; returns the folder."""
        import os
        import re

        from specverify.io import write_json
        from specverify.render import write_report

        self.audits += 1
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", self.test).strip("_")[:120] or "test"
        folder = os.path.join(self.report_dir, name + (f"-{self.audits}" if self.audits > 1 else ""))
        os.makedirs(self.report_dir, exist_ok=True)
        write_report([result.to_dict()], folder)
        write_json(folder + ".json", result.to_dict())
        result.report = folder
        return folder

    def assert_exact(self, engine, **overrides):
        """Fail the calling test, with a reproducible report, unless every check passes."""
        result = self.audit(engine, **overrides)
        if result.verdict != PASS:
            if self.failures is not None:
                from specverify.summary import first_line
                self.failures.append((self.test, first_line(result)))
            pytest.fail(report(result), pytrace=False)
        return result


def _g(x) -> str:
    """A number of an e-process for a message ("inf" stays "inf")."""
    return x if isinstance(x, str) else fmt(x, ".4g")


def report(result) -> str:
    """The failure message: the summary line (rows failed, the kind of deviation, the closest known
    bug: `specverify.summary.first_line`), the diagnosis, one line per failing row, then the command
    that reproduces it."""
    from specverify import diagnosis, summary

    failed = result.failed()
    lines = [f"specverify: {summary.first_line(result)}",
             f"  {result.engine} is not exact ({result.family()}, seed {result.seed}, {result.samples} samples per problem)"]
    lines += ["  " + x for x in diagnosis.lines(result.diagnosis)]
    if getattr(result, "report", None):
        lines.append(f"  report: {result.report}")
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

    jobs = request.config.getoption("specverify_jobs", default=None)
    report_dir = request.config.getoption("specverify_report", default=None)
    try:
        if jobs is not None and jobs < 1:
            raise InputError(f"--specverify-jobs {jobs}: must be at least 1")
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
    return ExactnessGate(settings, jobs=jobs or 1, report_dir=report_dir, test=request.node.nodeid,
                         failures=request.config.stash.get(FAILURES, None))
