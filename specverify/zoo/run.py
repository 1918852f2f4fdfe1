"""The bug zoo as a whole: audit the reference and every mutant, and tabulate which check catches which.

`run_zoo(...)` audits the exact engines (REFERENCES: "reference", the exact samplers, and
"specverify-serving", our engine at the serving level, the exact twin of mutants 45-51, 54 and 55) and each
`mutant:<name>` (`specverify.zoo.MUTANTS`) with the same
settings, in `jobs` worker processes (one audit per task, its adapter in that process; numba limited to
one thread per worker so that two workers share two cores), and returns a `ZooResult`:

    matrix[engine][check]   "X" some row of that check failed, "." every row passed, "-" no row
                            applies (the engine lacks the capability), "s" skipped, "E" adapter error,
                            "~" not run (--fail-fast ended the audit at an earlier failing row)
    caught                  engine -> verdict == "fail" (for the reference: must be False)
    seconds, cpu_seconds    wall and CPU seconds of each audit
    catch_seconds[engine]   seconds the fastest catching check needs on its own

`ok` is True iff every reference passes and every mutant is caught.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

from ..audit import ADAPTER_CHECKS as BATTERY      # the zoo audits adapters: no server rows
from ..settings import DEFAULTS
from ..verdicts import ERROR, FAIL, PASS, SKIP

REFERENCES = ("reference", "specverify-serving")    # the exact engines: each must pass (no correct one flagged)


@dataclass
class ZooResult:
    engines: list
    checks: list
    matrix: dict
    verdicts: dict
    seconds: dict
    catch_seconds: dict
    caught_by: dict
    errors: dict
    audits: dict = field(default_factory=dict)
    wall_seconds: float = 0.0
    settings: dict = field(default_factory=dict)
    cpu_seconds: dict = field(default_factory=dict)      # CPU time of each audit (all its threads)

    @property
    def ok(self) -> bool:
        if any(self.verdicts.get(e) != PASS for e in self.engines if e in REFERENCES) or "reference" not in self.engines:
            return False
        return all(self.verdicts.get(e) == FAIL for e in self.engines if e not in REFERENCES)

    def missed(self) -> list:
        return [e for e in self.engines if e not in REFERENCES and self.verdicts.get(e) != FAIL]

    def to_dict(self) -> dict:
        return {
            "ok": self.ok,
            "settings": self.settings,
            "wall_seconds": round(self.wall_seconds, 2),
            "checks": self.checks,
            "engines": {
                e: {"verdict": self.verdicts.get(e), "caught_by": self.caught_by.get(e, []),
                    "row": self.matrix.get(e, {}), "seconds": round(self.seconds.get(e, 0.0), 3),
                    "cpu_seconds": round(self.cpu_seconds.get(e, 0.0), 3),
                    "catch_seconds": None if self.catch_seconds.get(e) is None else round(self.catch_seconds[e], 3),
                    "error": self.errors.get(e), "audit": self.audits.get(e)}
                for e in self.engines},
        }


def _slim(audit: dict) -> dict:
    """An audit dict without the per-row cell data (the zoo JSON stays small)."""
    out = dict(audit)
    out["checks"] = [{k: v for k, v in c.items() if k != "data"} for c in audit["checks"]]
    return out


def audit_one(name: str, settings: dict) -> dict:
    """Audit one engine by name (runs in a worker); returns the slim audit dict or the error line."""
    from ..audit import prepare
    from ..errors import AdapterError, InputError

    start, cpu = time.perf_counter(), time.process_time()
    try:
        # in this (pool) process: the zoo audits only our own code, and an adapter process of its own
        # for each of 38 audits (spawn, imports) cost more than most mutants' whole audits. A mutant only
        # far_tail catches is the exception: it draws thousands of 262,144-wide rows, which an adapter
        # process reads from shared buffers while an in-process call copies and compares each 64 MB batch
        from ..checks import BY_NAME
        isolated = name not in REFERENCES and _expected_cost(name) >= BY_NAME["far_tail"].heavy
        result = prepare(name, settings, isolated=isolated).run()
        out = {"name": name, "audit": _slim(result.to_dict())}
    except (AdapterError, InputError) as exc:
        out = {"name": name, "error": str(exc)}
    return {**out, "seconds": time.perf_counter() - start, "cpu_seconds": time.process_time() - cpu}


def _worker_init():
    os.environ["NUMBA_NUM_THREADS"] = "1"
    # numba read the core count when this worker imported it (unpickling this function imports the audit):
    # read the setting again now, before any parallel region starts its threads -- else the first region
    # of a worker whose first audit compiles nothing starts them with the core count, and the next
    # compile's re-read (1) stops every later audit there with "Cannot set NUMBA_NUM_THREADS to a
    # different value once the threads have been launched" (seen: mutants 38-41 as E under load 20)
    from numba.core import config
    config.reload_config()
    # every worker audits our adapters, the rank mutants' rank_agreement among them: its fork server
    # (a torch import) starts now, beside the worker's first audit, rather than inside one audit's time
    from ..checks.rank_agreement import rank_calls
    from ..ranks import prestart
    prestart(("name", "reference"), rank_calls)


def _expected_cost(name: str) -> int:
    """A rank of how long an audit takes: the reference longest, then a mutant by the lightest check it
    is meant to be caught by (`Check.heavy`: a decisive audit reaches that one first), the others alike
    (their order kept)."""
    from ..checks import BY_NAME
    from . import TARGETS
    if name == "reference":
        return 100
    targets = TARGETS.get(name.removeprefix("mutant:"), ())
    return min((BY_NAME[t].heavy for t in targets if t in BY_NAME), default=0)


def engine_names() -> list:
    from . import MUTANTS
    return list(REFERENCES) + [f"mutant:{m}" for m in MUTANTS]


def run_zoo(names=None, *, seed: int = DEFAULTS.seed, samples: int = DEFAULTS.samples, alpha: float = DEFAULTS.alpha,
            timeout: float = DEFAULTS.timeout, jobs: int | None = None, progress=None, stop: str = "decisive",
            power_tv: float = DEFAULTS.power_tv, fail_fast: bool = True, checks=None) -> ZooResult:
    """Audit the reference and every mutant (see the module docstring). The zoo stops decisively and
    fails fast by default: a mutant's audit ends at its first failing row, the reference's rows stop
    once they reach `power_tv` (`battery.decisive`). `checks`: the checks each audit runs (None: all)."""
    names = list(names or engine_names())
    settings = {"seed": seed, "samples": samples, "alpha": alpha, "timeout": timeout, "stop": stop,
                "power_tv": power_tv, "fail_fast": fail_fast and stop == "decisive",
                "checks": None if checks is None else list(checks)}
    jobs = max(1, jobs or min(len(names), os.cpu_count() or 1))
    start = time.perf_counter()
    results = {}
    if jobs == 1:
        for name in names:
            if progress:
                progress(f"auditing {name}")
            results[name] = audit_one(name, settings)
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor, as_completed
        # the slowest audits first, so that the workers finish together: the reference (every check to
        # its end), then the mutants only the heavy checks catch (they run every light check first)
        order = sorted(names, key=_expected_cost, reverse=True)
        with ProcessPoolExecutor(jobs, mp_context=mp.get_context("spawn"), initializer=_worker_init) as pool:
            futures = {pool.submit(audit_one, name, settings): name for name in order}
            for done, fut in enumerate(as_completed(futures), 1):
                results[futures[fut]] = fut.result()
                if progress:
                    progress(f"{done}/{len(names)} audited ({futures[fut]})")
    return tabulate(names, results, settings, time.perf_counter() - start)


def tabulate(names, results, settings, wall) -> ZooResult:
    matrix, verdicts, seconds, catch, caught_by, errors, audits, cpu = {}, {}, {}, {}, {}, {}, {}, {}
    for name in names:
        res = results[name]
        seconds[name] = res["seconds"]
        cpu[name] = res.get("cpu_seconds", 0.0)
        if "error" in res:
            errors[name] = res["error"]
            verdicts[name] = ERROR
            matrix[name] = {c: "E" for c in BATTERY}
            continue
        audit = res["audit"]
        audits[name] = audit
        verdicts[name] = audit["verdict"]
        row = {}
        for check in BATTERY:
            rows = [c for c in audit["checks"] if c["check"] == check]
            verdict_set = {c["verdict"] for c in rows}
            if not rows and "not run" in audit.get("not_covered", {}).get(check, ""):
                row[check] = "~"                    # --fail-fast ended the audit before this check
            elif not rows:
                row[check] = "-"
            elif FAIL in verdict_set:
                row[check] = "X"
            elif verdict_set <= {SKIP}:
                row[check] = "s"
            else:
                row[check] = "."
        matrix[name] = row
        caught_by[name] = [c for c in BATTERY if row[c] == "X"]
        times = [audit["check_seconds"].get(c) for c in caught_by[name] if audit["check_seconds"].get(c) is not None]
        catch[name] = min(times) if times else None
    return ZooResult(list(names), list(BATTERY), matrix, verdicts, seconds, catch, caught_by, errors, audits, wall, settings,
                     cpu_seconds=cpu)
