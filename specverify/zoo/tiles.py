"""Mutants of a draw tiled over the vocabulary: padding past V that is not masked.

Kernels split the vocabulary into tiles (vLLM's recovered-token kernel: 8192 ids a tile); when V is not
a multiple of the tile, the last tile runs past V, and those slots must lose every comparison. Each
mutant here is exact on rows with positive mass where the kernel looks, and returns a padded slot
(an id >= V) where the tile's valid entries give it nothing to prefer: the `large_vocab`
zero-residual rows and the `hostile` NaN rows catch them as exact failures.
"""

from __future__ import annotations

import numpy as np

from specverify.reference.vector import VectorSampler

from .registry import mutant

TILE = 8192


def padded_vocab(vocab: int) -> int:
    """The vocabulary rounded up to whole tiles."""
    return -(-vocab // TILE) * TILE


@mutant(36, "zero-tile-padding-wins", targets=("large_vocab",))
class ZeroTilePaddingWins(VectorSampler):
    """The recovered token is a tiled argmax over the residual max(0, p - q) with the out-of-vocabulary
    slots scored 0 instead of -inf and no fallback to p: when every valid entry is 0, the padding ties
    them and wins the tie-break, returning the last padded slot (an id >= V when V is not a multiple of
    8192, V - 1 otherwise). vLLM GHSA-8wr5-jm2h-8r4f, fixed by vllm-project/vllm#44744 ("the
    out-of-range masked positions (score 0) could win the tl.max tie-break, producing recovered_id >=
    vocab_size")."""

    def residual(self, p, q):
        return np.maximum(p - q, 0.0)

    def draw_residual(self, w, coin):
        token = self.draw(w, coin)
        empty = ~(w > 0).any(axis=1)
        token[empty] = padded_vocab(w.shape[1]) - 1
        return token


@mutant(37, "nan-row-past-vocab", targets=("hostile",))
class NanRowPastVocab(VectorSampler):
    """A row holding NaN: every comparison with NaN is false, so no valid slot ever becomes the running
    maximum and the first masked slot past the vocabulary is returned: id V (vLLM #53029, a NaN row gave
    an out-of-range token id; the recovered-id class of GHSA-8wr5-jm2h-8r4f)."""

    def draw(self, w, coin):
        token = super().draw(w, coin)
        token[np.isnan(w).any(axis=1)] = w.shape[1]
        return token
