"""Rank agreement: under tensor parallelism every rank must emit the same accepted tokens.

In a tensor-parallel engine each rank runs the sampler on the same logits; if ranks disagree on one
token their KV caches part ways silently (SGLang broadcasts rank 0's tokens; vLLM samples on one
rank). The harness starts WORLD_SIZES process groups (torch.distributed, gloo, `specverify.ranks`),
builds the adapter on every rank from its factory, and gives every rank the same seeded-mode calls
(`verify_seeded`, capability "seeded"): CALLS batches of B requests with the same seeds, streams
continued across calls -- half of them greedy over rows with near ties (top-2 probabilities a
relative NEAR_TIE apart, where a rank-dependent rounding flips the argmax), half random chain
requests. The exact row `rank.agreement[world=W]` passes when every rank's tokens equal rank 0's on
every call; a failure names the call, request, ranks and both token rows.

Sizes: WORLD_SIZES (2, 4), CALLS x B requests; their measured cost is in docs/checks.md
(process start and torch import dominate).

Budget (`--samples`): exact rows of fixed size (world sizes x calls x requests); --samples unused.
"""

from __future__ import annotations

import numpy as np

from specverify.reference.batch import VerifyBatch

from ..battery.base import FAIL, PASS, SKIP, CheckResult, Timer

WORLD_SIZES = (2, 4)
CALLS = 4                   # seeded calls per rank, streams continued
B = 16                      # requests per call: the first half greedy, the rest random
V = 32
MAX_DRAFTS = 4
NEAR_TIE = 1e-7             # relative gap of the greedy rows' top two probabilities
DEVIATION = "ranks-disagree"


def problems(rng) -> tuple:
    """(batches, seeds): CALLS VerifyBatches of B requests and the B request seeds (module docstring)."""
    seeds = rng.integers(0, 2 ** 62, B, dtype=np.int64)
    batches = []
    for _ in range(CALLS):
        reqs = []
        for b in range(B):
            k = int(rng.integers(0, MAX_DRAFTS + 1))
            greedy = b < B // 2
            if greedy:
                p = rng.dirichlet(np.ones(V), size=k + 1)
                top = p.argmax(axis=1)
                second = rng.integers(0, V, k + 1)
                second = np.where(second == top, (top + 1) % V, second)
                rows = np.arange(k + 1)
                p[rows, second] = p[rows, top] * (1 - NEAR_TIE * rng.random(k + 1))
                p /= p.sum(axis=1, keepdims=True)
                best = p.argmax(axis=1)[:k]
                drafts = np.where(rng.random(k) < 0.8, best, rng.integers(0, V, k))
                reqs.append((drafts, p, None, True))
            else:
                p = rng.dirichlet(np.full(V, 0.5), size=k + 1)
                q = rng.dirichlet(np.full(V, 0.5), size=k)
                drafts = np.array([rng.choice(V, p=row) for row in q], np.int64)
                reqs.append((drafts, p, q, False))
        q_all = [r[2] for r in reqs]
        # one batch needs draft rows for every request or none: greedy requests get their one-hot drafts
        reqs = [(d, p, np.eye(V)[d] if q is None else q, g) for (d, p, q, g), q in zip(reqs, q_all)]
        batches.append(VerifyBatch.from_requests(reqs))
    return batches, seeds


def rank_calls(adapter, batches, seeds) -> list:
    """Run on every rank: the seeded calls, in order, on this rank's adapter."""
    return [np.asarray(adapter.verify_seeded(batch, seeds)) for batch in batches]


def _first_disagreement(outs):
    for r in range(1, len(outs)):
        for c, (a, b) in enumerate(zip(outs[0], outs[r])):
            if a.shape != b.shape:
                return r, c, None, a, b
            rows = np.flatnonzero((a != b).any(axis=1))
            if rows.size:
                i = int(rows[0])
                return r, c, i, a[i], b[i]
    return None


def run(engine, ctx) -> list[CheckResult]:
    if "seeded" not in getattr(engine, "capabilities", ()):
        return []
    from specverify.ranks import adapter_ref, run_ranks
    ref = adapter_ref(engine, ctx.factory)
    if ref is None:
        return [CheckResult("rank.agreement", SKIP, exact=True,
                            detail="not covered: the adapter cannot be rebuilt in rank processes (give a "
                                   "factory: pkg.module:factory or path/to/file.py:factory)")]
    batches, seeds = problems(ctx.rng("rank_agreement"))
    rows = []
    ctx.say(f"rank agreement: world sizes {', '.join(map(str, WORLD_SIZES))}")
    with Timer() as t:
        by_world = run_ranks(ref, rank_calls, (batches, seeds), WORLD_SIZES, timeout=max(ctx.timeout, 60.0),
                             what=f"{engine.name}.verify_seeded on {max(WORLD_SIZES)} ranks (check rank_agreement)")
    for world in WORLD_SIZES:
        outs = by_world[world]
        n = CALLS * B * (world - 1)
        bad = _first_disagreement(outs)
        shape = f"{CALLS} seeded calls x {B} requests ({B // 2} greedy over near ties, {B - B // 2} random), gloo"
        if bad is None:
            rows.append(CheckResult(f"rank.agreement[world={world}]", PASS, n=n, exact=True, seconds=t.seconds / len(WORLD_SIZES),
                                    detail=f"all {world} ranks emitted the same tokens ({shape})",
                                    data={"world_size": world}))
            continue
        r, c, i, a, b = bad
        n_bad = sum(int((x != y).any(axis=1).sum()) if x.shape == y.shape else B
                    for o in outs[1:] for x, y in zip(outs[0], o))
        kind = "greedy" if i is not None and i < B // 2 else "random"
        where = "a different shape" if i is None else f"request {i} ({kind})"
        detail = (f"{n_bad}/{n} request-calls differ from rank 0; first: call {c}, {where}: rank 0 emitted "
                  f"{_ids(a)}, rank {r} emitted {_ids(b)} ({shape})")
        rows.append(CheckResult(f"rank.agreement[world={world}]", FAIL, n=n, exact=True, seconds=t.seconds / len(WORLD_SIZES),
                                detail=detail, data={"world_size": world, "rank": r, "call": c, "request": i,
                                                     "rank0": _ids(a), "other": _ids(b), "differing": n_bad}))
    return rows


def _ids(row) -> list:
    return [int(x) for x in np.asarray(row).ravel() if x >= 0]
