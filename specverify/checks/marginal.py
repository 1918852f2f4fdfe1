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
from specverify.reference import rules

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


ACCEPTED, RECOVERED, BONUS = "accepted draft", "recovered token", "bonus token"
"""The role of the token at a position: a draft the step accepted (the step goes on), the token drawn
at the first rejection (the step ends there, before its last position), or the bonus token (the step
ends at its last position, every draft accepted)."""


def roles(tokens, ends, law, pos: int, last: int) -> dict:
    """The token at `pos` split by its role (`ACCEPTED` where the step goes on, `RECOVERED` / `BONUS`
    where it ends: `last` is the step's last position): {"names": [role, role], "cells": ids,
    "observed": [[count per cell] per role], "expected": [[count per cell] per role]} -- the same n
    samples as the row's, the exact law of each (token, role) from the step's sequence law."""
    n = int(tokens.size)
    end_role = BONUS if pos == last else RECOVERED
    joint = {}                                      # (token, ends here) -> probability, given pos reached
    reach = law.reach(pos)
    for seq, p in zip(law.sequences, law.probs):
        if len(seq) > pos and p > 0:
            key = (int(seq[pos]), len(seq) == pos + 1)
            joint[key] = joint.get(key, 0.0) + float(p) / reach
    cells = sorted({int(t) for t in np.unique(tokens)} | {k[0] for k in joint})
    observed, expected = [], []
    for ending in (False, True):
        picked = tokens[ends == ending]
        ids, counts = np.unique(picked, return_counts=True)
        seen = dict(zip(ids.tolist(), counts.tolist()))
        observed.append([int(seen.get(c, 0)) for c in cells])
        expected.append([n * joint.get((c, ending), 0.0) for c in cells])
    return {"names": [ACCEPTED, end_role], "cells": cells, "observed": observed, "expected": expected}


def run(engine, ctx) -> list[CheckResult]:
    rows = []
    for s in onestep.collect(engine, ctx):
        lengths = (s.samples >= 0).sum(axis=1)
        last = s.samples.shape[1] - 1
        for pos in range(s.samples.shape[1]):
            reached = lengths > pos
            if not reached.any():
                continue
            name = f"{s.rule}.marginal[{s.problem.name},pos={pos}]"
            row = gof(name, s.samples[reached, pos], s.law.marginal(pos), s.seconds, ctx)
            if not rules.RULES[s.rule].tree:          # a tree step's positions are not one chain's
                row.data["roles"] = roles(s.samples[reached, pos], lengths[reached] == pos + 1, s.law, pos, last)
            rows.append(row)
    return rows
