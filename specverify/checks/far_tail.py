"""The far tail at V = 262,144: are tokens of probability ~1e-8 drawn at their rate?

The problem (`large_problems.far_tail`): requests with no drafts, their target row 8 head ids sharing
1 - m and 262,136 tail ids of 1.2e-8 each (m = 3.15e-3), so every emitted token is a draw from that
row (the bonus draw, which the recovered token shares in an engine that uses one sampler). The
tail-hit count of FAR_TAIL_SAMPLES = 6400 steps is Binomial(n, m) under any exact sampler: the row
`<rule>.far_tail[far-tail,V=262144]` is the exact two-sided binomial test (`stats.binomial_test`) of
it, and `<rule>.far_tail_ids[...]` the exact row (every id in [0, V)). It runs under the first stochastic
rule the engine claims (chain, else block): the draw it tests is the bonus draw both share, and one pass
moves 13 GB of rows.

Power (at the default size; `ctx.large_scale` < 1 scales n down, and the row's detail then states the
p-value a never-drawn tail would get): n m = 20.1 expected hits; a tail never drawn (0 hits) has p-value ~4e-9, rejected at any
Bonferroni level above it (the audit's ~200 rows at alpha 1e-3 give ~5e-6). The mechanisms it is
built for: float32 Exp(1) race noise bottoms out at -log(1 - 2**-24) = 6e-8, so a tail id (1.2e-8)
beats a head id only when that head id's own noise exceeds ~5: 1.1e-4 tail hits a step instead of
3.15e-3 (vLLM PRs #43150, #45996); a float32 cumulative sum stops growing after the head (a tail
increment is below half an ulp of 0.997), so the tail is never drawn. The row's stated
`min_detectable_tv` is the smallest |rate - m| it detects with power 0.99 at its level.

Decisive audits (`--stop decisive`): the draws come in chunks of FAR_TAIL_CHUNK and stop as soon as the
row's rate e-process (`battery.decisive`: level `ctx.check_level` / 1, mixture tuned for the planned
n, `data["n_target"]`) rejects; an exact sampler still draws all of them. The chunks are whole verify
batches, so the draws are the fixed audit's first ones.

Budget (`--samples`): 6400 draws x large_scale; --samples unused.
"""

from __future__ import annotations

import math

import numpy as np

from specverify import stats
from specverify.reference import rules

from ..battery import large_problems as lp
from ..battery.base import FAIL, PASS, CheckResult, Timer
from .large_vocab import STOCHASTIC, ids_row, sample

FAR_TAIL_CHUNK = 800        # draws between looks in a decisive audit (25 batches of 32 rows)


def draw(engine, method, problem, planned: int, rng, ctx, m: float) -> np.ndarray:
    """The far-tail draws: all `planned` at once in a fixed audit; in a decisive one, chunk by chunk
    until the row's e-process rejects (module docstring) or the plan is drawn."""
    if ctx.check_level is None:
        return sample(engine, method, problem, planned, rng, ctx)
    process = stats.RateEProcess(m, "two", n_target=planned, alpha=ctx.check_level, power=ctx.power)
    threshold = math.log(1.0 / ctx.check_level)
    chunks, drawn = [], 0
    while drawn < planned:
        chunk = sample(engine, method, problem, min(FAR_TAIL_CHUNK, planned - drawn), rng, ctx)
        chunks.append(chunk)
        drawn += chunk.shape[0]
        if ((chunk < -1) | (chunk >= problem.vocab_size)).any():
            break                                   # the exact row fails on it: no need to draw on
        if process.update(int((chunk[:, 0] >= lp.HEAD_TOKENS).sum()), chunk.shape[0]).max_log_e >= threshold:
            break
    return np.concatenate(chunks)


def run(engine, ctx) -> list[CheckResult]:
    caps = set(getattr(engine, "capabilities", ()))
    problem = lp.far_tail()
    m = lp.tail_mass(problem)
    rows = []
    # one rule: the tail is drawn by the bonus draw, which the rules share; 13 GB of rows a pass
    for rule in [r for r in rules.claimed(caps) if r.name in STOCHASTIC][:1]:
        if lp.too_large(problem.vocab_size, ctx):
            rows.append(lp.not_run(f"{rule.name}.far_tail[{problem.name}]", problem.vocab_size, ctx.large_max_vocab))
            continue
        planned = lp.scaled(lp.FAR_TAIL_SAMPLES, ctx.large_scale)
        with Timer() as t:
            out = draw(engine, rule.method, problem, planned, ctx.rng("far_tail", rule.name), ctx, m)
        n = out.shape[0]
        ids = ids_row(f"{rule.name}.far_tail_ids[{problem.name}]", out, problem.laws, problem.vocab_size, t.seconds)
        rows.append(ids)
        if ids.verdict == FAIL:
            continue
        hits = int((out[:, 0] >= lp.HEAD_TOKENS).sum())
        res = stats.binomial_test(hits, n, m, alpha=ctx.alpha, power=ctx.power)
        never = stats.binomial_test(0, n, m).p_value
        rows.append(CheckResult(
            f"{rule.name}.far_tail[{problem.name}]", PASS, statistic=res.statistic, p_value=res.p_value, dof=1, n=n,
            seconds=t.seconds,
            detail=f"{hits} of {n} tokens in the tail of {problem.vocab_size - lp.HEAD_TOKENS} ids of "
                   f"{lp.TAIL_PROB:g} each; expected {n * m:.1f} (rate {m:.3g}); a tail never drawn has p = {never:.1g}",
            data={"tail_hits": hits, "tail_mass": m, "expected_hits": n * m, "p_value_if_never_drawn": never,
                  "n_target": planned},
            power_fn=lambda level, n=n, k=hits: stats.binomial_test(k, n, m, alpha=level, power=ctx.power).min_detectable_diff))
    ctx.state.buffers.pop("_large_vocab_rows", None)    # the row buffer is not kept past the check
    return rows
