"""Marginal chi-squared per position: the token emitted at position i, among the steps that reach
position i, against its exact law (for the chain and tree rules: the target row p_i itself).

Catches: threshold tests on p, top-k membership tests, resampling from p instead of the residual,
a residual that is not normalised, lossy acceptance knobs. A token the exact law gives probability 0
is an exact failure, whatever the statistics say.

Budget (`--samples`): samples one-step draws per (rule, problem), shared by marginal, joint and acceptance.
"""

from __future__ import annotations

import numpy as np

from specverify import stats

from ..battery import onestep
from ..battery.base import FAIL, PASS, SKIP, CheckResult

MIN_STATISTICAL_N = 200   # fewer samples at a position: only the exact (impossible-token) check, and the
                          # row is inconclusive (SKIP, listed under not_covered): it tested no law


def gof(name: str, observed_tokens: np.ndarray, expected: np.ndarray, seconds: float, ctx) -> CheckResult:
    """Pearson chi-squared of observed token ids against the exact row `expected` [V]."""
    n = int(observed_tokens.size)
    support = np.flatnonzero(expected > 0)
    try:
        counts = stats.observed_counts(observed_tokens, support)
    except stats.ImpossibleObservation as exc:
        bad = np.setdiff1d(np.unique(observed_tokens), support)
        k = int(np.isin(observed_tokens, bad).sum())
        return CheckResult(name, FAIL, n=n, exact=True, seconds=seconds,
                           detail=f"emitted token(s) {bad[:5].tolist()} of exact probability 0 ({k} of {n} samples)",
                           data={"impossible_tokens": bad[:20].tolist(), "impossible_count": k, "why": str(exc)})
    if support.size < 2:
        return CheckResult(name, PASS, n=n, exact=True, seconds=seconds,
                           detail=f"every one of {n} tokens is the only possible one ({int(support[0])})")
    if n < MIN_STATISTICAL_N:
        return CheckResult(name, SKIP, n=n, exact=True, seconds=seconds,
                           detail=f"{name} inconclusive: only {n} samples reach this position (a law test needs "
                                  f"{MIN_STATISTICAL_N}); no impossible token, law not tested",
                           data={"not_covered": [name], "inconclusive": True})
    res = stats.pearson(counts, expected[support], alpha=ctx.alpha, min_expected=ctx.min_expected)
    return CheckResult(name, PASS, statistic=res.statistic, p_value=res.p_value, dof=res.dof, n=n, seconds=seconds,
                       detail=f"{res.cells} cells, {res.p_value_method} p-value",
                       data={"cells": support.tolist(), "observed": counts.tolist(),
                             "expected": (expected[support] * n).tolist()})


def run(engine, ctx) -> list[CheckResult]:
    rows = []
    for s in onestep.collect(engine, ctx):
        lengths = (s.samples >= 0).sum(axis=1)
        for pos in range(s.samples.shape[1]):
            reached = lengths > pos
            if not reached.any():
                continue
            name = f"{s.rule}.marginal[{s.problem.name},pos={pos}]"
            rows.append(gof(name, s.samples[reached, pos], s.law.marginal(pos), s.seconds, ctx))
    return rows
