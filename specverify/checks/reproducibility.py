"""Seeded reproducibility (capability "seeded": `verify_seeded(batch, seeds)`), exact except the law.

In seeded mode the adapter draws its own randomness: request b from its own generator, identified by
seeds[b] and continued across calls (protocol: `adapters.protocol`). Fresh adapters come from the
engine's factory (`Context.factory`).

    seeded.replay              two fresh adapters fed the same three calls return the same tokens
    seeded.fresh_vs_warm       a request with a new seed gets the same tokens from a fresh adapter and
                               from one that has already served other requests
    seeded.batch_independent   each probe verified alone (fresh adapter) and inside a mixed batch with
                               other seeded requests (another fresh adapter): the same tokens
    seeded.joint[dirichlet]    the seeded path's one-step law (one request per seed) is the exact one

Catches unseeded paths and shared streams (a request's tokens then depend on its neighbours and on how
many steps the engine has taken: vllm-project/vllm#6038, NVIDIA/TensorRT-LLM#17599), RNG order that
depends on the batch, and a biased seeded path.

Budget (`--samples`): exact replay rows of fixed size; seeded.joint draws samples one-step samples (one request per seed).
"""

from __future__ import annotations

import numpy as np

from specverify.reference.batch import VerifyBatch

from ..battery import harness, onestep, problems
from ..battery.base import FAIL, OUTPUT_LAW, PASS, RULE_LAW, SKIP, CheckResult, Timer
from .composition import probes
from .joint import sequence_gof


def seeded_call(engine, batch: VerifyBatch, seeds, ctx, what: str) -> np.ndarray:
    return harness.verified(engine, "verify_seeded", batch, np.asarray(seeds, np.int64), ctx, what)


def fresh(ctx, what: str):
    adapter = harness.call_with_timeout(ctx.factory, timeout=ctx.timeout, what=f"engine factory ({what})")
    if not hasattr(adapter, "verify_seeded"):
        from specverify.errors import AdapterError
        raise AdapterError(f"engine factory ({what}): the fresh adapter has no verify_seeded")
    return adapter


def _exact(name, diffs, n, seconds, ok_detail):
    if diffs:
        return CheckResult(name, FAIL, n=n, exact=True, seconds=seconds,
                           detail=f"{len(diffs)} of {n} differ; first: {diffs[0]}", data={"differences": diffs[:20]})
    return CheckResult(name, PASS, n=n, exact=True, seconds=seconds, detail=ok_detail)


def _diff_rows(a, b, label):
    return [f"{label} request {i}: {a[i][a[i] >= 0].tolist()} vs {b[i][b[i] >= 0].tolist()}"
            for i in range(a.shape[0]) if (a[i] != b[i]).any()]


def applies(engine, ctx) -> bool:
    return "seeded" in set(getattr(engine, "capabilities", ())) and hasattr(engine, "verify_seeded")


def run(engine, ctx) -> list[CheckResult]:
    if not applies(engine, ctx):
        return []
    rows = []
    rng = ctx.rng("seeded")
    if ctx.factory is None:
        rows.append(CheckResult("seeded.replay", SKIP, exact=True,
                                detail="no engine factory: fresh adapters cannot be built, replay not checked"))
    else:
        reqs, _, _ = probes(rng)
        batch = VerifyBatch.from_requests(reqs)
        seeds = rng.integers(1, 2**62, batch.batch_size)
        with Timer() as t:
            a, b = fresh(ctx, "replay"), fresh(ctx, "replay")
            diffs, n = [], 0
            for step in range(3):
                x = seeded_call(a, batch, seeds, ctx, "replay")
                y = seeded_call(b, batch, seeds, ctx, "replay")
                diffs += _diff_rows(x, y, f"call {step + 1}")
                n += batch.batch_size
        rows.append(_exact("seeded.replay", diffs, n, t.seconds, f"{n} outputs identical on two fresh adapters"))
        with Timer() as t:
            new = rng.integers(1, 2**62, batch.batch_size)
            warm = seeded_call(a, batch, new, ctx, "warm")
            cold = seeded_call(fresh(ctx, "fresh"), batch, new, ctx, "fresh")
            diffs = _diff_rows(warm, cold, "new-seed")
        rows.append(_exact("seeded.fresh_vs_warm", diffs, batch.batch_size, t.seconds,
                           f"{batch.batch_size} new-seed requests identical on a warm and a fresh adapter"))
        with Timer() as t:
            single = fresh(ctx, "alone")
            alone = [seeded_call(single, VerifyBatch.from_requests([r]), seeds[i:i + 1], ctx, "alone")[0]
                     for i, r in enumerate(reqs)]
            order = rng.permutation(len(reqs))
            mixed = seeded_call(fresh(ctx, "mixed"), VerifyBatch.from_requests([reqs[i] for i in order]), seeds[order], ctx, "mixed")
            diffs = []
            for pos, i in enumerate(order):
                x, y = alone[i][alone[i] >= 0], mixed[pos][mixed[pos] >= 0]
                if x.shape != y.shape or (x != y).any():
                    diffs.append(f"request with drafts {reqs[i][0].tolist()}: alone {x.tolist()}, in the batch {y.tolist()}")
        rows.append(_exact("seeded.batch_independent", diffs, len(reqs), t.seconds,
                           f"{len(reqs)} seeded requests identical alone and in a mixed batch"))
    if "chain" in set(getattr(engine, "capabilities", ())):
        problem = problems.make("dirichlet", ctx.rng("problem", "chain", "dirichlet"))
        adapter = fresh(ctx, "law") if ctx.factory is not None else engine
        with Timer() as t:
            samples = harness.run_seeded(adapter, problem, ctx.samples, ctx.draws("seeded-law"), ctx,
                                         first_seed=int(rng.integers(1, 2**40)), what="seeded law")
        rows.append(sequence_gof("seeded.joint[dirichlet]", samples, onestep.law_of(problem, "chain", ctx), t.seconds, ctx))
    for r in rows:      # the one-step joint law is the chain rule's own; replays hold for any exact sampler
        r.law = RULE_LAW if r.name.startswith("seeded.joint[") else OUTPUT_LAW
    return rows
