"""The model classes of the state mutants (`zoo.state`), apart so that importing the zoo needs no torch:
our engine's exact sliding-window and hybrid models and, for each mutant, the one class it changes."""

from __future__ import annotations

import numpy as np

from specverify.engine.hybrid import HybridCache, HybridLlama
from specverify.engine.sliding import SlidingLlama

from .our_engine import PlainDecodeRing

__all__ = ["SlidingLlama", "HybridLlama", "PlainDecodeRing", "SingleTokenVerify", "StateNotRolledBackModel",
           "FirstCheckpointModel"]


class SingleTokenVerify(SlidingLlama):
    """A verify chunk on a warm cache goes down the single-token (decode) path: each query reads every
    earlier key from the ring, as a decode step does, but the chunk's earlier positions are not in the
    ring yet (a step writes after it reads), so queries after the chunk's first read stale slots. A
    prefill (cold cache) takes the chunk path and is right."""

    check_chunks = True

    @staticmethod
    def _from_step(keys: np.ndarray, pos: np.ndarray, start: np.ndarray) -> np.ndarray:
        warm = (start > 0)[:, None]
        return np.where(warm, keys == pos[:, None], keys >= start[:, None])


class KeepStateCache(HybridCache):
    """Rollback sets num_computed back and leaves the recurrent state as the verify pass left it."""

    def rollback(self, seq, num_valid: int) -> None:
        seq.num_computed = min(seq.num_computed, num_valid)


class StateNotRolledBackModel(HybridLlama):
    """The hybrid model over `KeepStateCache` (mutant 40)."""

    cache_class = KeepStateCache


class FirstCheckpointCache(HybridCache):
    """Rollback restores the checkpoint of the step's first position instead of the last accepted one."""

    def rollback(self, seq, num_valid: int) -> None:
        if num_valid < seq.num_computed:
            ring = seq.block_ids[0]
            self.restore(ring, int(self.first[ring]))
        seq.num_computed = min(seq.num_computed, num_valid)


class FirstCheckpointModel(HybridLlama):
    """The hybrid model over `FirstCheckpointCache` (mutant 41)."""

    cache_class = FirstCheckpointCache
