"""The Python API: `specverify.audit(engine, samples=..., checks=..., ...) -> AuditResult`.

    import specverify
    result = specverify.audit("reference", samples=20_000, checks=["marginal", "endpoints"])
    print(result)                 # the one-line verdict, failing rows, what was not covered
    result.passed                 # True / False
    result.to_dict()              # what `specverify audit --json` writes

The keyword arguments are the settings of `specverify.settings` (every one of them, derived from its
declarations: `audit.__signature__` and the docstring are built from `SETTINGS`), plus how to run
(`jobs`, `isolated`, `progress`). Unset settings (None) take the adapter's own `audit_defaults`, then
the defaults of `specverify audit`. A bad value is an `InputError` naming the keyword, raised before
the adapter is built; an adapter that cannot be loaded, crashes or hangs is an `AdapterError`. Library
code prints nothing: `progress` is a callable(str) that receives the progress messages, if given.

Verdicts are one vocabulary everywhere (`specverify.verdicts`): the strings "pass", "fail", "skip",
"error", "warn" in Python and JSON; text and reports show the same words in capitals.
"""

from __future__ import annotations

import inspect

from specverify import settings as settings_mod
from specverify.errors import InputError

SETTINGS = settings_mod.NAMES
"""The settings `audit` takes as keyword arguments (every setting, `specverify.settings.SPECS`)."""
RUN_KEYWORDS = ("jobs", "isolated", "progress", "executor")
"""The keyword arguments that say how to run, not what to check."""


def audit(engine, *, jobs: int = 1, isolated: bool = True, progress=None, executor=None, **settings):
    from specverify.audit import BATTERY, prepare
    from specverify.executors import parse

    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise InputError(f"unknown keyword argument(s) {', '.join(unknown)}; settings: {', '.join(SETTINGS)}; "
                         f"run: {', '.join(RUN_KEYWORDS)}")
    if isinstance(isolated, bool) is False:
        raise InputError(f"isolated={isolated!r}: must be True or False")
    if progress is not None and not callable(progress):
        raise InputError(f"progress={progress!r}: must be a callable(str) or None")
    if settings.get("fail_fast") and settings.get("stop") != "decisive":
        raise InputError("fail_fast=True needs stop='decisive' (with fixed budgets every statistical row is "
                         "decided at the end, by Holm)")
    executor = parse(executor, label="executor=")
    executor.connect()                  # ray missing or the cluster unreachable: InputError before any work
    prepared = prepare(engine, settings, progress=progress, label=lambda name: f"{name}=", isolated=isolated)
    result = prepared.run(jobs=jobs, executor=executor)
    result.spec = prepared.spec
    result.settings = prepared.settings.to_dict()
    return result


def _signature() -> inspect.Signature:
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("engine", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    params += [inspect.Parameter(s.name, kw, default=None) for s in settings_mod.SPECS]
    params += [inspect.Parameter("jobs", kw, default=1), inspect.Parameter("isolated", kw, default=True),
               inspect.Parameter("progress", kw, default=None), inspect.Parameter("executor", kw, default=None)]
    return inspect.Signature(params, return_annotation="AuditResult")


def _doc() -> str:
    lines = ["Audit `engine` against the exact rules; returns an `AuditResult` (never raises for a failing engine).",
             "",
             "engine: a registered name ('reference', 'mutant:resample-from-p', ...), a plug-in spec",
             "    ('pkg.module:factory', 'path/to/file.py:factory'), a zero-argument factory (a class included), or",
             "    an adapter instance (audited in this process, without the seeded checks).",
             "",
             "Settings (None: the adapter's `audit_defaults`, then the default of `specverify audit`):"]
    for s in settings_mod.SPECS:
        default = s.default_at("audit")
        lines.append(f"{s.name}: {s.help} (default {default!r})")
    lines += ["",
              "How to run:",
              "jobs: checks run side by side, each job with an adapter process of its own (same rows as 1; default 1)",
              "isolated: run the adapter in a worker process of its own (default True; False: in this process)",
              "progress: callable(str) receiving progress messages (default None: silent)",
              "executor: 'local' (default), 'ray' or 'ray:HOST:PORT', or a `specverify.executors.Executor` (resources",
              "    per adapter actor): the checks on a Ray cluster, each adapter in an actor of its own (the same rows)",
              "",
              "Raises InputError for a bad setting or engine spec, AdapterError for an adapter that breaks."]
    return "\n".join(lines)


audit.__signature__ = _signature()
audit.__doc__ = _doc()

__all__ = ["audit", "SETTINGS", "RUN_KEYWORDS"]
