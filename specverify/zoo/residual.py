"""Mutants of the recovered token: the residual max(0, p - q), its coin and its draw.

On the first rejection the exact rule draws one token from the normalised residual with the final
coin (`reference.vector.VectorSampler.residual`, `.residual_coin`, `.draw_residual`, `.draw`). Each
mutant here gets one of those wrong: the row drawn from, its normalisation, the coin, or the draw
itself (which the bonus token shares).
"""

from __future__ import annotations

import numpy as np

from specverify.reference.vector import VectorSampler

from .registry import mutant


@mutant(3, "resample-from-p", targets=("marginal", "joint", "runs"))
class ResampleFromP(VectorSampler):
    """On rejection the recovered token is drawn from the target row p instead of the residual
    max(0, p - q): the chapter's second load-bearing rule ("you must resample from the residual
    max(0, p - q), not from p")."""

    def residual(self, p, q):
        return p


@mutant(4, "residual-not-normalised", targets=("marginal", "joint"))
class ResidualNotNormalised(VectorSampler):
    """The recovered-token draw walks the CDF of the unnormalised residual max(0, p - q) up to the bare
    coin instead of coin * Z (SGLang's two-pass sampler accumulates norm_sum and walks to
    coin_final * norm_sum; this drops the factor). Coins beyond Z fall off the end and return the last
    positive token."""

    def draw_residual(self, w, coin):
        return self.draw(w, coin / np.cumsum(w, axis=1)[:, -1])


@mutant(15, "coin-reused-for-residual", targets=("marginal", "joint"))
class CoinReusedForResidual(VectorSampler):
    """The recovered token reuses the acceptance coin of the rejected position instead of an
    independent one. Rejection means u >= h, so the resampling coin is U(h, 1), not U(0, 1): the
    acceptance rate is right but the recovered token is biased (vllm-project/vllm-ascend#16370, "Fix
    rejection resampling RNG coupling")."""

    def residual_coin(self, accept_coin, final_coin):
        return accept_coin


@mutant(17, "sample-is-argmax", targets=("marginal", "runs"))
class SampleIsArgmax(VectorSampler):
    """The speculative path's sampling helper builds the distribution and returns its argmax instead of
    drawing from it, so recovered and bonus tokens are greedy (EricLBuehler/mistral.rs#2424, "make
    speculative sampling actually sample")."""

    def draw(self, w, coin):
        return np.argmax(w, axis=1)
