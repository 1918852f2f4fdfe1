"""Acceptance rate vs 1 - TV(p, q): the first draft of a one-step problem is accepted with probability
exactly alpha = sum_x min(p_0(x), q_0(x)) = 1 - TV(p_0, q_0) under the exact chain rule (alpha =
p_0(x) for a deterministic draft x). Exact binomial test of the observed count.

Observed acceptance of the first draft: the step emits at least two tokens (under the chain rule a
rejection ends the step after one token, an acceptance never does), so no coin access is needed.

Catches: a wrong acceptance ratio (threshold tests, top-k membership, lossy thresholds, q
mis-normalised) and rules that are exact in law but accept less often than they should (the
sampler-match rule): the acceptance rate is the speed of speculative decoding, and 1 - TV is its
ceiling for a token-wise verifier.

Power: `min_detectable_tv` of these rows is the binomial test's smallest detectable |rate - alpha|
at power 0.99 and the row's Bonferroni level.

Budget (`--samples`): samples one-step draws per (rule, problem), shared by marginal, joint and acceptance.
"""

from __future__ import annotations

import numpy as np

from specverify import stats

from ..battery import onestep
from ..battery.base import PASS, CheckResult


def alpha_first(problem) -> float:
    """The exact acceptance probability of the first draft."""
    p0 = problem.target[0]
    if problem.deterministic:
        return float(p0[problem.draft_tokens_fixed[0]])
    return float(np.minimum(p0, problem.draft[0]).sum())


def run(engine, ctx) -> list[CheckResult]:
    rows = []
    for s in onestep.collect(engine, ctx):
        if s.rule != "chain" or s.drafts is None:
            continue
        alpha = alpha_first(s.problem)
        n = int(s.samples.shape[0])
        accepted = int(((s.samples >= 0).sum(axis=1) >= 2).sum())
        res = stats.binomial_test(accepted, n, alpha, alpha=ctx.alpha, power=ctx.power)
        rows.append(CheckResult(
            f"chain.acceptance[{s.problem.name}]", PASS, statistic=res.statistic, p_value=res.p_value, dof=1, n=n,
            seconds=s.seconds, detail=f"first draft accepted {accepted}/{n} = {res.statistic:.4f}, exact 1 - TV = {alpha:.4f}",
            data={"accepted": accepted, "alpha": alpha},
            power_fn=lambda level, n=n, k=accepted, a=alpha: stats.binomial_test(k, n, a, alpha=level, power=ctx.power).min_detectable_diff))
    return rows
