"""Mutants of tensor parallelism: what makes the ranks of one engine emit different tokens.

The exact sampler (`reference.vector.VectorSampler`) on every rank of a torch.distributed group emits
the same tokens on every rank for the same inputs. On one process (no group, or world size 1) these
mutants are exact; only `rank_agreement`, which starts the ranks, can see them.
"""

from __future__ import annotations

import numpy as np

from specverify.reference.vector import VectorSampler

from .registry import mutant

CHUNKS_PER_RANK = 4     # the partial sums each rank's shard of the lm head contributes


def rank_and_world() -> tuple:
    """(rank, world size) of the default torch.distributed group, (0, 1) without one."""
    try:
        import torch.distributed as dist
    except ImportError:          # pragma: no cover - torch is a dependency of the rank harness
        return 0, 1
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


@mutant(32, "rank-own-generator", targets=("rank_agreement",))
class RankOwnGenerator(VectorSampler):
    """Every rank draws its coins from its own generator, seeded with the request seed and the rank,
    never synchronised: with temperature > 0 the ranks accept and sample different tokens and feed
    different histories into the next step's collectives (openai/gpt-oss#270: each rank calls
    torch.multinomial independently, fixed by sampling on rank 0 and broadcasting, PR #285;
    huggingface/transformers#36634: "each rank will select a different new token randomly"; SGLang
    PR #3060 adds flags to sync token ids across TP ranks)."""

    def seeded_coins(self, batch, seeds):
        rank, _ = rank_and_world()
        return super().seeded_coins(batch, np.asarray(seeds, np.int64) ^ np.int64(rank * 0x9E3779B9))


@mutant(33, "rank-order-reduce", targets=("rank_agreement",))
class RankOrderReduce(VectorSampler):
    """The target row is the all-reduce of the ranks' partial logits (a row-parallel lm head), and each
    rank accumulates the partials in its own order -- starting with its own shard -- in float32 before
    the argmax: the rows differ in their last bits from rank to rank and a near tie is won by
    different tokens (vllm-project/vllm#2742: greedy TP=2 outputs differ until the custom all-reduce
    is disabled; marin-community/marin#7554: a destination-dependent reduce-scatter, ~1 ulp apart
    per rank; tenstorrent/tt-xla#5520: the cross-chip reduction flips near-tie argmaxes)."""

    def argmax(self, rows):
        rank, world = rank_and_world()
        if world == 1:
            return super().argmax(rows)
        with np.errstate(divide="ignore"):
            logits = np.log(rows)
        n = world * CHUNKS_PER_RANK
        weights = np.random.default_rng(n).dirichlet(np.ones(n))            # the same split on every rank
        parts = (logits[None, :, :] * weights[:, None, None]).astype(np.float32)
        total = np.zeros(rows.shape, np.float32)
        for j in range(n):                                                  # rank r starts at its own shard
            total += parts[(rank * CHUNKS_PER_RANK + j) % n]
        return np.argmax(total, axis=1)
