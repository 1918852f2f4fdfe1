"""Run a battery of checks against one engine and combine the verdicts.

Family-wise control: every statistical row of the audit is one hypothesis; Holm's step-down
procedure at `ctx.alpha` decides which fail, so the probability that an exact engine fails any row
is at most alpha. Each row's `min_detectable_tv` is the smallest total-variation deviation of its
cells detected with probability >= ctx.power at the Bonferroni level alpha / m (m = the number of
statistical rows), which Holm's first step uses and later steps only relax. Exact rows fail on
their own.
"""

from __future__ import annotations

import inspect
import os
import sys
import time
import types
from dataclasses import dataclass, field, replace

from specverify import __version__, stats
from specverify import settings as settings_mod
from specverify.api import audit as _api_audit
from specverify.errors import AdapterError, InputError
from specverify.format import json_safe

from . import checks as battery
from .battery import decisive, onestep
from .isolation import AdapterHandle, open_adapter
from .battery.base import RULE_LAW, CheckResult, Context
from .battery.state import AuditState
from .battery.deviations import BIASED, CONTRACT, KIND_TEXT, NOT_BITWISE, OTHER_RULE, RANKS_DISAGREE  # noqa: F401
from .battery.deviations import ACCEPT_ABOVE, EXACT_BUT_SLOW, SPEED_CHECKS
from .verdicts import ERROR, FAIL, PASS, SKIP, WARN

NOT_COVERED_LISTED = 5      # a check's inconclusive rows named in not_covered; the rest counted

# the checks of the battery, in the order they run (`specverify.checks.TABLE`)
BATTERY = list(battery.NAMES)


def default_checks(engine) -> list:
    """The checks an audit runs when none are named: the server level's against a server
    (`specverify.server.audit.ServerEngine`), every other check against an adapter."""
    server = "server" in getattr(engine, "capabilities", ())
    return [c.name for c in battery.TABLE if (c.kind == battery.SERVER) == server]


# the checks an adapter (not a server) is audited with by default: the zoo's columns
ADAPTER_CHECKS = [c.name for c in battery.TABLE if c.kind != battery.SERVER]


@dataclass
class AuditResult:
    engine: str
    verdict: str
    seed: int
    alpha: float
    samples: int
    checks: list = field(default_factory=list)
    engine_version: str | None = None
    seconds: float = 0.0
    errors: list = field(default_factory=list)
    check_seconds: dict = field(default_factory=dict)   # check module -> seconds it needs on its own
    deviation: dict | None = None   # what kind of deviation a failing audit saw (`deviation_of`)
    not_covered: dict = field(default_factory=dict)   # check -> why it decided nothing for this engine
    stop: dict | None = None        # how a decisive audit stopped (mode, power_tv, fail_fast, rounds, stopped_at);
                                    # None: fixed budgets
    diagnosis: dict | None = None   # a failing audit's worst cells and the zoo's hint (`specverify.diagnosis`)
    executor: dict | None = None    # where a Ray run's tasks ran (`executors.ray_run.where`); None: this host

    @property
    def passed(self) -> bool:
        """True if the audit passed (no row failed or errored)."""
        return self.verdict == PASS

    def __str__(self) -> str:
        from specverify import summary
        return summary.text(self)

    def __repr__(self) -> str:
        return (f"AuditResult(engine={self.engine!r}, verdict={self.verdict!r}, rows={len(self.checks)}, "
                f"failed={len(self.failed())}, seed={self.seed}, samples={self.samples}, alpha={self.alpha:g})")

    def _repr_markdown_(self) -> str:
        from specverify import summary
        return summary.markdown(self)

    def _repr_html_(self) -> str:
        from specverify import summary
        return summary.html(self)

    def family(self) -> str:
        """How the audit controls its family-wise false-alarm rate, in words (for summaries)."""
        if self.stop is None:
            return f"family-wise alpha {self.alpha:g} by Holm"
        return (f"family-wise alpha {self.alpha:g} by Bonferroni over anytime-valid e-values, decisive in "
                f"{self.stop['rounds']} round(s), --power-tv {self.stop['power_tv']:g}")

    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if c.verdict == FAIL]

    def to_dict(self) -> dict:
        return {
            "engine": self.engine,
            "engine_version": None if self.engine_version is None else str(self.engine_version),
            "verdict": self.verdict,
            "deviation": self.deviation,
            "seed": self.seed,
            "alpha": self.alpha,
            "samples": self.samples,
            "specverify_version": __version__,
            "seconds": round(self.seconds, 3),
            "checks": [c.to_dict() for c in self.checks],
            "errors": self.errors,
            "check_seconds": {k: round(v, 3) for k, v in self.check_seconds.items()},
            "not_covered": self.not_covered,
            **({} if self.stop is None else {"stop": self.stop}),
            **({} if self.diagnosis is None else {"diagnosis": json_safe(self.diagnosis)}),
            **({} if self.executor is None else {"executor": self.executor}),
        }


def apply_holm(rows: list[CheckResult], ctx: Context) -> None:
    """Decide the statistical rows by Holm at ctx.alpha and state each row's power."""
    tested = [r for r in rows if r.statistical]
    if not tested:
        return
    decision = stats.holm([r.p_value for r in tested], alpha=ctx.alpha)
    level = ctx.alpha / len(tested)
    for r, rejected, adj in zip(tested, decision.rejected, decision.adjusted_p):
        r.verdict = FAIL if rejected else PASS
        r.data["holm_adjusted_p"] = float(adj)
        if r.power_fn is not None:
            r.min_detectable_tv = float(r.power_fn(level))
        elif r.dof and r.dof > 0 and r.n > 0:
            r.min_detectable_tv = float(stats.min_detectable_tv(r.n, r.dof, level, ctx.power))


def deviation_of(rows: list[CheckResult]) -> dict | None:
    """{"kind", "text", "rows"} of a failing audit (None if nothing failed).

    contract: a `contract` row failed. not-bitwise / ranks-disagree: only `bitwise` / only
    `rank_agreement` rows failed (the table's `fails_as`). exact-other-rule: every failing row is a one-step joint law
    (`joint`, the seeded `*.joint` law), an acceptance rate, the identity draft or a step with a fixed
    draft -- every failing row declares `law == RULE_LAW` (`CheckResult.law`) -- and the whole-run
    law rows (`runs`, `transforms`) ran and passed -- the output stream is exact, the rule accepts
    less than the chain rule (sample-match verification is the classic case). exact-but-slow /
    acceptance-above-exact: as exact-other-rule, but every failing row is the engine's acceptance law
    (`engine_acceptance`) or the identity draft, and the acceptance rows say below / above the exact law
    (`data["acceptance"]["direction"]`; the deviation carries E observed vs exact and the speed-up
    S = E / (1 + kappa c) both give). Anything else: biased."""
    failed = [r for r in rows if r.verdict in (FAIL, ERROR)]
    if not failed:
        return None
    own = {_fails_as(r.check) for r in failed}
    if any(r.check == "contract" for r in failed):
        kind = CONTRACT
    elif len(own) == 1 and None not in own:
        kind = own.pop()
    else:
        runs = [r for r in rows if _flag(r.check, "whole_run") and r.verdict in (PASS, FAIL)]
        one_step = all(r.law == RULE_LAW for r in failed)
        kind = OTHER_RULE if one_step and runs and all(r.verdict == PASS for r in runs) else BIASED
    speed = [(r.data or {}).get("acceptance") for r in failed if r.check == "engine_acceptance"]
    arms = [((r.data or {}).get("acceptance_arms"), (r.data or {}).get("knob")) for r in failed
            if r.check == "acceptance_invariance"]
    if kind == OTHER_RULE and (speed or arms) and all(r.check in SPEED_CHECKS for r in failed) and all(
            a and a.get("direction") in ("below", "above") for a in speed):
        kind = ACCEPT_ABOVE if any(a["direction"] == "above" for a in speed) else EXACT_BUT_SLOW
    if kind == OTHER_RULE:
        for r in failed:
            if "has exact probability 0" in r.detail:
                r.detail = ("not the chain rule's one-step law: " + r.detail.replace(
                    "has exact probability 0", "is impossible under the chain rule") + "; whole runs are exact")
    out = {"kind": kind, "text": KIND_TEXT[kind], "rows": len(failed)}
    if speed and speed[0]:
        a = speed[0]
        out["acceptance"] = {k: a[k] for k in ("E_observed", "E_observed_ci", "E_exact", "E_range", "range_level",
                                               "kappa", "c", "S_observed", "S_exact", "speedup_loss", "break_even_E",
                                               "direction") if k in a}
        if kind in (EXACT_BUT_SLOW, ACCEPT_ABOVE):
            out["text"] += (f": E {a['E_observed']:.3f} vs exact {a['E_exact']:.3f}, speed-up S = E/(1 + kappa c) "
                            f"{a['S_observed']:.2f} vs {a['S_exact']:.2f} at kappa {a['kappa']}, c {a['c']:g}")
    for a, knob in arms:
        if a and kind == EXACT_BUT_SLOW:
            out["text"] += (f"; acceptance depends on {knob}: E {a['E_a']:.3f} ({a['a']}) vs {a['E_b']:.3f} "
                            f"({a['b']})")
    return out


def _fails_as(name: str):
    check = battery.BY_NAME.get(name)
    return None if check is None else check.fails_as


def _flag(name: str, attr: str) -> bool:
    check = battery.BY_NAME.get(name)
    return check is not None and getattr(check, attr)


def inputs_unchanged(states: list) -> CheckResult:
    """The exact row `contract.inputs_unchanged`: no adapter call changed an array it was given (the
    handle compares every input with the audit's own copy after each call; `states`: every job's
    `AuditState`)."""
    calls = sum(s.calls for s in states)
    changed = [x for s in states for x in s.changed_inputs]
    if changed:
        what, names = changed[0]
        detail = (f"{len(changed)} of {calls} adapter calls changed arrays they were given; first: {what} "
                  f"changed {', '.join(names)} (the audit judged with its own copies)")
        return CheckResult("contract.inputs_unchanged", FAIL, n=calls, exact=True, detail=detail, check="contract",
                           data={"changed": [{"call": w, "arrays": n} for w, n in changed[:20]]})
    return CheckResult("contract.inputs_unchanged", PASS, n=calls, exact=True, check="contract",
                       detail=f"every input array unchanged after each of {calls} adapter calls")


def with_diagnosis(result: AuditResult) -> AuditResult:
    """`result` with its diagnosis (`specverify.diagnosis`: worst cells, the zoo's hint) if it failed."""
    from specverify.diagnosis import diagnose

    result.diagnosis = diagnose({"checks": [c.to_dict() for c in result.checks]})
    return result


JOBS_PER_CORE = 4           # jobs above this many a core are refused (--jobs 1000 started 49 adapter processes)


def max_jobs() -> int:
    """The most jobs (side-by-side adapter processes) an audit accepts on this machine."""
    return JOBS_PER_CORE * max(1, os.cpu_count() or 1)


def nothing_decided(engine, names, not_covered: dict, rows=()) -> str:
    """The one line of an audit in which no row was decided: which checks ran, and why each decided
    nothing (a missing capability, a missing counter, too few samples for any test)."""
    why = "; ".join(f"{n}: {not_covered[n]}" for n in names if n in not_covered)
    if any(r.data.get("inconclusive") for r in rows):
        return (f"engine {engine.name!r}: no row of the checks run ({', '.join(names)}) tested anything at this "
                f"--samples; raise --samples" + (f"; why: {why[:600]}" if why else ""))
    return (f"engine {engine.name!r} supports none of the checks run (capabilities: "
            f"{sorted(getattr(engine, 'capabilities', ()))}; checks: {', '.join(names) or 'none'})"
            + (f"; why: {why[:600]}" if why else ""))


def verdict_of(rows: list[CheckResult]) -> str:
    """The audit's verdict from its decided rows: FAIL if any row failed or errored (warn and skip
    never fail)."""
    return FAIL if any(r.verdict in (FAIL, ERROR) for r in rows) else PASS




@dataclass
class _Ran:
    """What running some checks against one adapter gave (rows per check, in the order run)."""

    rows: dict = field(default_factory=dict)
    seconds: dict = field(default_factory=dict)
    paid: dict = field(default_factory=dict)
    not_covered: dict = field(default_factory=dict)
    shared: float = 0.0


def run_checks(engine, ctx: Context, names, ran: _Ran) -> None:
    """Run the named battery checks against `engine` in `ctx`, adding to `ran` (each check sees `ctx`
    with its own name in `ctx.check`, and the same state)."""
    for name in names:
        check = battery.BY_NAME[name]
        ctx.say(f"check {name}")
        sampled = onestep.sampling_seconds(ctx)
        t0 = time.perf_counter()
        found = check.run(engine, replace(ctx, check=name))
        ran.seconds[name] = time.perf_counter() - t0
        ran.paid[name] = onestep.sampling_seconds(ctx) - sampled
        record(engine, name, found, ran)
    ran.shared = onestep.sampling_seconds(ctx)


def record(engine, name: str, found: list, ran: _Ran) -> None:
    """Check `name`'s rows `found` into `ran`: each row named by its check (and its law), and what the
    check did not cover (`ran.not_covered`)."""
    check = battery.BY_NAME[name]
    for r in found:
        r.check = name
        if check.law != battery.PER_ROW:
            r.law = check.law
    ran.rows[name] = found
    ran.not_covered.pop(name, None)     # a decisive audit's later round decides afresh
    if not any(r.verdict in (PASS, FAIL, ERROR, WARN) for r in found):
        skipped = [r.detail for r in found if r.detail]
        ran.not_covered[name] = skipped[0] if skipped else (
            f"no row applies to capabilities {', '.join(sorted(getattr(engine, 'capabilities', ())))}")
    else:       # rows that ran beside rows a check could not run (processors not declared)
        skipped = [r for r in found if r.verdict == SKIP and r.data.get("not_covered")]
        partial = [r.detail for r in skipped if not r.data.get("inconclusive")]
        thin = [r.name for r in skipped if r.data.get("inconclusive")]
        if thin:            # rows too few samples reach: counted, the first few named
            more = f" and {len(thin) - NOT_COVERED_LISTED} more" if len(thin) > NOT_COVERED_LISTED else ""
            partial.append(f"{len(thin)} row(s) inconclusive, too few samples reach them for a law test: "
                           f"{', '.join(thin[:NOT_COVERED_LISTED])}{more}")
        if partial:
            ran.not_covered[name] = "; ".join(partial)


def available(names: list, named: bool) -> tuple:
    """(the checks of `names` this environment can run, {check: why not} of the others: a module from an
    extra is missing, `checks.unavailable`). A check the user named (`named`) that cannot run is an
    InputError; one of the whole battery is a SKIP row, listed as not covered."""
    missing = {n: why for n in names if (why := battery.unavailable(n))}
    if missing and named:
        raise InputError("; ".join(f"check {n} {why}" for n, why in missing.items()))
    return [n for n in names if n not in missing], missing


def unavailable_rows(missing: dict) -> list:
    """The SKIP row of each check that could not run (`available`)."""
    return [CheckResult(f"{n}.unavailable", SKIP, exact=True, detail=f"not covered: {why}", check=n,
                        data={"not_covered": True}) for n, why in missing.items()]


def groups_of(names: list) -> list:
    """The checks as groups that can run side by side (checks that share samples together: the table's
    `shares`), the long ones first (its `long`)."""
    groups, placed = [], set()
    for name in names:
        if name in placed:
            continue
        shares = battery.BY_NAME[name].shares
        group = [n for n in names if battery.BY_NAME[n].shares == shares] if shares else [name]
        placed.update(group)
        groups.append(group)
    last = len(battery.TABLE)
    return sorted(groups, key=lambda g: min((battery.BY_NAME[n].long for n in g if battery.BY_NAME[n].long is not None),
                                            default=last))


def run_parallel(engine, ctx: Context, names: list, jobs: int, open_engine) -> list:
    """Run the checks in `jobs` threads, each with its own adapter (`open_engine()` -> a handle in a
    worker process of its own) and its own context (same seed and settings, a state of its own that
    shares the audit's laws and models: `AuditState.job`; every row is what a serial run gives). Returns [(engine, ctx, _Ran)] of every job; the extra handles are closed."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    todo = queue.SimpleQueue()
    for group in groups_of(names):
        todo.put(group)
    jobs = min(jobs, len(names))
    workers = [(engine, ctx)]
    try:
        for _ in range(jobs - 1):
            extra = open_engine()
            workers.append((extra, replace(ctx, factory=extra.fresh, state=ctx.state.job())))

        def work(worker):
            ran = _Ran()
            while True:
                try:
                    group = todo.get_nowait()
                except queue.Empty:
                    return ran
                run_checks(worker[0], worker[1], group, ran)

        with ThreadPoolExecutor(len(workers), thread_name_prefix="specverify-check") as pool:
            futures = [pool.submit(work, w) for w in workers]
            try:
                results = [f.result() for f in futures]
            except BaseException:
                for w, _ in workers:
                    w.kill()                    # every job's call ends at once (^C: within 2 s)
                raise
    finally:
        for w, _ in workers[1:]:
            w.close()
    return [(w, c, r) for (w, c), r in zip(workers, results)]


def run_audit(engine, ctx: Context, checks: list[str] | None = None, factory=None, extra=None, *,
              jobs: int = 1, open_engine=None, stop: str = "fixed", power_tv: float = 0.01,
              fail_fast: bool = False, first_round: int = decisive.FIRST_ROUND, cluster=None) -> AuditResult:
    """Run the battery (or the named checks) against `engine`; never raises for a failing engine
    (an adapter that crashes, hangs or returns garbage raises AdapterError). `factory()` builds fresh
    adapters of the same engine for the seeded checks (else ctx.factory; None skips them).
    `extra(engine, ctx) -> rows`: more rows (an engine's own probes) decided with the battery's, in
    one Holm family. `jobs` > 1 with `open_engine` runs independent checks side by side (`run_parallel`):
    the same rows, in the same order, as one after the other. The audit runs on a copy of `ctx` with a
    state of its own (`AuditState`): two audits in one process share nothing.
    `stop="decisive"` samples each statistical row in rounds until its e-value decides it
    (`battery.decisive`; one check after another on `engine`, `jobs` unused); `fail_fast` then ends the
    audit at its first failing row; `first_round`: the samples of its first round (doubled each round).
    `cluster`: (executor, source, given, isolated) to run the checks on a Ray cluster instead
    (`specverify.executors.ray_run`: each adapter in an actor, the same rows)."""
    start = time.perf_counter()
    ctx = replace(ctx, state=AuditState())
    if factory is not None:
        ctx = replace(ctx, factory=factory)
    names, missing = available(list(default_checks(engine) if checks is None else checks), named=checks is not None)
    if stop == "decisive":
        return _run_decisive(engine, ctx, names, extra, start, power_tv=power_tv, fail_fast=fail_fast,
                             first_round=first_round, missing=missing)
    if stop != "fixed":
        raise InputError(f"stop {stop!r}: must be one of {', '.join(settings_mod.STOPS)}")
    if jobs > 1 and open_engine is not None:
        ctx = replace(ctx, jobs=jobs, open_engine=open_engine)
    errors, actors, ran_where = [], [], None
    if cluster is not None:
        from .executors import ray_run
        rans, states, errors, actors, ran_where = ray_run.run(cluster[0], engine, ctx, names, *cluster[1:])
        done = [(None, replace(ctx, state=AuditState()), ran) for ran in rans]
        done += [(None, replace(ctx, state=state), _Ran()) for state in states]
    elif jobs > 1 and open_engine is not None and len(names) > 1:
        done = run_parallel(engine, ctx, names, jobs, open_engine)
    else:
        done = [(engine, ctx, _Ran())]
        run_checks(engine, ctx, names, done[0][2])
    rows = [r for name in names for _, _, ran in done for r in ran.rows.get(name, ())]
    not_covered = {n: ran.not_covered[n] for n in names for _, _, ran in done if n in ran.not_covered}
    # a check that reads the shared one-step samples needs their sampling time on its own
    check_seconds = {k: v - ran.paid[k] + (ran.shared if battery.BY_NAME[k].shares else 0.0)
                     for _, _, ran in done for k, v in ran.seconds.items()}
    check_seconds = {n: check_seconds[n] for n in names if n in check_seconds}
    if extra is not None:
        rows.extend(extra(engine, ctx))
    rows.extend(unavailable_rows(missing))
    not_covered.update(missing)
    try:
        apply_holm(rows, ctx)
    finally:
        if actors:
            from .executors import ray_run
            ray_run.release(actors)
    if not any(r.verdict in (PASS, FAIL) for r in rows):
        raise AdapterError(nothing_decided(engine, names, not_covered, rows))
    if isinstance(engine, AdapterHandle):
        rows.append(inputs_unchanged([c.state for _, c, _ in done]))
    return with_diagnosis(AuditResult(
        engine=str(engine.name), verdict=verdict_of(rows), seed=ctx.seed, alpha=ctx.alpha, samples=ctx.samples,
        checks=rows, engine_version=getattr(engine, "version", None), seconds=time.perf_counter() - start,
        check_seconds=check_seconds, deviation=deviation_of(rows), not_covered=not_covered, errors=errors,
        executor=ran_where))


EXTRA = "probes"     # the decisive family's name for an engine's own rows (`run_audit(extra=...)`)


def _run_decisive(engine, ctx: Context, names: list, extra, start: float, *, power_tv: float,
                  fail_fast: bool, first_round: int, missing: dict | None = None) -> AuditResult:
    """`run_audit` with `stop="decisive"`: the checks (and an engine's own rows) in rounds."""
    ran = _Ran()

    def run_check(ctx_r, name):
        if name == EXTRA:
            found = list(extra(engine, ctx_r))
            for r in found:
                r.check = r.check or EXTRA
            return found
        seconds = ran.seconds.get(name, 0.0)
        run_checks(engine, ctx_r, [name], ran)
        ran.seconds[name] += seconds
        return ran.rows[name]

    def scales(name):
        return name != EXTRA and battery.BY_NAME[name].scales

    family = names + ([EXTRA] if extra is not None else [])
    order = sorted(family, key=lambda n: 0 if n == EXTRA else battery.BY_NAME[n].heavy)     # heavy checks last
    out = decisive.run(ctx, order, run_check, scales=scales, power_tv=power_tv, fail_fast=fail_fast,
                       first=first_round)
    rows = [r for name in family for r in out.rows.get(name, ())]
    not_covered = {n: ran.not_covered[n] for n in names if n in ran.not_covered}
    for name, why in out.not_covered.items():
        not_covered[name] = f"{not_covered[name]}; {why}" if name in not_covered else why
    rows.extend(unavailable_rows(missing or {}))
    not_covered.update(missing or {})
    if not any(r.verdict in (PASS, FAIL) for r in rows):
        raise AdapterError(nothing_decided(engine, names, not_covered, rows))
    if isinstance(engine, AdapterHandle):
        rows.append(inputs_unchanged([c.state for c in out.contexts]))
    result = AuditResult(engine=str(engine.name), verdict=verdict_of(rows), seed=ctx.seed, alpha=ctx.alpha,
                         samples=ctx.samples, checks=rows, engine_version=getattr(engine, "version", None),
                         seconds=time.perf_counter() - start, check_seconds={n: ran.seconds[n] for n in names if n in ran.seconds},
                         deviation=deviation_of(rows), not_covered=not_covered)
    result.stop = {"mode": "decisive", "power_tv": power_tv, "fail_fast": fail_fast, "rounds": out.rounds,
                   "first_round": first_round, "stopped_at": out.stopped_at}
    return with_diagnosis(result)


@dataclass
class Audit:
    """An audit ready to run: the adapter, how to build fresh ones, and the resolved settings."""

    engine: object                  # the adapter under audit
    factory: object                 # zero-argument callable -> a fresh adapter, or None (an instance was given)
    spec: str | None                # the name or plug-in spec that rebuilds it (for "reproduce:" lines)
    settings: settings_mod.Settings
    ctx: Context
    source: object = None           # what prepare() was given, to open more adapters (None: it cannot)

    def run(self, extra=None, jobs: int = 1, executor=None) -> AuditResult:
        """Run the audit; `jobs` > 1 runs independent checks side by side, each job with an adapter
        process of its own (results identical to one job). `executor`: a connected Ray executor
        (`specverify.executors`) runs the checks on its cluster instead, each adapter in an actor of its
        own (the same rows; a decisive audit whole in one actor). Closes the adapter when done."""
        checks = None if self.settings.checks is None else list(self.settings.checks)
        cluster = None
        if executor is not None and executor.kind != "local":
            if self.source is None:
                self.engine.kill()
                raise InputError(f"--executor {executor} needs an engine name or spec, not an adapter instance")
            if self.settings.stop != "fixed":
                if extra is not None:
                    self.engine.kill()
                    raise InputError(f"--executor {executor} --stop decisive: an audit with an engine's own rows "
                                     "(extra) runs on the local executor")
                from .executors import ray_run
                try:
                    return ray_run.run_whole(executor, self.source, self.settings.to_dict(), self.engine.isolated)
                except BaseException:
                    self.engine.kill()
                    raise
                finally:
                    self.engine.close()
            cluster = (executor, self.source, self.settings.to_dict(), self.engine.isolated)
        limit = max_jobs()
        if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= limit:
            self.engine.kill()              # its adapter process goes now, not at exit
            raise InputError(f"jobs {jobs!r}: must be an integer in [1, {limit}] ({JOBS_PER_CORE} a core at most: "
                             "each job is an adapter process)")
        open_engine = None
        if self.source is not None:
            def open_engine():
                return open_adapter(self.source, timeout=self.settings.timeout, isolated=self.engine.isolated)
        try:
            return run_audit(self.engine, self.ctx, checks, factory=self.factory, extra=extra, jobs=jobs,
                             open_engine=open_engine, stop=self.settings.stop, power_tv=self.settings.power_tv,
                             fail_fast=self.settings.fail_fast, cluster=cluster)
        except BaseException:
            self.engine.kill()
            raise
        finally:
            self.engine.close()


def prepare(engine, given: dict | None = None, *, progress=None, label=None, isolated: bool = True) -> Audit:
    """The one way into an audit. `engine`: a registered name or plug-in spec, a zero-argument
    factory (a class included), or an adapter instance (audited in this process, without fresh
    adapters: the seeded checks are skipped). `given`: the settings the user set
    (`specverify.settings`; None = unset); the adapter's `audit_defaults` fill what is unset, then the
    defaults. Bad settings are InputError before the adapter is built (`label(name)`: how the user
    spelled the setting, e.g. "--samples"); an adapter that cannot be built, or breaks the capability
    contract, is AdapterError.

    The adapter runs in a worker process of its own (`specverify.isolation`); `isolated=False` runs it
    in this process (for debugging: a hang that holds the GIL cannot be stopped there). Call
    `Audit.run()` once: it closes the adapter when done."""
    from specverify.adapters.protocol import check_adapter
    from specverify.server.audit import is_url, prepare_server

    if is_url(engine):                 # an OpenAI-compatible server: the server level
        return prepare_server(engine, given, progress=progress, label=label)
    given = dict(given or {})
    for name in ("model", "plain_url", "law_model"):
        if given.get(name) is not None:
            raise InputError(f"{label(name) if label else name} is for a server audit (an http://HOST:PORT/v1 "
                             f"engine), not for {engine!r}")
    named = settings_mod.resolve(given, None, BATTERY, label).checks   # the user's own values, checked before any work
    if named is not None:
        available(list(named), named=True)                   # a named check whose extra is missing: exit 2 now
    instance = hasattr(engine, "capabilities") and not inspect.isclass(engine)
    if isinstance(engine, str):
        spec = engine
    elif instance:
        spec, isolated = None, False
    elif callable(engine):
        spec = spec_of(engine)
    else:
        raise InputError(f"cannot audit {engine!r}: give an engine name, a factory or an adapter")
    handle = open_adapter(engine, timeout=given.get("timeout") or settings_mod.DEFAULTS.timeout, isolated=isolated)
    try:
        check_adapter(handle, f"adapter {handle.name or spec!r}")
        s = settings_mod.resolve(given, getattr(handle, "audit_defaults", None), BATTERY, label)
    except BaseException:
        handle.close()
        raise
    handle.timeout = s.timeout
    ctx = Context(**settings_mod.context_values(s), progress=progress)
    return Audit(engine=handle, factory=None if instance else handle.fresh, spec=spec, settings=s, ctx=ctx,
                 source=None if instance else engine)


def spec_of(obj) -> str | None:
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


class _CallableModule(types.ModuleType):
    """`specverify.audit` is this module and the Python API's entry point at once:
    `specverify.audit("reference", samples=20_000)` runs an audit (`specverify.api.audit`), and
    `specverify.audit.prepare`, `from specverify.audit import run_audit` keep working."""

    def __call__(self, engine, **kwargs):
        return _api_audit(engine, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
__signature__ = _api_audit.__signature__      # `inspect.signature(specverify.audit)`: the API's keywords


__all__ = ["Audit", "AuditResult", "prepare", "run_audit", "apply_holm", "verdict_of", "Context", "PASS", "FAIL", "SKIP", "ERROR", "WARN", "BATTERY"]
