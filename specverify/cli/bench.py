"""`specverify bench`: plain vs speculative decode on the real model, over several decode paths, as
ratios measured in one run. Parses the flags, calls `specverify.bench.decode.run_bench`, prints; the
paths and what is measured are described in `specverify/bench/decode.py`."""

from __future__ import annotations

import sys

from specverify.bench.decode import PATHS
from specverify.cli.engine_options import (add_engine_options, apply_threads, backend_for, check_json_path,
                                           write_json_out)


def register(sub) -> None:
    p = sub.add_parser("bench", help="benchmark plain and speculative decode on the real model, several decode paths",
                       description="Plain vs speculative decode tokens/s and acceptance (E, r_i, alpha) on "
                                   "SmolLM2-135M-Instruct, batch 1, greedy, over decode paths (q8, quantized, fp32, "
                                   "default, transformers, llama.cpp); ratios, bytes per step and the fraction of this "
                                   "machine's memory bandwidth, all measured in one run.")
    p.add_argument("--paths", default="quantized,fp32",
                   help=f"comma-separated decode paths from {', '.join(PATHS)} (default: quantized,fp32; "
                        "see the module docstring of specverify/bench/decode.py)")
    p.add_argument("--spec", action="append", choices=["ngram", "draft"], default=None,
                   help="proposer(s) to compare against plain decode (default: ngram; transformers runs ngram only)")
    p.add_argument("--kappa", type=int, action="append", default=None, help="drafts per step (repeatable; default 3 and 7)")
    p.add_argument("--draft-layers", type=int, default=6)
    p.add_argument("--ngram-max", type=int, default=4, help="longest n-gram looked up (default 4)")
    p.add_argument("--ngram-min", type=int, default=2,
                   help="shortest n-gram that may propose (default 2: a 1-token match drafts too often wrongly)")
    p.add_argument("--prompts", default="edit,summarise",
                   help="comma-separated prompt categories from prompts.json (default: edit,summarise)")
    p.add_argument("--n-prompts", type=int, default=8)
    p.add_argument("--max-tokens", type=int, default=128)
    p.add_argument("--repeat", type=int, default=2,
                   help="runs of each (prompt, path, config); the fastest counts (robust to other load on the machine)")
    add_engine_options(p, json_help="write the result as JSON", backend=False)
    p.set_defaults(func=run)


def _check(args) -> list[str]:
    """The paths, and every numeric flag checked: InputError (one line, exit 2) before any work."""
    from specverify.bench.decode import check_paths
    from specverify.errors import InputError
    paths = check_paths(args.paths, args.spec)
    for name in ("n_prompts", "max_tokens", "repeat"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} {getattr(args, name)} must be >= 1")
    if any(k < 1 for k in args.kappa or []):
        raise InputError("--kappa must be >= 1")
    return paths


def run(args) -> int:
    from specverify.bench.decode import format_table, run_bench

    paths = _check(args)
    check_json_path(args.json)
    apply_threads(args)
    result = run_bench(paths, specs=args.spec or ["ngram"], kappas=args.kappa or [3, 7],
                       ngram=(args.ngram_max, args.ngram_min),
                       categories=[c.strip() for c in args.prompts.split(",") if c.strip()],
                       n_prompts=args.n_prompts, max_tokens=args.max_tokens, repeat=args.repeat,
                       draft_layers=args.draft_layers, threads=args.threads,
                       backend_of=lambda name: backend_for(name, args.threads),
                       progress=lambda line: print(line, file=sys.stderr, flush=True))
    if args.json:
        write_json_out(args.json, result)
    else:
        print(format_table(result))
    return 0
