"""`specverify zoo`: audit the reference and every bug-zoo mutant; print which check catches which."""

from __future__ import annotations

import argparse
import sys

from specverify.settings import add_arguments, check_given, given_from, spelled

HELP = """\
Audit the exact reference and every mutant of the bug zoo (`specverify audit mutant:<name>` audits
one), with the same settings, and print a matrix mutant x check:

  X  some row of the check failed      .  every row passed
  -  the check does not apply          s  skipped            E  the adapter errored
  ~  not run: --fail-fast ended that audit at an earlier failing row (--no-fail-fast: the full matrix)

followed by each audit's wall and CPU seconds and the seconds its fastest catching check needs on
its own. --markdown writes the matrix as docs/zoo.md shows it (no timings).
Exit 0 only if the reference passes and every mutant is caught; 1 otherwise; 2 on a usage error.
"""


def register(sub) -> None:
    p = sub.add_parser("zoo", help="audit the reference and every bug-zoo mutant", description=HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_arguments(p, "zoo")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: the number of cores)")
    p.add_argument("--only", default=None, help="comma-separated subset of engines (reference, mutant:<name>)")
    p.add_argument("--json", metavar="PATH", help="write the zoo result as JSON to PATH ('-' for stdout)")
    p.add_argument("--report", metavar="DIR", help="also write an HTML + Markdown report of the zoo to DIR")
    p.add_argument("--markdown", metavar="PATH", help="write docs/zoo.md's zoo block (the matrix without timings) to PATH")
    p.add_argument("--quiet", "-q", action="store_true",
                   help="no progress line and no matrix: only the one-line verdict (on stderr with --json -)")
    p.set_defaults(func=run)


def run(args) -> int:
    from specverify.errors import InputError
    from specverify.io import json_text, write_atomic, write_json
    from specverify.progress import Progress
    from specverify.zoo.render import readme_block, table
    from specverify.zoo.run import engine_names, run_zoo

    from specverify.audit import BATTERY
    from specverify.io import check_writable

    given = check_given(given_from(args, "zoo"), BATTERY, lambda name: spelled(name, "zoo"))
    if given["samples"] < 1000:
        raise InputError(f"--samples {args.samples}: the zoo needs at least 1000 samples per problem")
    for path in (args.json, args.markdown):
        if path and path != "-":
            check_writable(path)
    if args.report:
        from specverify.render.atomic import check_replaceable
        check_replaceable(args.report)
        check_writable(args.report, folder=True)
    if args.jobs is not None and args.jobs < 1:
        raise InputError(f"--jobs {args.jobs}: must be at least 1")
    names = engine_names()
    if args.only:
        wanted = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in wanted if n not in names]
        if unknown:
            raise InputError(f"unknown zoo engine(s) {', '.join(unknown)}; known: {', '.join(names)}")
        names = [n for n in names if n in wanted]
    progress = Progress(quiet=args.quiet)
    try:
        zoo = run_zoo(names, **given, jobs=args.jobs, progress=progress)
    finally:
        progress.done()
    if args.json == "-":
        sys.stdout.write(json_text(zoo.to_dict()))
    elif args.json:
        write_json(args.json, zoo.to_dict())
    if args.markdown:
        write_atomic(args.markdown, readme_block(zoo.to_dict()))
    if args.report:
        from specverify.render import write_report
        write_report([zoo.to_dict()], args.report, progress=None)
    text = table(zoo)
    if args.quiet:
        print(text.splitlines()[-1], file=sys.stderr if args.json == "-" else sys.stdout)
    elif args.json != "-":
        print(text)
    if "reference" not in names:          # a subset without the samplers' reference: the engines it has judged
        from specverify.zoo.run import REFERENCES
        flagged = [e for e in names if e in REFERENCES and zoo.verdicts.get(e) != "pass"]
        return 0 if not zoo.missed() and not flagged else 1
    return 0 if zoo.ok else 1
