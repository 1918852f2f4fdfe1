"""Joint chi-squared over the whole emitted sequence of one step (its length and every token)
against the exact law of the rule.

Catches what a per-position test cannot: keeping the tail after a rejection, a bonus token drawn
from the wrong row, a length distribution that is off while each position looks right.

Budget (`--samples`): samples one-step draws per (rule, problem), shared by marginal, joint and acceptance.
"""

from __future__ import annotations

import numpy as np

from specverify import stats
from specverify.reference.laws import encode

from ..battery import onestep
from ..battery.base import FAIL, PASS, CheckResult
from specverify.reference.batch import PAD


def sequence_gof(name: str, samples: np.ndarray, law, seconds: float, ctx) -> CheckResult:
    n = samples.shape[0]
    codes = encode(samples, law.vocab_size)
    support = law.codes()
    try:
        counts = stats.observed_counts(codes, support)
    except stats.ImpossibleObservation:
        bad = ~np.isin(codes, support)
        first = samples[np.flatnonzero(bad)[0]]
        return CheckResult(name, FAIL, n=n, exact=True, seconds=seconds,
                           detail=f"emitted sequence {first[first != PAD].tolist()} has exact probability 0 "
                                  f"({int(bad.sum())} of {n} samples)",
                           data={"impossible_example": first[first != PAD].tolist(), "impossible_count": int(bad.sum())})
    res = stats.pearson(counts, law.probs, alpha=ctx.alpha, min_expected=ctx.min_expected)
    return CheckResult(name, PASS, statistic=res.statistic, p_value=res.p_value, dof=res.dof, n=n, seconds=seconds,
                       detail=f"{len(law.probs)} sequences in {res.cells} cells, {res.p_value_method} p-value",
                       data={"observed": counts.tolist(), "expected": (law.probs * n).tolist(),
                             "sequences": [list(s) for s in law.sequences]})


def run(engine, ctx) -> list[CheckResult]:
    return [sequence_gof(f"{s.rule}.joint[{s.problem.name}]", s.samples, s.law, s.seconds, ctx)
            for s in onestep.collect(engine, ctx)]
