"""Greedy verification, compared exactly with the reference's argmax rule (no statistics).

Temperature 0: accept while the draft equals the target's argmax (the lowest index among ties, as
torch.argmax and numpy.argmax), emit the argmax at the first mismatch, the bonus argmax otherwise.
The result must equal `reference.chain.greedy_rule` token for token, and a greedy request must not
use its coins (its output is the same under any coins).

Problems: rows with exact ties between the two largest entries, rows whose top two differ by one
ulp, rows with zeros, random rows; drafts equal to the argmax, to the other tied token, or random.
Catches a tie-break toward the highest index (speculative greedy then differs from plain greedy
decoding on every tie) and any deviation from the argmax rule.

Budget (`--samples`): exact rows on fixed problems; --samples unused.
"""

from __future__ import annotations

import numpy as np

from specverify.reference.batch import Coins, VerifyBatch
from specverify.reference.chain import greedy_rule

from ..battery import harness
from ..battery.base import FAIL, PASS, CheckResult, Timer
from specverify.reference.batch import PAD

VOCAB = 6


def near(dtype: str) -> float:
    """The largest value below 0.25 that stays below it in the engine's row precision: one float64
    ulp, or four float32 ulps for an adapter that declares `row_dtype = "float32"` (its rows are
    rounded to float32, where a one-ulp float64 near tie is an exact tie)."""
    if dtype == "float32":
        return 0.25 - 4 * 2.0**-26
    return float(np.nextafter(0.25, 0.0))


def tie_rows(rng, n, dtype: str = "float64"):
    p = rng.dirichlet(np.ones(VOCAB), n) * 0.5
    below = near(dtype)
    for r in range(n):
        a, b = sorted(rng.choice(VOCAB, 2, replace=False))
        p[r, a] = p[r, b] = 0.25
        if r % 3 == 1:
            p[r, b] = below                              # near tie: the lower id wins by one ulp
        elif r % 3 == 2:
            p[r, a] = below                              # near tie: the higher id wins by one ulp
    p[(rng.random(p.shape) < 0.15) & (p < 0.2)] = 0.0       # zeros, never on the tied pair
    return p / p.sum(axis=1, keepdims=True)


def requests(rng, n, ties: bool, dtype: str = "float64"):
    reqs = []
    for _ in range(n):
        k = int(rng.integers(0, 4))
        p = tie_rows(rng, k + 1, dtype) if ties else rng.dirichlet(np.full(VOCAB, 0.7), k + 1)
        x = np.empty(k, np.int64)
        for i in range(k):
            best = np.flatnonzero(p[i] == p[i].max())
            second = np.argsort(-p[i], kind="stable")[1]
            x[i] = [best[0], best[-1], second, rng.integers(0, VOCAB)][int(rng.integers(0, 4))]
        reqs.append((x, p, None, True))
    return reqs


def run(engine, ctx) -> list[CheckResult]:
    if "greedy" not in set(getattr(engine, "capabilities", ())):
        return []
    rng = ctx.rng("greedy")
    rows = []
    for label, ties in (("ties", True), ("random", False)):
        with Timer() as t:
            reqs = requests(rng, 300, ties, getattr(engine, "row_dtype", "float64"))
            batch = VerifyBatch.from_requests(reqs)
            coins = Coins.random(batch, rng)
            out = harness.verified(engine, "verify", batch, coins, ctx, f"greedy {label}")
            again = harness.verified(engine, "verify", batch, Coins.random(batch, rng), ctx, f"greedy {label}, other coins")
            diffs = []
            for b, (x, p, _, _) in enumerate(reqs):
                want = greedy_rule(x, p)
                got = out[b][out[b] != PAD]
                if got.shape != want.shape or (got != want).any():
                    diffs.append(f"drafts {x.tolist()}: expected {want.tolist()}, got {got.tolist()} "
                                 f"(target rows {np.round(p, 4).tolist()})")
                elif (again[b] != out[b]).any():
                    diffs.append(f"drafts {x.tolist()}: output changed with the coins ({out[b].tolist()} vs {again[b].tolist()})")
        n = len(reqs)
        if diffs:
            rows.append(CheckResult(f"greedy.argmax[{label}]", FAIL, n=n, exact=True, seconds=t.seconds,
                                    detail=f"{len(diffs)} of {n} requests differ from the argmax rule; first: {diffs[0]}",
                                    data={"differences": diffs[:20], "count": len(diffs)}))
        else:
            rows.append(CheckResult(f"greedy.argmax[{label}]", PASS, n=n, exact=True, seconds=t.seconds,
                                    detail=f"{n} requests equal the argmax rule (lowest index on ties) under two coin sets"))
    return rows
