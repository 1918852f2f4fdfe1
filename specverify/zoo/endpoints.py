"""Mutants at the edges of the verify contract: coins at the ends of [0, 1), and padded draft ids.

An exact rule gives a token of target probability 0 no chance, whatever coin in [0, 1) it is handed
(0.0 and 1 - 2**-53 included), and never accepts a padded draft (-1). Away from these edges each
mutant here follows the exact law, so the endpoint rows catch it (and the law, for padded drafts).
"""

from __future__ import annotations

import numpy as np

from specverify.reference.vector import VectorSampler

from .registry import mutant


@mutant(7, "coin-ge-zero", targets=("endpoints",))
class CoinGeZero(VectorSampler):
    """vLLM's rejection kernel compares `target_prob / draft_prob >= uniform_prob`
    (vllm/v1/sample/rejection_sampler.py): non-strict, so a coin of exactly 0.0 accepts a drafted token
    whose target probability is 0. The exact test is strict, coin * q(x) < p(x)."""

    def accept(self, p_x, q_x, coin):
        with np.errstate(divide="ignore", invalid="ignore"):
            return (q_x > 0) & (p_x / q_x >= coin)


@mutant(8, "coin-one-past-cdf", targets=("endpoints",))
class CoinOnePastCdf(VectorSampler):
    """SGLang's seeded path casts its coins to float32, which rounds the largest ones to exactly 1.0;
    "a 1.0 coin walks past the last CDF bucket and can return a zero-probability token" (SGLang's own
    comment on the fix, which clamps coins to 1 - 2**-24, quoted in the chapter). Here: float32 coins,
    and a walk past the end returns token V - 1 instead of the last token of positive weight, so the
    in-contract coin 1 - 2**-53 (1.0 in float32) emits a token of probability 0."""

    def draw(self, w, coin):
        coin = np.asarray(coin, np.float32).astype(np.float64)
        cdf = np.cumsum(w, axis=1)
        token = (cdf <= (coin * cdf[:, -1])[:, None]).sum(axis=1)
        return np.minimum(token, w.shape[1] - 1)


@mutant(16, "padded-draft-indexed", targets=("endpoints", "marginal"))
class PaddedDraftIndexed(VectorSampler):
    """A padded draft id (-1, grammar-invalidated or placeholder drafts) is used as an index: Python /
    torch negative indexing reads the last vocabulary entry, the draft can be "accepted" and -1 is
    emitted as a token. Fixed in vllm-project/vllm#46533 (reject placeholder draft tokens),
    vllm-project/vllm-ascend#10043 and flashinfer-ai/flashinfer#3551."""

    def is_padded(self, x):
        return np.zeros(x.shape, bool)

    def drafted_prob(self, rows, x):
        return rows[np.arange(x.size), x]          # x = -1 reads the last column
