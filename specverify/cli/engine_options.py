"""Options shared by the subcommands that run our engine on the real model (`generate`, `bench`).

Not a subcommand: `specverify/cli/__init__.py` registers only the modules named in `COMMANDS`.
"""

from __future__ import annotations


def add_engine_options(p, *, json_help: str) -> None:
    """Add --backend, --json (store_true, with `json_help`) and --threads, in the order --help lists them."""
    p.add_argument("--backend", default="invariant",
                   help="op backend: invariant (default: batch-invariant, and the fastest here), default (torch ops), triton")
    p.add_argument("--json", action="store_true", help=json_help)
    p.add_argument("--threads", type=int, default=1,
                   help="torch threads (default 1: on the shared 2 cores, a second OpenMP thread spin-waits "
                        "and slows decode under load; 0 = torch's default)")


def apply_threads(args) -> None:
    """Set torch's thread count from --threads (0 keeps torch's default)."""
    import torch
    if args.threads > 0:
        torch.set_num_threads(args.threads)
