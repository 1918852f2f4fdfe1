"""`specverify audit ENGINE`: run the check battery against one engine."""

from __future__ import annotations

import argparse
import os
import sys

from specverify.adapters.registry import described
from specverify.format import fmt
from specverify.settings import add_arguments, given_from, spelled
from specverify.verdicts import ALL, FAILING, PASS

HELP = """\
Audit a speculative-decoding implementation against the exact rules.

Every statistical check is a chi-squared test of the emitted tokens against the exact law computed
by the float64 reference; the whole audit's family-wise false-alarm rate is --alpha (Holm). Each row
states the smallest total-variation deviation it detects with probability 0.99 at its sample size.
Exact checks (a zero-probability token emitted) fail outright.

ENGINE is your adapter:
  path/to/file.py:factory   a zero-argument factory in a file (docs/adapter-protocol.md)
  pkg.module:factory        the same, from an importable module

or a registered engine:
""" + "".join(f"  {k:<26}{v}\n" if len(k) < 26 else f"  {k}\n  {'':<26}{v}\n" for k, v in described().items()) + """\
  http://HOST:PORT/v1       an OpenAI-compatible completions server: the server level (--model,
                            --plain-url; docs/server-level.md)

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
    p.add_argument("--executor", default="local", metavar="local|ray[:ADDRESS]",
                   help="where the checks run: local (this host, --jobs adapter processes; the default) or ray "
                        "(a Ray cluster: this host's, or the head node's GCS at ADDRESS = HOST:PORT; each adapter in "
                        "an actor of its own, the same rows; pip install 'specverify[ray]'; docs/ray.md)")
    p.add_argument("--ray-cpus-per-adapter", type=float, default=1.0, metavar="N",
                   help="with --executor ray: CPUs each adapter actor asks the cluster for (default 1)")
    p.add_argument("--ray-gpus-per-adapter", type=float, default=0.0, metavar="N",
                   help="with --executor ray: GPUs each adapter actor asks the cluster for (default 0)")
    p.add_argument("--ray-actors", type=int, default=None, metavar="N",
                   help="with --executor ray: adapter actors at most (default: as many as the cluster's CPUs and "
                        "GPUs fit)")
    p.add_argument("--in-process", action="store_true",
                   help="run the adapter in the audit's own process, not in a worker process of its own (for "
                        "debugging: a hang that holds the GIL then ignores --timeout, a crash ends the audit)")
    p.add_argument("--all-rows", action="store_true",
                   help="print every row (default: the totals per check and the failing rows)")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress line and no table: only the one-line verdict (on stderr with --json -)")
    p.set_defaults(func=run)


def _aligned(rows: list, left: int = 2) -> list:
    """Rows of text cells as aligned lines (the first `left` columns left-aligned) with a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) if i < left else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return lines


def row_table(result, rows) -> list:
    """Every given row: name, verdict, statistic, dof, p-value, n, min detectable TV."""
    out = [("check", "verdict", "statistic" if result.stop is None else "stat|log e", "dof", "p-value", "n", "min TV")]
    for c in rows:
        out.append((c.name, c.verdict.upper() + (" (exact)" if c.exact else ""), fmt(c.statistic, ".2f"),
                    fmt(c.dof, "d"), fmt(c.p_value, ".3g"), str(c.n), fmt(c.min_detectable_tv, ".4f")))
    return _aligned(out)


def totals_table(result) -> list:
    """One line a check: its rows by verdict and the largest min detectable TV of its statistical rows."""
    out = [("check", "rows", *(v.upper() for v in ALL), "worst min TV")]
    for check in dict.fromkeys(c.check or c.name.split(".")[0] for c in result.checks):
        rows = [c for c in result.checks if (c.check or c.name.split(".")[0]) == check]
        tvs = [c.min_detectable_tv for c in rows if c.min_detectable_tv is not None]
        out.append((check, str(len(rows)), *(str(sum(c.verdict == v for c in rows)) for v in ALL),
                    fmt(max(tvs) if tvs else None, ".4f")))
    return _aligned(out, left=1)


def table(result, all_rows: bool = False) -> str:
    """The audit as text: every row (`all_rows`), or the totals per check and the failing rows; then
    the summary (`specverify.summary.text`: verdict, diagnosis, failing rows, not covered)."""
    from specverify import summary

    if all_rows:
        lines = row_table(result, result.checks)
    else:
        lines = totals_table(result)
        failing = [c for c in result.checks if c.verdict in FAILING]
        if failing:
            lines += ["", "failing rows (--all-rows: every row):"] + row_table(result, failing)
    lines.append("")
    lines.append(summary.text(result, max_failing=None if all_rows else 20))
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
    from specverify.executors import parse
    executor = parse(args.executor, cpus_per_adapter=args.ray_cpus_per_adapter,
                     gpus_per_adapter=args.ray_gpus_per_adapter, actors=args.ray_actors)
    executor.connect()              # ray missing or the cluster unreachable: exit 2 before any work
    progress = Progress(quiet=args.quiet)
    try:
        result = prepare(args.engine, given, progress=progress, label=lambda name: spelled(name, "audit"),
                         isolated=not args.in_process).run(jobs=1 if args.in_process else jobs, executor=executor)
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
    if args.quiet:
        from specverify.summary import verdict_line
        print(verdict_line(result), file=sys.stderr if args.json == "-" else sys.stdout)
    elif args.json != "-":
        print(table(result, all_rows=args.all_rows))
    return 0 if result.verdict == PASS else 1
