"""Throughput of the compiled reference sampler: `python -m specverify.reference.bench [--json]`.

Measures verify steps per second of `fast.sample_one_step` (drafting, coins and the rule, all
included) at V in {8, 16}, kappa = 3, for the chain, block and greedy rules, the ragged-batch entry
point `fast.verify_batch`, and the per-request Python reference for the ratio -- all in one run.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

from . import chain, fast
from .batch import Coins, VerifyBatch


def best_rate(fn, n: int, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return n / best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specverify.reference.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4_000_000, help="verify steps per measurement")
    parser.add_argument("--json", action="store_true", help="print JSON only")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    kappa = 3
    results = {"kappa": kappa, "samples": args.samples, "one_step": {}}
    for vocab in (8, 16):
        p = rng.dirichlet(np.full(vocab, 0.7), size=kappa + 1)
        q = rng.dirichlet(np.full(vocab, 0.7), size=kappa)
        for rule in ("chain", "block", "greedy"):
            fast.sample_one_step(p, q, n=1000, rule=rule)                    # compile outside the clock
            rate = best_rate(lambda: fast.sample_one_step(p, q, n=args.samples, rule=rule), args.samples)
            results["one_step"][f"V={vocab},{rule}"] = rate
    vocab, b = 16, 65_536
    p = rng.dirichlet(np.full(vocab, 0.7), size=kappa + 1)
    q = rng.dirichlet(np.full(vocab, 0.7), size=kappa)
    drafts = rng.integers(0, vocab, (b, kappa))
    batch = VerifyBatch(drafts.reshape(-1), np.full(b, kappa), np.tile(p, (b, 1)), np.tile(q, (b, 1)))
    coins = Coins.random(batch, rng)
    fast.verify_batch(batch, coins)
    results["ragged_batch_steps_per_s"] = best_rate(lambda: fast.verify_batch(batch, coins), b)
    small = VerifyBatch(drafts[:2000].reshape(-1), np.full(2000, kappa), np.tile(p, (2000, 1)), np.tile(q, (2000, 1)))
    small_coins = Coins(coins.accept[:2000 * kappa], coins.final[:2000])
    results["python_reference_steps_per_s"] = best_rate(lambda: chain.verify_batch(small, small_coins), 2000, 1)
    results["speedup_vs_python"] = results["one_step"]["V=16,chain"] / results["python_reference_steps_per_s"]
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for k, v in results["one_step"].items():
            print(f"one-step {k:<18} {v / 1e6:7.2f} M verify steps/s")
        print(f"ragged batch (V=16)        {results['ragged_batch_steps_per_s'] / 1e6:7.2f} M verify steps/s")
        print(f"python per-request ref     {results['python_reference_steps_per_s'] / 1e6:7.3f} M verify steps/s")
        print(f"compiled / python          {results['speedup_vs_python']:7.1f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
