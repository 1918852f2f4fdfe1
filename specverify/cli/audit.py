"""`specverify audit ENGINE`: run the check battery against one engine."""

from __future__ import annotations

import argparse
import os
import sys

from specverify.adapters.registry import described
from specverify.format import fmt
from specverify.settings import add_arguments, given_from, spelled
from specverify.verdicts import PASS

HELP = """\
Audit a speculative-decoding implementation against the exact rules.

Every statistical check is a chi-squared test of the emitted tokens against the exact law computed
by the float64 reference; the whole audit's family-wise false-alarm rate is --alpha (Holm). Each row
states the smallest total-variation deviation it detects with probability 0.99 at its sample size.
Exact checks (a zero-probability token emitted) fail outright.

engines:
""" + "".join(f"  {k:<26}{v}\n" if len(k) < 26 else f"  {k}\n  {'':<26}{v}\n" for k, v in described().items()) + """\
  http://HOST:PORT/v1       an OpenAI-compatible completions server: the server level (--model,
                            --plain-url; docs/server-level.md)
  pkg.module:factory        your adapter (see docs/adapter-protocol.md)
  path/to/file.py:factory   the same, from a file

exit codes: 0 the engine passes, 1 it fails a check, 2 usage or input error.
"""


def budgets() -> str:
    """What --samples means for each check, for --help: the check table's `checks.describe()`."""
    from specverify import checks

    text = "\n".join("  " + line for line in checks.describe().splitlines()) + "\n"
    return "\nchecks, and what --samples means for each:\n" + text


def register(sub) -> None:
    p = sub.add_parser("audit", help="audit an engine against the exact rules",
                       description=HELP.replace("\nexit codes:", budgets() + "\nexit codes:", 1),
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("engine", help="engine to audit (see above)")
    add_arguments(p, "audit")                   # every setting declared for the audit (`specverify.settings`)
    p.add_argument("--full", action="store_const", const="full", dest="size", help="the same as --size full")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH ('-' for stdout)")
    p.add_argument("--report", metavar="DIR", help="also write an HTML + Markdown report of the result to DIR")
    p.add_argument("--jobs", type=int, default=None, metavar="N",
                   help="checks run side by side, each job with an adapter process of its own; results are "
                        "identical to --jobs 1 (default: the number of CPU cores)")
    p.add_argument("--in-process", action="store_true",
                   help="run the adapter in the audit's own process, not in a worker process of its own (for "
                        "debugging: a hang that holds the GIL then ignores --timeout, a crash ends the audit)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line and no table")
    p.set_defaults(func=run)


def table(result) -> str:
    rows = [("check", "verdict", "statistic" if result.stop is None else "stat|log e", "dof", "p-value", "n", "min TV")]
    for c in result.checks:
        rows.append((c.name, c.verdict.upper() + (" (exact)" if c.exact else ""), fmt(c.statistic, ".2f"),
                     fmt(c.dof, "d"), fmt(c.p_value, ".3g"), str(c.n), fmt(c.min_detectable_tv, ".4f")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    n_stat = sum(1 for c in result.checks if c.p_value is not None and not c.exact)
    failed = result.failed()
    lines.append("")
    kind = f" ({result.deviation['text']})" if result.deviation else ""
    lines.append(f"{result.engine}: {result.verdict.upper()}{kind} -- {len(result.checks)} checks ({n_stat} statistical, "
                 f"{result.family()}), seed {result.seed}, {result.seconds:.1f} s")
    for c in failed:
        lines.append(f"  FAIL {c.name}: {c.detail}" + (f" (p = {c.p_value:.3g})" if c.p_value is not None else ""))
    if result.stop is not None and result.stop.get("stopped_at"):
        lines.append(f"  --fail-fast: stopped at {result.stop['stopped_at']}")
    if result.not_covered:
        lines.append("  not covered:")
        lines += [f"    {k}: {v}" for k, v in result.not_covered.items()]
    return "\n".join(lines)


def run(args) -> int:
    from specverify.audit import prepare
    from specverify.errors import InputError
    from specverify.io import check_writable, json_text, write_json
    from specverify.progress import Progress
    from specverify.render.atomic import check_replaceable

    jobs = (os.cpu_count() or 1) if args.jobs is None else args.jobs
    if jobs < 1:
        raise InputError(f"--jobs {args.jobs}: must be at least 1")
    if args.json and args.json != "-":
        check_writable(args.json)
    if args.report:
        check_replaceable(args.report)
        check_writable(args.report, folder=True)
    given = given_from(args, "audit")
    if given.get("fail_fast") and given.get("stop") != "decisive":
        raise InputError("--fail-fast needs --stop decisive (with fixed budgets every statistical row is decided "
                         "at the end, by Holm)")
    progress = Progress(quiet=args.quiet)
    try:
        result = prepare(args.engine, given, progress=progress, label=lambda name: spelled(name, "audit"),
                         isolated=not args.in_process).run(jobs=1 if args.in_process else jobs)
    finally:
        progress.done()
    if args.json:
        if args.json == "-":
            sys.stdout.write(json_text(result.to_dict()))
        else:
            write_json(args.json, result.to_dict())
    if args.report:
        from specverify.render import write_report
        report_progress = Progress(quiet=args.quiet)
        try:
            write_report([result.to_dict()], args.report, progress=report_progress)
        finally:
            report_progress.done()
    if not args.quiet and args.json != "-":
        print(table(result))
    return 0 if result.verdict == PASS else 1
