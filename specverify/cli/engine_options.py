"""Options shared by the subcommands that run our engine on the real model (`generate`, `bench`).

Not a subcommand: `specverify/cli/__init__.py` registers only the modules named in `COMMANDS`.
"""

from __future__ import annotations


def add_engine_options(p, *, json_help: str, backend: bool = True) -> None:
    """Add --backend and --weights (unless `backend` is False), --json [PATH] (`json_help`; PATH as in
    every subcommand, '-' or none: stdout) and --threads, in the order --help lists them."""
    if backend:
        p.add_argument("--backend", default="invariant",
                       help="op backend: invariant (default: batch-invariant, exact), invariant-q8 (batch-invariant, "
                            "activations rounded to 8-bit blocks against Q4_1 weights: faster, other logits), "
                            "default (torch ops), triton")
        p.add_argument("--weights", choices=["quantized", "fp32"], default="quantized",
                       help="how the GGUF's Q4_1/Q8_0 matrices are held: quantized (default: in their blocks, "
                            "dequantized inside the kernels; same logits as fp32 on the invariant backend, "
                            "fewer bytes per step) or fp32 (dequantized at load)")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help=f"{json_help}, to PATH ('-' or no PATH: stdout)")
    p.add_argument("--threads", type=int, default=1,
                   help="threads (default 1: on the shared 2 cores, a second OpenMP thread spin-waits "
                        "and slows decode under load; 0 = torch's default). Above 1 the invariant backend "
                        "splits each linear's panels and attention's heads over numba's threads too "
                        "(the same bits)")


def write_json_out(path: str, obj) -> None:
    """The --json result: to stdout for '-', else atomically to `path`."""
    import sys

    from specverify.io import json_text, write_json
    if path == "-":
        sys.stdout.write(json_text(obj))
    else:
        write_json(path, obj)


def check_json_path(path) -> None:
    """InputError now (before the model loads) if --json PATH cannot be written."""
    if path and path != "-":
        from specverify.io import check_writable
        check_writable(path)


THREADS_PER_CORE = 4        # --threads above this many a core are refused (100000 segfaulted torch)


def max_threads() -> int:
    """The most --threads accepted on this machine."""
    import os
    return THREADS_PER_CORE * max(1, os.cpu_count() or 1)


def apply_threads(args) -> None:
    """Set torch's (and numba's) thread count from --threads (0 keeps torch's default)."""
    import torch
    from specverify.errors import InputError
    limit = max_threads()
    if not 0 <= args.threads <= limit:
        raise InputError(f"--threads {args.threads}: must be in [0, {limit}] (0 keeps torch's default; "
                         f"{THREADS_PER_CORE} a core at most)")
    if args.threads > 0:
        torch.set_num_threads(args.threads)
        import numba
        numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))


def backend_for(name: str, threads: int):
    """The op backend `name`, as an object when --threads asks the invariant backend to go parallel."""
    if name in ("invariant", "invariant-q8") and threads > 1:
        from specverify.kernels.cpu_backend import InvariantBackend
        return InvariantBackend(parallel=True, activations="q8" if name == "invariant-q8" else "fp32")
    return name
