"""`specverify lab`: Lab 08 -- acceptance and speedup measured on the real model, beside the formulas."""

from __future__ import annotations

import argparse
import time

HELP = """\
Measure speculative decoding on the real model (SmolLM2-135M-Instruct, greedy, this CPU) and set every
number beside the chapter's formula: E and r_i against alpha^i, speedup against kappa against
E/(1 + kappa c) with c measured, the break-even alpha, the step-time knee T*, speedup against
concurrency B against the roofline prediction, n-gram and draft-model proposers compared.

Writes DIR/index.html, DIR/README.md, DIR/img/*.png and DIR/lab.json (atomically). Each measurement
unit is saved as it finishes (--state, default ~/.cache/specverify/lab-<config>.json): an interrupted
run resumes when started again with the same options; --fresh measures everything again.
The full lab took 17 minutes on one thread of a shared 2-core machine; --quick runs a tiny random model
in seconds.

exit codes: 0 written, 2 usage or input error.
"""


def _ints(s: str) -> tuple:
    from specverify.errors import InputError
    try:
        return tuple(int(x) for x in s.split(",") if x.strip())
    except ValueError:
        raise InputError(f"expected comma-separated integers, got {s!r}") from None


def register(sub) -> None:
    p = sub.add_parser("lab", help="measure acceptance and speedup against the formulas (Lab 08)",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-o", "--output", "--report", dest="output", default="reports/lab", metavar="DIR",
                   help="report folder (default reports/lab; --report DIR, as in audit and zoo)")
    p.add_argument("--quick", action="store_true", help="tiny random model, few points (a smoke test)")
    p.add_argument("--kappas", type=_ints, default=None, help="kappas to sweep (default 1,...,8)")
    p.add_argument("--batches", type=_ints, default=None, help="concurrency values (default 1,2,4,...,256)")
    p.add_argument("--sweep-kappa", type=int, default=None, help="kappa of the concurrency sweep (default 3)")
    p.add_argument("--draft-layers", type=int, default=None,
                   help="layers of the self-speculative draft (default: the best of a depth scan)")
    p.add_argument("--backend", default=None, choices=["invariant", "default"],
                   help="op backend (default invariant, the one the engine ships with)")
    p.add_argument("--clock", choices=["cpu", "wall"], default=None, help="timing clock (default cpu: process CPU time)")
    p.add_argument("--prompts-per-category", type=int, default=None, help="prompts per category (default 2)")
    p.add_argument("--max-tokens", type=int, default=None, help="tokens per prompt (default 64)")
    p.add_argument("--rounds", type=int, default=None, help="interleaved timing rounds (default 3)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    p.add_argument("--state", default=None, metavar="PATH", help="resume file (default under ~/.cache/specverify)")
    p.add_argument("--fresh", action="store_true", help="ignore saved measurements and start over")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar and no summary")
    p.set_defaults(func=run)


def run(args) -> int:
    from specverify.lab.report import headline, write_lab_report
    from specverify.lab.config import LabConfig
    from specverify.lab.run import run_lab
    from specverify.lab.state import default_state_path
    from specverify.progress import Progress
    from specverify.render.atomic import check_replaceable

    overrides = {k: v for k, v in {
        "kappas": args.kappas, "batches": args.batches, "sweep_kappa": args.sweep_kappa,
        "draft_layers": args.draft_layers, "prompts_per_category": args.prompts_per_category,
        "max_tokens": args.max_tokens, "rounds": args.rounds, "threads": args.threads,
        "clock": args.clock, "backend": args.backend}.items() if v is not None}
    config = LabConfig.quick_config(**overrides) if args.quick else LabConfig(**overrides)
    if config.sweep_kappa not in config.kappas:
        config.kappas = tuple(sorted(set(config.kappas) | {config.sweep_kappa}))
    config.validate()
    check_replaceable(args.output)
    state = args.state or default_state_path(config)
    progress = Progress(quiet=args.quiet)
    start = time.perf_counter()
    try:
        result = run_lab(config, state_path=state, fresh=args.fresh, progress=progress)
        progress("rendering the report")
        write_lab_report(result, args.output)
    finally:
        progress.done()
    if not args.quiet:
        h = headline(result)
        print(f"lab written to {args.output}/index.html ({time.perf_counter() - start:.0f} s; state {state})")
        print(f"c = {h['c_draft']:.3f} (draft of {result['draft_layers']} layers), T* = {h['T_star']:.1f}")
        for name in result["proposers"]:
            v = h[name]
            sp = ", ".join(f"k{k}: {s:.2f}x" for k, s in v["speedup_by_kappa"].items() if s is not None)
            print(f"{name}: alpha {v['alpha'] if v['alpha'] is None else round(v['alpha'], 3)}, "
                  f"E(kappa max) {v['E_at_max_kappa']}, speedups {sp}; crossing B measured "
                  f"{v['crossing_measured']}, roofline {v['crossing_roofline']}")
    return 0
