"""Rare events where the engine draws its own randomness: how often does it emit an impossible token?

With injected coins the endpoint rows (`endpoints`) hand an engine the coins 0 and 1 - 2**-53 and see a
coin-endpoint bug at once. An engine that draws its own coins (the seeded level, `verify_seeded`; the
engine level, `generate`) hits an endpoint only as often as its own generator lands there: once in ten
million draws is "rare enough to survive a test suite, frequent enough to produce a bug report at
scale". The only way to see it is to draw enough, and to say how much was drawn.

    seeded.rare_event[V=16 kappa=0,2]   fresh adapters' verify_seeded on one fixed problem: half the
                                        requests with no drafts (one bonus draw each), half with two
                                        (acceptance coins and a residual or bonus draw); one draw = one
                                        request's step
    engine.rare_event[toy V=4 L=4]      generate() runs on the toy models of `runs` (20% of each row's
                                        ids have probability 0); one draw = one run of 4 tokens

An impossible emission is an id outside [0, V), or a token the chain rule gives probability 0: an
accepted draft of target probability 0, a recovered token of residual weight 0, a bonus token of target
probability 0, a token after a rejection; at the engine level, a run outside the support of the
target's law. One is a certain bug: the row fails on it (exact, no false alarm). None in n draws: the
row passes and states the exact one-sided Clopper-Pearson bound on the rate at --alpha
(`stats.rate_bound`: rate < 1 - alpha ** (1 / n)).

Size: n = `stats.draws_for_rate(--rare-rate, --alpha)`, the fewest draws whose zero-event bound is at
most --rare-rate (6.9e7 for 1e-7 at alpha 1e-3); an engine whose true rate is the target is then seen
with probability 1 - alpha. The draws come in shards of SHARD_DRAWS (the last one shorter), each seeded
from the audit seed and its index alone and drawn on a fresh adapter, so the rows do not depend on where
or in which order the shards run: `ctx.shards` runs them here one after another, or spread over a Ray
cluster (`specverify.executors`), and the counts are summed.

Budget (`--samples`): draws_for_rate(--rare-rate, --alpha) draws per level, in shards; --samples unused.
"""

from __future__ import annotations

import numpy as np

from specverify import stats
from specverify.reference.batch import PAD
from specverify.reference.laws import encode
from specverify.reference.transforms import Transform

from ..battery import harness
from ..battery.problems import sample_rows
from ..battery.base import FAIL, OUTPUT_LAW, PASS, CheckResult, Timer
from . import runs
from .reproducibility import fresh

VOCAB = 16                  # the seeded problem's vocabulary
KAPPA = 2                   # drafts of the drafted half of the seeded requests
ZERO_IDS = (0, 12, 13, 14, 15)  # ids of target probability 0 in every target row: both ends of the CDF
SHARD_DRAWS = 1_000_000     # draws per shard (the unit a cluster spreads)
CALL_REQUESTS = 65_536      # seeded requests per verify_seeded call
CALL_RUNS = 100_000         # engine-level runs per generate call
SEED_SPAN = 2**44           # each level's request seeds: base + draw index, base below 2**62 - SEED_SPAN
FIRST_SHOWN = 5             # impossible emissions described in a failing row's data


def levels(engine) -> list[str]:
    """'seeded' if the adapter draws its own coins per request, 'engine' if it generates whole runs."""
    caps = set(getattr(engine, "capabilities", ()))
    out = []
    if "seeded" in caps and hasattr(engine, "verify_seeded"):
        out.append("seeded")
    if "engine" in caps and hasattr(engine, "generate"):
        out.append("engine")
    return out


def plan(ctx, level: str) -> list[dict]:
    """The shards of one level: [{"level", "index", "start", "size", "base"}], covering the draws
    `stats.draws_for_rate(ctx.rare_rate, ctx.alpha)` in order; `base`: the level's first request seed."""
    n = stats.draws_for_rate(ctx.rare_rate, ctx.alpha)
    base = int(ctx.rng("rare_event", level, "seeds").integers(1, 2**62 - SEED_SPAN))
    return [{"level": level, "index": i, "start": s, "size": min(SHARD_DRAWS, n - s), "base": base}
            for i, s in enumerate(range(0, n, SHARD_DRAWS))]


# ------------------------------------------------------------------------------------------ seeded

def seeded_problem(ctx):
    """(target [KAPPA + 1, V], draft [KAPPA, V]) of the seeded rows: target rows with ZERO_IDS at
    probability 0, draft rows over every id (so drafts of impossible tokens are proposed)."""
    rng = ctx.rng("rare_event", "problem")
    target = rng.dirichlet(np.ones(VOCAB), KAPPA + 1)
    target[:, list(ZERO_IDS)] = 0.0
    target /= target.sum(axis=1, keepdims=True)
    draft = rng.dirichlet(np.ones(VOCAB), KAPPA)
    return target, draft


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """max(0, p - q) per row, or p where that is all zero (the recovered token's weights) [rows, V]."""
    w = np.maximum(p - q, 0.0)
    return np.where((w > 0).any(axis=1, keepdims=True), w, p)


def impossible_steps(out: np.ndarray, drafts: np.ndarray, target: np.ndarray, draft: np.ndarray) -> np.ndarray:
    """Which of m one-step outputs have probability 0 under the chain rule: bool [m].

    out [m, width] the emitted ids (PAD after the step's end), drafts [m, k] the proposed ids, target
    [k + 1, V], draft [k, V] the rows. Position j < k: the draft accepted (out == draft, needs target
    probability > 0) or a recovered token (residual weight > 0, then PAD to the end); position k: the
    bonus (target probability > 0). An id outside [0, V), or PAD where a token is due, is impossible."""
    m, k = drafts.shape
    vocab = target.shape[1]
    bad = np.zeros(m, bool)
    live = np.ones(m, bool)                       # still verifying at position j
    for j in range(k + 1):
        t = out[:, j]
        inside = (t >= 0) & (t < vocab)
        safe = np.where(inside, t, 0)
        bad |= live & ~inside
        if j == k:
            bad |= live & inside & (target[k, safe] == 0)
            bad |= live & (out[:, k + 1:] != PAD).any(axis=1)
            break
        accepted = live & inside & (t == drafts[:, j])
        bad |= accepted & (target[j, safe] == 0)
        recovered = live & inside & (t != drafts[:, j])
        bad |= recovered & (residual(target[j:j + 1], draft[j:j + 1])[0, safe] == 0)
        bad |= recovered & (out[:, j + 1:] != PAD).any(axis=1)
        live = accepted
    return bad


def seeded_shard(engine, ctx, spec: dict) -> dict:
    """One shard of the seeded row on a fresh adapter: {"index", "n", "events", "first"}."""
    target, draft = seeded_problem(ctx)
    adapter = fresh(ctx, f"rare_event shard {spec['index']}") if ctx.factory is not None else engine
    rng = ctx.draws("rare_event", "seeded", "shard", spec["index"])
    events, first = 0, []
    for s in range(0, spec["size"], CALL_REQUESTS):
        m = min(CALL_REQUESTS, spec["size"] - s)
        k = np.where(np.arange(m) % 2 == 0, 0, KAPPA)                 # [m] drafts: none, KAPPA, none, ...
        plain, drafted = np.flatnonzero(k == 0), np.flatnonzero(k == KAPPA)
        drafts = sample_rows(draft, rng.random((drafted.size, KAPPA)))          # [drafted, KAPPA]
        # target rows request by request: the bonus row alone, or all KAPPA + 1 rows
        target_rows = np.concatenate([target[KAPPA:] if kb == 0 else target for kb in k[:2]])
        target_rows = np.tile(target_rows, (m // 2, 1)) if m % 2 == 0 else \
            np.concatenate([np.tile(target_rows, (m // 2, 1)), target[KAPPA:]])
        batch = harness.trusted_batch(drafts.reshape(-1), k, target_rows, np.tile(draft, (drafted.size, 1)))
        seeds = spec["base"] + spec["start"] + s + np.arange(m, dtype=np.int64)
        out = harness.returned_ids(adapter, "verify_seeded", batch, seeds, ctx, f"rare_event shard {spec['index']}")
        bad = np.zeros(m, bool)
        bad[plain] = impossible_steps(out[plain], np.zeros((plain.size, 0), np.int64), target[KAPPA:], draft[:0])
        bad[drafted] = impossible_steps(out[drafted], drafts, target, draft)
        events += int(bad.sum())
        for i in np.flatnonzero(bad)[:FIRST_SHOWN - len(first)]:
            proposed = [] if k[i] == 0 else drafts[np.searchsorted(drafted, i)].tolist()
            first.append({"shard": spec["index"], "request": int(spec["start"] + s + i), "seed": int(seeds[i]),
                          "drafts": proposed, "tokens": out[i][out[i] != PAD].tolist()})
    return {"index": spec["index"], "n": spec["size"], "events": events, "first": first}


# ------------------------------------------------------------------------------------------ engine

def engine_shard(engine, ctx, spec: dict) -> dict:
    """One shard of the engine-level row: generate() runs on the toy models, each run in the support
    of the target's law or not. {"index", "n", "events", "first"}."""
    setup = runs.SETUP
    target, draft = harness.models(engine, setup, ctx)
    law = runs.target_law(target, Transform(), ctx=ctx)
    support = np.sort(law.codes())
    events, first = 0, []
    for s in range(0, spec["size"], CALL_RUNS):
        m = min(CALL_RUNS, spec["size"] - s)
        seed = int((spec["base"] + spec["start"] + s) % 2**31)
        tokens, _ = runs.generate(engine, "engine", ctx, f"rare_event shard {spec['index']}", target=target,
                                  draft=draft, prompt=setup.prompt, kappa=setup.kappa, transform=Transform(),
                                  seed=seed, n=m, length=setup.length)      # [m, L]
        inside = ((tokens >= 0) & (tokens < setup.vocab)).all(axis=1)
        codes = encode(np.where(inside[:, None], tokens, 0), setup.vocab)
        pos = np.minimum(np.searchsorted(support, codes), support.size - 1)
        bad = ~inside | (support[pos] != codes)
        events += int(bad.sum())
        for i in np.flatnonzero(bad)[:FIRST_SHOWN - len(first)]:
            first.append({"shard": spec["index"], "run": int(spec["start"] + s + i), "seed": seed,
                          "tokens": tokens[i].tolist()})
    return {"index": spec["index"], "n": spec["size"], "events": events, "first": first}


SHARD = {"seeded": seeded_shard, "engine": engine_shard}
NAME = {"seeded": f"seeded.rare_event[V={VOCAB} kappa=0,{KAPPA}]",
        "engine": f"engine.rare_event[toy V={runs.SETUP.vocab} L={runs.SETUP.length}]"}
UNIT = {"seeded": "seeded requests", "engine": "generate() runs"}


def run_shards(engine, ctx, func, specs: list) -> list:
    """func(engine, ctx, spec) for every shard: where `ctx.shards` puts them, else here in order."""
    if ctx.shards is not None:
        return list(ctx.shards(func, specs))
    out = []
    for spec in specs:
        ctx.say(f"rare_event {spec['level']} shard {spec['index'] + 1}/{len(specs)}")
        out.append(func(engine, ctx, spec))
    return out


def row(level: str, specs: list, found: list, seconds: float, ctx) -> CheckResult:
    """The level's row from its shards' counts (each shard counted once: by index)."""
    by_index = {f["index"]: f for f in found}
    missing = [s["index"] for s in specs if s["index"] not in by_index]
    if missing or len(by_index) != len(found):
        raise RuntimeError(f"rare_event {level}: shard results do not match the plan (missing {missing[:5]}, "
                           f"{len(found)} results for {len(by_index)} shards)")
    n = sum(f["n"] for f in found)
    events = sum(f["events"] for f in found)
    first = [x for i in sorted(by_index) for x in by_index[i]["first"]][:FIRST_SHOWN]
    bound = stats.rate_bound(events, n, alpha=ctx.alpha)
    data = {"events": events, "draws": n, "unit": UNIT[level], "alpha": ctx.alpha, "rate_upper": bound.upper,
            "rate_lower": bound.lower, "target_rate": ctx.rare_rate, "shards": len(specs),
            "shard_draws": SHARD_DRAWS, "detect_target": stats.detection_probability(ctx.rare_rate, n)}
    name = NAME[level]
    if events:
        data["first"] = first
        return CheckResult(name, FAIL, n=n, exact=True, seconds=seconds, data=data,
                           detail=f"{events} impossible emission(s) in {n} {UNIT[level]} (rate >= {bound.lower:.3g} "
                                  f"at alpha {ctx.alpha:g}, Clopper-Pearson)" + (f"; first: {first[0]}" if first else ""))
    return CheckResult(name, PASS, n=n, exact=True, seconds=seconds, data=data,
                       detail=f"no impossible emission in {n} {UNIT[level]}: rate < {bound.upper:.3g} at alpha "
                              f"{ctx.alpha:g} (Clopper-Pearson), sized for --rare-rate {ctx.rare_rate:g}")


def run(engine, ctx) -> list[CheckResult]:
    out = []
    for level in levels(engine):
        specs = plan(ctx, level)
        with Timer() as t:
            found = run_shards(engine, ctx, SHARD[level], specs)
        out.append(row(level, specs, found, t.seconds, ctx))
    for r in out:
        r.law = OUTPUT_LAW
    return out
