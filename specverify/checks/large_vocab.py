"""The verify rules at real vocabulary sizes: tile edges, an all-zero last tile, all-zero residuals,
dense rows (problems: `large_problems`).

For every stochastic rule the engine claims (chain through `verify`, block through `verify_block`),
each sparse and zero-residual problem at V in `large_problems.VOCABS` and each dense problem at V in
`DENSE_VOCABS` is sampled (seeded per rule and problem; samples sized from V by
`large_problems.samples_for`: the first rule claimed gets PROBLEM_BYTES of rows a problem, DENSE_BYTES
a dense one, the second SECOND_BYTES; times `ctx.large_scale`, 1 unless an engine's findings plan
sizes it down for the Triton interpreter; problems above `ctx.large_max_vocab` are SKIP rows listed
under `not_covered`) and judged by

    <rule>.large_vocab_ids[<problem>]          exact: every emitted id is in [0, V), position 0 is
                                               never empty, and every id is in the support of its
                                               position's law (an id >= V is a FAIL row here, not an
                                               adapter error)
    <rule>.large_vocab[<problem>,pos=<i>]      Pearson chi-squared of the tokens at position i against
                                               the exact law: over the support cells (sparse,
                                               zero-residual), over contiguous id ranges of equal
                                               mass for the dense rows (every entry > 0: at most
                                               DENSE_POOLS pools, each expected >= ctx.min_expected)

An adapter that raises on one of these problems (valid rows: a zero-residual row is a distribution) gets
that problem's ids row as a FAIL naming what it raised, and the other problems still run; a hang or a
dead adapter process ends the audit as everywhere else.

And, when the engine claims greedy, `greedy.large_vocab_ids[<problem>]`: the exact argmax path (lowest
id on ties) of every sparse problem. An adapter with `row_dtype = "float32"` samples from its rows
rounded to float32: the pooled and support-cell laws move by ~1e-7, far below these rows' power.

Catches: an id >= V or a padded slot returned from the last partial tile (vLLM GHSA-8wr5-jm2h-8r4f,
PR #44744), a missing fallback when the residual is all zero, off-by-one tile edges (a token at a
multiple of the tile dropped or duplicated), laws biased only at scale.

Budget (`--samples`): samples sized from the vocabulary (bytes of rows per problem) x large_scale; --samples unused.
"""

from __future__ import annotations

import numpy as np

from specverify import stats
from specverify.errors import AdapterError
from specverify.reference import rules
from specverify.reference.batch import Coins

from ..battery import harness, large_problems as lp
from ..battery.base import FAIL, OUTPUT_LAW, PASS, RULE_LAW, CheckResult, Timer
from .marginal import gof

DENSE_POOLS = 64
STOCHASTIC = ("chain", "block")


def problems_of(ctx) -> list[lp.LargeProblem]:
    """The sparse, zero-residual and dense problems of this audit (seeded by the audit seed)."""
    out = []
    for v in lp.VOCABS:
        out.append(lp.sparse(ctx.rng("large_vocab", "sparse", v), v))
        out.append(lp.zero_residual(ctx.rng("large_vocab", "zero-residual", v), v))
    for v in lp.DENSE_VOCABS:
        out.append(lp.dense(ctx.rng("large_vocab", "dense", v), v))
    return out


def sample(engine, method: str, problem: lp.LargeProblem, n: int, rng, ctx, greedy: bool = False) -> np.ndarray:
    """n one-step samples of `problem` through engine.<method>: int64 [n, kappa + 1] as returned (ids
    not range-checked). The rows of a batch are built once and reused by every batch."""
    k, v = problem.kappa, problem.vocab_size
    m = min(n, lp.requests_per_batch(problem))
    target, draft = replicated_rows(problem, m, ctx, engine)
    out = np.empty((n, k + 1), np.int64)
    for s in range(0, n, m):
        b = min(m, n - s)
        drafts = problem.sample_drafts(b, rng)
        batch = harness.trusted_batch(drafts.reshape(-1), np.full(b, k, np.int64), target[:b * (k + 1)],
                                      draft[:b * k], greedy=np.full(b, greedy))
        coins = Coins(rng.random(b * k), rng.random(b))
        out[s:s + b] = harness.returned_ids(engine, method, batch, coins, ctx, f"large vocab {problem.name}")
    return out


def replicated_rows(problem: lp.LargeProblem, m: int, ctx, engine=None):
    """(target [m * (kappa + 1), V], draft [m * kappa, V]): m requests' copies of the problem's rows, in
    one buffer of at least BATCH_BYTES kept on the context and shared with the adapter's process
    (`harness.replicated_rows`: fresh allocations of 64 MiB a problem cost more than the verify itself,
    and a copy of them a call doubled the real-vocabulary rows' time through a worker)."""
    return harness.replicated_rows(engine, problem.target, problem.draft, m, ctx, "_large_vocab_rows",
                                   min_size=lp.BATCH_BYTES // 8)


def id_violations(out: np.ndarray, laws, vocab: int) -> list[str]:
    """What is wrong, exactly, with the emitted ids: outside [0, V), nothing emitted, or of law 0."""
    bad = []
    outside = (out < -1) | (out >= vocab)
    if outside.any():
        r, c = np.argwhere(outside)[0]
        bad.append(f"{int(outside.sum())} id(s) outside [0, {vocab}), first {int(out[r, c])} at position {c}")
    if (out[:, 0] == -1).any():
        bad.append(f"{int((out[:, 0] == -1).sum())} step(s) emitted nothing")
    for i, law in enumerate(laws):
        tok = out[:, i]
        tok = tok[(tok >= 0) & (tok < vocab)]
        zero = tok[law[tok] <= 0]
        if zero.size:
            bad.append(f"{zero.size} id(s) of exact probability 0 at position {i}, e.g. {np.unique(zero)[:5].tolist()}")
    return bad


def ids_row(name: str, out: np.ndarray, laws, vocab: int, seconds: float) -> CheckResult:
    bad = id_violations(out, laws, vocab)
    n = int(out.shape[0])
    if bad:
        return CheckResult(name, FAIL, n=n, exact=True, seconds=seconds, detail="; ".join(bad),
                           data={"violations": bad})
    return CheckResult(name, PASS, n=n, exact=True, seconds=seconds,
                       detail=f"{n} steps: every id in [0, {vocab}) and in the support of its law")


def pooled_gof(name: str, tokens: np.ndarray, law: np.ndarray, seconds: float, ctx) -> CheckResult:
    """Chi-squared over contiguous id ranges of about equal mass (a dense law over V cells)."""
    n = int(tokens.size)
    pools = int(max(2, min(DENSE_POOLS, n // (2 * ctx.min_expected))))
    cdf = np.cumsum(law)
    cdf /= cdf[-1]
    edges = np.unique(np.searchsorted(cdf, np.arange(1, pools) / pools, side="left") + 1)
    edges = edges[(edges > 0) & (edges < law.size)]
    bounds = np.concatenate([[0], edges, [law.size]])
    mass = np.add.reduceat(law, bounds[:-1])
    counts = np.bincount(np.searchsorted(edges, tokens, side="right"), minlength=mass.size)
    res = stats.pearson(counts, mass / mass.sum(), alpha=ctx.alpha, min_expected=ctx.min_expected)
    return CheckResult(name, PASS, statistic=res.statistic, p_value=res.p_value, dof=res.dof, n=n, seconds=seconds,
                       detail=f"{res.cells} pooled id ranges of {law.size}, {res.p_value_method} p-value",
                       data={"bounds": bounds.tolist(), "observed": counts.tolist(), "expected": (mass * n).tolist()})


def law_of_row(problem: lp.LargeProblem, position: int | None) -> str:
    """What a row of `problem` tests (`CheckResult.law`): the ids rows and every position of a problem
    whose draft is drawn from q_0 test the output law (the same for every exact verifier); position 0
    of a problem with a fixed draft (zero-residual) tests the chain rule's own law -- a draft not drawn
    from q_0 is emitted with probability min(1, p/q), which another exact rule (sample-match) need not
    match."""
    return RULE_LAW if position == 0 and problem.drafted is not None else OUTPUT_LAW


def judge(rule: str, problem: lp.LargeProblem, out: np.ndarray, seconds: float, ctx) -> list[CheckResult]:
    rows = [ids_row(f"{rule}.large_vocab_ids[{problem.name}]", out, problem.laws, problem.vocab_size, seconds)]
    rows[0].law = law_of_row(problem, None)
    if rows[0].verdict == FAIL:
        return rows
    for i, law in enumerate(problem.laws):
        tokens = out[out[:, i] >= 0, i]
        name = f"{rule}.large_vocab[{problem.name},pos={i}]"
        if problem.name.startswith("dense") and tokens.size >= 2 * ctx.min_expected:
            rows.append(pooled_gof(name, tokens, law, seconds, ctx))
        else:
            rows.append(gof(name, tokens, law, seconds, ctx))
        rows[-1].law = law_of_row(problem, i)
    return rows


def greedy_rows(engine, problems, ctx) -> list[CheckResult]:
    """The exact argmax path of the sparse problems (drafts: one at the argmax, one off it)."""
    rows = []
    for problem in problems:
        if not problem.name.startswith("sparse"):
            continue
        if lp.too_large(problem.vocab_size, ctx):
            rows.append(lp.not_run(f"greedy.large_vocab_ids[{problem.name}]", problem.vocab_size, ctx.large_max_vocab))
            continue
        with Timer() as t:
            top = int(np.argmax(problem.target[0]))
            off = int(np.flatnonzero(problem.target[0] == 0)[0])
            v = problem.vocab_size
            target = np.tile(problem.target, (2, 1))
            batch = harness.trusted_batch(np.array([top, off]), np.array([1, 1]), target, None, greedy=np.ones(2, bool))
            out = harness.returned_ids(engine, "verify", batch, Coins(np.zeros(2), np.zeros(2)), ctx,
                                       f"large vocab greedy {problem.name}")
            want = np.array([[top, int(np.argmax(problem.target[1]))], [top, -1]])
        name = f"greedy.large_vocab_ids[{problem.name}]"
        if (out != want).any():
            rows.append(CheckResult(name, FAIL, n=2, exact=True, seconds=t.seconds,
                                    detail=f"emitted {out.tolist()}, the exact argmax path is {want.tolist()} (V = {v})"))
        else:
            rows.append(CheckResult(name, PASS, n=2, exact=True, seconds=t.seconds,
                                    detail=f"the exact argmax path at V = {v}"))
    return rows


def run(engine, ctx) -> list[CheckResult]:
    caps = set(getattr(engine, "capabilities", ()))
    problems = problems_of(ctx)
    rows = []
    claimed = [r for r in rules.claimed(caps) if r.name in STOCHASTIC]
    for rule in claimed:
        for problem in problems:
            if lp.too_large(problem.vocab_size, ctx):
                rows.append(lp.not_run(f"{rule.name}.large_vocab_ids[{problem.name}]", problem.vocab_size,
                                       ctx.large_max_vocab))
                rows[-1].law = OUTPUT_LAW
                continue
            first = lp.DENSE_BYTES if problem.name.startswith("dense") else lp.PROBLEM_BYTES
            n = lp.scaled(lp.samples_for(problem, first if rule is claimed[0] else lp.SECOND_BYTES), ctx.large_scale)
            with Timer() as t:
                try:
                    out = sample(engine, rule.method, problem, n, ctx.draws("large_vocab", rule.name, problem.name), ctx)
                except AdapterError as exc:
                    if harness.adapter_lost(exc):
                        raise
                    out = str(exc).split(": raised ", 1)[-1]
            if isinstance(out, str):       # valid rows refused: a failure of this problem, the rest still run
                rows.append(CheckResult(f"{rule.name}.large_vocab_ids[{problem.name}]", FAIL, exact=True, law=OUTPUT_LAW,
                                        seconds=t.seconds, detail=f"the call raised on valid rows: {out[:200]}"))
                continue
            rows += judge(rule.name, problem, out, t.seconds, ctx)
    ctx.state.buffers.pop("_large_vocab_rows", None)    # the row buffer is not kept past the check
    if "greedy" in caps:
        for r in greedy_rows(engine, problems, ctx):
            r.law = OUTPUT_LAW
            rows.append(r)
    return rows
