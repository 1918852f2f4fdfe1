"""Mutants of the acceptance test: what decides whether a drafted token is kept.

The exact test is coin * q(x) < p(x) (`reference.vector.VectorSampler.accept`): a ratio of target to
draft probability at the drafted token, compared with a fresh coin. Each mutant here replaces it with
a rule that looks similar and is not (a threshold on p, a top-k membership, an inflated ratio, an
equality with a target draw).
"""

from __future__ import annotations

import numpy as np

from specverify.reference.vector import VectorSampler

from .registry import mutant


@mutant(1, "threshold-on-p", targets=("acceptance", "marginal", "identity"))
class ThresholdOnP(VectorSampler):
    """Accept a draft iff its target probability clears a fixed threshold (0.2), ignoring q and the
    coin. The chapter's first "load-bearing" rule: the test is the ratio p(x)/q(x) at the drafted
    token, "not a threshold on p"; Medusa-style typical acceptance (`lossy:typical`) is the shipped
    form of this class."""

    def accept(self, p_x, q_x, coin):
        return p_x >= 0.2


@mutant(2, "topk-membership", targets=("acceptance", "marginal", "identity"))
class TopKMembership(VectorSampler):
    """Accept a draft iff it is among the target's 2 most likely tokens, ignoring q and the coin: the
    chapter's first load-bearing rule says the test is the ratio p(x)/q(x), "not a top-k membership
    test"."""

    k = 2

    def accept_rows(self, p, q, x, coin):
        return (p > self.drafted_prob(p, x)[:, None]).sum(axis=1) < self.k


@mutant(9, "threshold_acc=0.5", targets=("acceptance", "marginal", "runs"))
class ThresholdAcc05(VectorSampler):
    """SGLang's `speculative_accept_threshold_acc = 0.5`: every acceptance probability is raised from
    min(1, p/q) to min(1, p/(0.5 q)) (python/sglang/srt/server_args.py; the CUDA tree sampler tests
    `coin <= prob_acc / threshold_acc`). A documented knob that voids exactness."""

    def accept(self, p_x, q_x, coin):
        return coin * q_x * 0.5 < p_x


@mutant(10, "threshold_single=0.3", targets=("acceptance", "marginal", "runs"))
class ThresholdSingle03(VectorSampler):
    """SGLang's `speculative_accept_threshold_single = 0.3`: a draft whose target probability is at
    least 0.3 is accepted outright (`target_prob_single >= threshold_single` in
    speculative_sampling.cuh). A documented knob that voids exactness."""

    def accept(self, p_x, q_x, coin):
        return (p_x >= 0.3) | (coin * q_x < p_x)


@mutant(18, "sampler-match", targets=("acceptance", "identity"))
class SamplerMatch(VectorSampler):
    """Accept a draft iff it equals a token drawn from the target with the position's coin, and emit
    that draw otherwise (ml-explore/mlx-swift-lm#459, lablup/mlxcel#902 and #992). Every emitted token
    is a fresh target draw, so the output stream is exact (mlxcel#992 measured this); what is wrong is
    the acceptance rate, sum_x p(x) q(x) instead of 1 - TV(p, q): a speed bug the acceptance check
    (and the one-step chunk law) sees and the multi-step joint law cannot -- the audit's verdict kind
    is "exact output law by another rule", not "biased".

    It verifies chains only, as the engines that ship it do: fed through the recursive tree walk
    (a fresh draw per sibling, then another for the recovered token) the rule would no longer be
    sample-match, and biased."""

    capabilities = {"chain", "greedy", "seeded"}

    def accept_rows(self, p, q, x, coin):
        return self.draw(p, coin) == x

    def residual(self, p, q):
        return p

    def residual_coin(self, accept_coin, final_coin):
        return accept_coin


@mutant(44, "q-float16-ratio", targets=("endpoints",))
class QFloat16Ratio(VectorSampler):
    """The drafts are drawn from q as given (float64 here), but the acceptance ratio reads q in another
    precision: float16, where a q below 6e-8 flushes to 0 and the draft is accepted unconditionally, and
    larger ones move by up to 2^-11 (DeepSpec #31 / PR #48: drafts sampled from bf16 logits, the ratio
    with fp32 q; lablup/mlxcel PR #992: q underflowing in f16). The q-precision rows
    (`endpoints`, `chain.q_precision[...]`: acceptance must be min(1, p/q) for the q given) catch it."""

    def accept(self, p_x, q_x, coin):
        q16 = np.asarray(q_x, np.float64).astype(np.float16).astype(np.float64)
        return coin * q16 < p_x
