"""`specverify zoo`: audit the reference and every bug-zoo mutant; print which check catches which."""

from __future__ import annotations

import argparse

HELP = """\
Audit the exact reference and every mutant of the bug zoo (`specverify audit mutant:<name>` audits
one), with the same settings, and print a matrix mutant x check:

  X  some row of the check failed      .  every row passed
  -  the check does not apply          s  skipped            E  the adapter errored

followed by each audit's wall and CPU seconds and the seconds its fastest catching check needs on
its own.
Exit 0 only if the reference passes and every mutant is caught; 1 otherwise; 2 on a usage error.
"""

SHORT = {"marginal": "marg", "joint": "joint", "acceptance": "accept", "endpoints": "endpt",
         "composition": "compos", "greedy": "greedy", "reproducibility": "seeded", "rng_discipline": "rng",
         "runs": "runs", "transforms": "transf", "identity": "ident"}


def register(sub) -> None:
    p = sub.add_parser("zoo", help="audit the reference and every bug-zoo mutant", description=HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=0, help="seed of every audit (default 0)")
    p.add_argument("--samples", type=int, default=200_000, help="samples per statistical problem (default 200000)")
    p.add_argument("--alpha", type=float, default=1e-3, help="family-wise false-alarm rate of each audit (default 1e-3)")
    p.add_argument("--jobs", type=int, default=None, help="worker processes (default: the number of cores)")
    p.add_argument("--only", default=None, help="comma-separated subset of engines (reference, mutant:<name>)")
    p.add_argument("--json", metavar="PATH", help="write the zoo result as JSON to PATH")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line")
    p.set_defaults(func=run)


def table(zoo) -> str:
    heads = [SHORT.get(c, c) for c in zoo.checks]
    width = max(len(e) for e in zoo.engines)
    lines = [" " * width + "  " + " ".join(h.rjust(6) for h in heads) + "  verdict   audit s    cpu s  catch s"]
    for e in zoo.engines:
        row = zoo.matrix[e]
        catch = zoo.catch_seconds.get(e)
        lines.append(e.ljust(width) + "  " + " ".join(row[c].rjust(6) for c in zoo.checks)
                     + f"  {zoo.verdicts[e].upper():8s}{zoo.seconds[e]:8.2f} {zoo.cpu_seconds.get(e, 0.0):8.2f} "
                     + (f"{catch:8.2f}" if catch is not None else "       -"))
    for e, err in zoo.errors.items():
        lines.append(f"  {e}: error: {err}")
    lines.append("")
    n_mut = len(zoo.engines) - 1
    missed = zoo.missed()
    lines.append(f"zoo: {'OK' if zoo.ok else 'FAILED'} -- reference {zoo.verdicts.get('reference', '?').upper()}, "
                 f"{n_mut - len(missed)}/{n_mut} mutants caught"
                 + (f" (missed: {', '.join(missed)})" if missed else "")
                 + f", {zoo.wall_seconds:.1f} s wall, {sum(zoo.cpu_seconds.values()):.1f} s CPU in the audits")
    return "\n".join(lines)


def run(args) -> int:
    from specverify.errors import InputError
    from specverify.io import write_json
    from specverify.progress import Progress
    from specverify.zoo.run import engine_names, run_zoo

    if args.samples < 1000:
        raise InputError(f"--samples {args.samples}: the zoo needs at least 1000 samples per problem")
    if not 0 < args.alpha < 1:
        raise InputError(f"--alpha {args.alpha}: must be in (0, 1)")
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
        zoo = run_zoo(names, seed=args.seed, samples=args.samples, alpha=args.alpha, jobs=args.jobs, progress=progress)
    finally:
        progress.done()
    if args.json:
        write_json(args.json, zoo.to_dict())
    print(table(zoo))
    if "reference" not in names:
        return 0 if not zoo.missed() else 1
    return 0 if zoo.ok else 1
