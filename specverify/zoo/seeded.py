"""Mutants of seeded mode: how each request's coins come out of its own random stream.

Exact seeded mode (`reference.vector.VectorSampler.seeded_coins`): request b draws from its own
counter-based stream, continued across calls, exactly k_b + 1 values when it has k_b drafts and none
when it is greedy, so its tokens depend on its own seed and calls alone. With injected coins these mutants are
exact; only the seeded checks (`reproducibility`, `rng_discipline`) can see them.
"""

from __future__ import annotations

import numpy as np

from specverify.reference.batch import Coins
from specverify.reference.vector import VectorSampler, stream_uniforms

from .registry import mutant


@mutant(11, "rng-consumed-for-zero-draft", targets=("rng_discipline",))
class RngConsumedForZeroDraft(VectorSampler):
    """In seeded mode every request of a speculative batch draws a [max_spec_len] row of acceptance
    uniforms from its generator, zero-draft requests included, so a request's stream -- and every
    later token of it -- depends on what its neighbours drafted. vLLM guards against exactly this:
    "Do not generate random numbers for requests with no draft tokens. This can be important for
    reproducibility." (vllm/v1/sample/rejection_sampler.py, generate_uniform_probs). With injected
    coins there is nothing to consume, so only the seeded checks can see it."""

    def seeded_coins(self, batch, seeds):
        k = batch.num_draft_tokens
        width = batch.max_spec_len
        counts = np.where(batch.greedy, 0, width + 1)            # the bug: width, not k_b
        u = self.streams.take(seeds, counts)
        block = np.zeros((batch.batch_size, width + 1))
        block[~batch.greedy] = u.reshape(-1, width + 1)
        accept = block[:, :width][np.arange(width)[None, :] < k[:, None]]     # the flat ragged layout
        return Coins(accept, block[np.arange(batch.batch_size), width])


@mutant(19, "seed-shared-stream", targets=("reproducibility", "rng_discipline"))
class SeedSharedStream(VectorSampler):
    """Seeded mode ignores the per-request seeds: one engine-wide stream feeds every request in batch
    order, so a request's tokens depend on its neighbours and on how many steps the engine has already
    taken (NVIDIA/TensorRT-LLM#17599, "every request in a batch shared one RNG stream"; vLLM
    vllm-project/vllm#6038, "Speculative decoding does not respect per-request seed")."""

    def __init__(self):
        super().__init__()
        self.position = 0

    def seeded_coins(self, batch, seeds):
        n_acc = int(batch.num_draft_tokens.sum())
        u = stream_uniforms(np.zeros(n_acc + batch.batch_size, np.int64),
                            self.position + np.arange(n_acc + batch.batch_size))
        self.position += u.size
        return Coins(u[:n_acc], u[n_acc:])


@mutant(53, "seeded-coin-rounded-to-one", targets=("rare_event",))
class SeededCoinRoundedToOne(VectorSampler):
    """The coin-endpoint class of mutant 8 (coin-one-past-cdf: SGLang's seeded path cast its coins to
    float32, which rounds the largest to exactly 1.0, and a 1.0 coin walks past the last CDF bucket) in
    the engine's *own* generator, where injected coins cannot reach it: each seeded request's final coin
    is rounded to a grid of 1 / FINAL_STEPS, so u >= 1 - 1 / (2 FINAL_STEPS) becomes exactly 1.0, and the
    draw clamps a walk past the end to id V - 1 whatever its probability. With injected coins (all below
    1) it is exact; only the rare_event check, drawing seeded requests, sees it. Planted here at a rate
    the zoo can afford (2e-3: about 14 events expected in the 6,905 draws of --rare-rate 1e-3);
    tests/plugins/rare_endpoint.py plants the same bug at 1e-5."""

    FINAL_STEPS = 250

    def seeded_coins(self, batch, seeds):
        coins = super().seeded_coins(batch, seeds)
        return Coins(coins.accept, np.round(coins.final * self.FINAL_STEPS) / self.FINAL_STEPS)

    def draw(self, w, coin):
        cdf = np.cumsum(w, axis=1)
        token = (cdf <= (np.asarray(coin) * cdf[:, -1])[:, None]).sum(axis=1)
        return np.minimum(token, w.shape[1] - 1)
