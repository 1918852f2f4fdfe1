"""Mutants of greedy verification: the argmax and its tie-break.

The exact greedy rule keeps a draft iff it is the target's argmax, the lowest index among tied maxima
(`reference.vector.VectorSampler.argmax`), so that greedy speculation is token-identical to plain
greedy decoding.
"""

from __future__ import annotations

import numpy as np

from specverify.reference.vector import VectorSampler

from .registry import mutant


@mutant(13, "argmax-tie-highest", targets=("greedy",))
class ArgmaxTieHighest(VectorSampler):
    """Greedy verification takes the highest index among tied maxima, where torch.argmax (and the
    plain decode path it is diffed against) takes the lowest: a greedy speculative run is then not
    token-identical to plain greedy decoding (the chapter's "argmax ties" condition)."""

    def argmax(self, rows):
        return rows.shape[1] - 1 - np.argmax(rows[:, ::-1], axis=1)
