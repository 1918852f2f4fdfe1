"""`specverify findings run [ENGINE ...] [--out reports] [--jobs 2]`: audit engines, write reports.

Each engine runs in its own process (`--one ENGINE`), `--jobs` at a time. Exit 0 when every report
was written (whatever the engines' verdicts: a failing engine is a finding, not an error), 2 when an
engine is not installed (one line with the install hint) or a run broke.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from specverify.verdicts import FAILING

from . import PLANS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specverify findings run", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("engines", nargs="*", default=list(PLANS), help=f"engines (default: all of {', '.join(PLANS)})")
    ap.add_argument("--out", default="reports", help="folder of the reports (default reports/)")
    ap.add_argument("--jobs", type=int, default=2, help="engines audited at once (default 2)")
    ap.add_argument("--samples", type=int, default=None, help="samples per one-step problem (default: per engine)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--assisted-runs", type=int, default=1500, help="transformers assisted_law runs")
    ap.add_argument("--identity-runs", type=int, default=150, help="transformers identity_draft runs per temperature")
    ap.add_argument("--repros-only", action="store_true",
                    help="only re-run the reproducers already in the engines' report folders")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    unknown = [e for e in args.engines if e not in PLANS]
    if unknown:
        print(f"specverify.findings: unknown engine(s) {', '.join(unknown)}; known: {', '.join(PLANS)}", file=sys.stderr)
        return 2
    if args.repros_only:
        from pathlib import Path

        from .report import run_repro, slug
        for e in args.engines:
            for folder in sorted(Path(args.out).glob(f"{slug(e)}-[0-9]*")):
                for script in sorted(folder.glob("repro_*.py")):
                    run_repro(script)
                    print(f"{script} -> {script.with_suffix('.out').name}")
        return 0
    if args.one:
        from specverify.errors import AdapterError, InputError
        from .report import audit, write
        try:
            result, _ = audit(args.engines[0], samples=args.samples, seed=args.seed,
                              assisted_runs=args.assisted_runs, identity_runs=args.identity_runs)
        except (InputError, AdapterError) as exc:
            print(f"specverify.findings: {exc}", file=sys.stderr)
            return 2
        folder = write(result, args.engines[0], args.out)
        failed = [c.name for c in result.checks if c.verdict in FAILING]
        print(f"{args.engines[0]} {result.engine_version}: {result.verdict.upper()} in {result.seconds:.0f} s, "
              f"{len(result.checks)} rows, {len(failed)} failing -> {folder}")
        return 0
    pending, running, code = list(args.engines), [], 0
    extra = ["--out", args.out, "--seed", str(args.seed), "--assisted-runs", str(args.assisted_runs),
             "--identity-runs", str(args.identity_runs)] + (["--samples", str(args.samples)] if args.samples else [])
    while pending or running:
        while pending and len(running) < max(1, args.jobs):
            e = pending.pop(0)
            running.append((e, subprocess.Popen([sys.executable, "-m", "specverify.findings", "--one", e, *extra])))
        for item in list(running):
            if item[1].poll() is not None:
                running.remove(item)
                code = max(code, 2 if item[1].returncode else 0)
        time.sleep(0.5)
    return code


if __name__ == "__main__":
    sys.exit(main())
