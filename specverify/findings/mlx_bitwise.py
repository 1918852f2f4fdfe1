"""MLX-LM's bitwise level on SmolLM2-135M at a size these 2 shared cores afford, as a findings report.

The battery's `bitwise` check at its CI size (32 prompts x 64 tokens, kappas 1, 3, 7, batch 8) is
16,000+ greedy tokens per configuration; MLX-LM's CPU build decodes SmolLM2-135M at ~1 s a token on
a loaded 2-core machine, so that is hours. This runs the same check (`checks.bitwise.run`, the same
comparisons and divergence classes) at `--prompts` x `--tokens` with the given kappas and one batched
layout, on the repo's prompts, and writes `reports/mlx-bitwise-<version>/` like `python -m
specverify.findings` (audit.json, README.md):

    specverify findings mlx-bitwise [--prompts 3] [--tokens 32] [--kappas 3] [--batch 3]

The tiny-model form runs at the CI size through the findings runner: `specverify findings run
mlx-bitwise-tiny`.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="specverify findings mlx-bitwise", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--kappas", default="3", help="comma-separated kappas (default 3)")
    ap.add_argument("--batch", type=int, default=3, help="the batched plain-decode layout (default 3)")
    ap.add_argument("--out", default="reports")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from specverify.audit import prepare
    from specverify.checks import bitwise
    from specverify.errors import AdapterError, InputError

    from .report import write
    try:
        kappas = tuple(int(k) for k in args.kappas.split(","))
        sizes = bitwise.Sizes(args.prompts, args.tokens, kappas, (args.batch,), None)
        ready = prepare("mlx-bitwise", {"seed": args.seed, "checks": ["bitwise"], "timeout": 7200.0}, isolated=False)
        ready.settings = replace(ready.settings, checks=())
        result = ready.run(extra=lambda engine, ctx: bitwise.run(engine, ctx, sizes=sizes))
    except (InputError, AdapterError, ValueError) as exc:
        print(f"specverify findings mlx-bitwise: {exc}", file=sys.stderr)
        return 2
    folder = write(result, "mlx-bitwise", args.out)
    print(f"mlx-bitwise {result.engine_version}: {result.verdict.upper()} in {result.seconds:.0f} s, "
          f"{len(result.checks)} rows -> {folder}")
    return 0
