"""The bug zoo: speculative samplers and engines with one real bug each (`specverify audit mutant:<name>`).

Every mutant is the exact implementation (`vector.VectorSampler` for samplers, `toyengine.SpecEngine`
for engines) with one primitive overridden; its docstring names the engine bug it models and where
that bug was seen. The audit must fail every one of them (`specverify zoo` shows which checks do).
Engine-level mutants declare only the "engine" capability: their sampler is exact, the bug is in the
loop around it (what is drafted, what the KV cache keeps, which rows are transformed).
"""

from __future__ import annotations

import numpy as np

from specverify.errors import InputError
from specverify.reference.batch import Coins
from specverify.reference.transforms import Transform

from .toyengine import SpecEngine
from .vector import VectorSampler, stream_uniforms


# ============================================================================ acceptance test

class ThresholdOnP(VectorSampler):
    """Accept a draft iff its target probability clears a fixed threshold (0.2), ignoring q and the
    coin. The chapter's first "load-bearing" rule: the test is the ratio p(x)/q(x) at the drafted
    token, "not a threshold on p"; Medusa-style typical acceptance (`lossy:typical`) is the shipped
    form of this class."""

    def accept(self, p_x, q_x, coin):
        return p_x >= 0.2


class TopKMembership(VectorSampler):
    """Accept a draft iff it is among the target's 2 most likely tokens, ignoring q and the coin: the
    chapter's first load-bearing rule says the test is the ratio p(x)/q(x), "not a top-k membership
    test"."""

    k = 2

    def accept_rows(self, p, q, x, coin):
        return (p > self.drafted_prob(p, x)[:, None]).sum(axis=1) < self.k


class CoinGeZero(VectorSampler):
    """vLLM's rejection kernel compares `target_prob / draft_prob >= uniform_prob`
    (vllm/v1/sample/rejection_sampler.py): non-strict, so a coin of exactly 0.0 accepts a drafted token
    whose target probability is 0. The exact test is strict, coin * q(x) < p(x)."""

    def accept(self, p_x, q_x, coin):
        with np.errstate(divide="ignore", invalid="ignore"):
            return (q_x > 0) & (p_x / q_x >= coin)


class ThresholdAcc05(VectorSampler):
    """SGLang's `speculative_accept_threshold_acc = 0.5`: every acceptance probability is raised from
    min(1, p/q) to min(1, p/(0.5 q)) (python/sglang/srt/server_args.py; the CUDA tree sampler tests
    `coin <= prob_acc / threshold_acc`). A documented knob that voids exactness."""

    def accept(self, p_x, q_x, coin):
        return coin * q_x * 0.5 < p_x


class ThresholdSingle03(VectorSampler):
    """SGLang's `speculative_accept_threshold_single = 0.3`: a draft whose target probability is at
    least 0.3 is accepted outright (`target_prob_single >= threshold_single` in
    speculative_sampling.cuh). A documented knob that voids exactness."""

    def accept(self, p_x, q_x, coin):
        return (p_x >= 0.3) | (coin * q_x < p_x)


class SamplerMatch(VectorSampler):
    """Accept a draft iff it equals a token drawn from the target with the position's coin, and emit
    that draw otherwise (ml-explore/mlx-swift-lm#459, lablup/mlxcel#902 and #992). Every emitted token
    is a fresh target draw, so the output stream is exact (mlxcel#992 measured this); what is wrong is
    the acceptance rate, sum_x p(x) q(x) instead of 1 - TV(p, q): a speed bug the acceptance check
    (and the one-step chunk law) sees and the multi-step joint law cannot."""

    def accept_rows(self, p, q, x, coin):
        return self.draw(p, coin) == x

    def residual(self, p, q):
        return p

    def residual_coin(self, accept_coin, final_coin):
        return accept_coin


class PaddedDraftIndexed(VectorSampler):
    """A padded draft id (-1, grammar-invalidated or placeholder drafts) is used as an index: Python /
    torch negative indexing reads the last vocabulary entry, the draft can be "accepted" and -1 is
    emitted as a token. Fixed in vllm-project/vllm#46533 (reject placeholder draft tokens),
    vllm-project/vllm-ascend#10043 and flashinfer-ai/flashinfer#3551."""

    def is_padded(self, x):
        return np.zeros(x.shape, bool)

    def drafted_prob(self, rows, x):
        return rows[np.arange(x.size), x]          # x = -1 reads the last column


# ============================================================================ recovered / bonus token

class ResampleFromP(VectorSampler):
    """On rejection the recovered token is drawn from the target row p instead of the residual
    max(0, p - q): the chapter's second load-bearing rule ("you must resample from the residual
    max(0, p - q), not from p")."""

    def residual(self, p, q):
        return p


class ResidualNotNormalised(VectorSampler):
    """The recovered-token draw walks the CDF of the unnormalised residual max(0, p - q) up to the bare
    coin instead of coin * Z (SGLang's two-pass sampler accumulates norm_sum and walks to
    coin_final * norm_sum; this drops the factor). Coins beyond Z fall off the end and return the last
    positive token."""

    def draw_residual(self, w, coin):
        return self.draw(w, coin / np.cumsum(w, axis=1)[:, -1])


class CoinReusedForResidual(VectorSampler):
    """The recovered token reuses the acceptance coin of the rejected position instead of an
    independent one. Rejection means u >= h, so the resampling coin is U(h, 1), not U(0, 1): the
    acceptance rate is right but the recovered token is biased (vllm-project/vllm-ascend#16370, "Fix
    rejection resampling RNG coupling")."""

    def residual_coin(self, accept_coin, final_coin):
        return accept_coin


class SampleIsArgmax(VectorSampler):
    """The speculative path's sampling helper builds the distribution and returns its argmax instead of
    drawing from it, so recovered and bonus tokens are greedy (EricLBuehler/mistral.rs#2424, "make
    speculative sampling actually sample")."""

    def draw(self, w, coin):
        return np.argmax(w, axis=1)


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


class KeepTail(VectorSampler):
    """After the first rejection the later drafts are still verified against target rows computed for
    a prefix that did not happen, and kept while they pass: the chapter's "single most common way a
    speculative implementation silently biases its output" (the tail must be discarded)."""

    keep_tail = True


class BonusFromWrongRow(VectorSampler):
    """The bonus token is drawn from row cu_num_draft_tokens[b] + b - 1 (an off-by-one between the
    cumulative draft counts and the cumulative sampled counts of the ragged layout, cf. vLLM's
    target_logits_indices / bonus_logits_indices split): for a request with drafts that is its last
    draft row, for a request without drafts the previous request's bonus row."""

    def bonus_rows(self, batch):
        return batch.target_row_start + batch.num_draft_tokens - 1


# ============================================================================ greedy

class ArgmaxTieHighest(VectorSampler):
    """Greedy verification takes the highest index among tied maxima, where torch.argmax (and the
    plain decode path it is diffed against) takes the lowest: a greedy speculative run is then not
    token-identical to plain greedy decoding (the chapter's "argmax ties" condition)."""

    def argmax(self, rows):
        return rows.shape[1] - 1 - np.argmax(rows[:, ::-1], axis=1)


# ============================================================================ seeded randomness

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


# ============================================================================ engine level

class TemperatureOnTargetOnly(SpecEngine):
    """Temperature is applied to the target's logits but not to the draft's (top-k/top-p to both).
    The drafts are still drawn from the rows handed to the verifier, so the output stays exact, but
    the draft no longer matches the target it was built for: acceptance drops (the chapter: "identical
    transforms of the distributions used for proposal and verification"). Only the identity-draft
    check (draft = target, acceptance must be 1) sees it."""

    def draft_transform(self, transform):
        return transform if transform.greedy else Transform(1.0, transform.top_k, transform.top_p)


class StaleKv(SpecEngine):
    """Rejected draft positions are not rolled back: the verify pass wrote K/V for all kappa drafts,
    and the next step's target attends over them (ml-explore/mlx-lm#1109: a non-trimmable cache keeps
    rejected drafts "in the recurrent state and corrupt[s] subsequent predictions"; the chapter's
    "Leave them in place and the next step's attention reads them"). Here the target's context after a
    step is old context + all kappa drafts + the last emitted token."""

    def target_segment(self, drafts, emitted):
        n_emit = (emitted >= 0).sum(axis=1)
        last = emitted[np.arange(emitted.shape[0]), n_emit - 1]
        return np.concatenate([drafts, last[:, None]], axis=1)


class DraftQUnprocessed(SpecEngine):
    """The drafts are drawn from the draft's processed distribution (top-k / top-p applied) but the
    verifier is handed the raw one, so q(x) in the acceptance ratio is not the law the draft was drawn
    from (huggingface/transformers#47932: "candidate generators return a q they did not sample from";
    deepseek-ai/DeepSpec#31 is the dtype variant)."""

    def verify_transform(self, draft_transform):
        return Transform(draft_transform.temperature)


class ArgmaxDraftSoftQ(SpecEngine):
    """The draft proposes its argmax (greedy drafting) but the verifier is given the draft's soft
    distribution q, as if the token had been sampled from it (jaymody/speculative-sampling#3;
    apple/ml-recurrent-drafter#6 for beam-search candidates). The accept ratio then uses a q the draft
    never sampled from and the output is biased; a deterministic draft must be verified with q one-hot."""

    def propose(self, q, u):
        return np.argmax(q, axis=1)


class DraftKvRewind(SpecEngine):
    """The draft's KV cache is rewound wrongly after verification, so the drafter's context falls
    behind the emitted sequence (lablup/mlxcel#994, fixed in #1002: the trim missed the last accepted
    draft, in the fully accepted case it "cannot reach at all"). Here the last accepted draft token of
    each step is missing from the draft's context. The output stays exact; acceptance drops, which
    only the identity-draft check sees."""

    def draft_segment(self, drafts, emitted):
        n_acc = (emitted >= 0).sum(axis=1) - 1
        seg = emitted.copy()
        rows = np.flatnonzero(n_acc > 0)
        seg[rows, n_acc[rows] - 1] = -1
        return seg


# ============================================================================ the registry

MUTANTS = {
    # the fourteen of DESIGN.md
    "threshold-on-p": ThresholdOnP,
    "topk-membership": TopKMembership,
    "resample-from-p": ResampleFromP,
    "residual-not-normalised": ResidualNotNormalised,
    "keep-tail": KeepTail,
    "bonus-from-wrong-row": BonusFromWrongRow,
    "coin-ge-zero": CoinGeZero,
    "coin-one-past-cdf": CoinOnePastCdf,
    "threshold_acc=0.5": ThresholdAcc05,
    "threshold_single=0.3": ThresholdSingle03,
    "rng-consumed-for-zero-draft": RngConsumedForZeroDraft,
    "temperature-on-target-only": TemperatureOnTargetOnly,
    "argmax-tie-highest": ArgmaxTieHighest,
    "stale-kv": StaleKv,
    # further bug classes from public engines' history
    "coin-reused-for-residual": CoinReusedForResidual,
    "padded-draft-indexed": PaddedDraftIndexed,
    "sample-is-argmax": SampleIsArgmax,
    "sampler-match": SamplerMatch,
    "seed-shared-stream": SeedSharedStream,
    "draft-q-unprocessed": DraftQUnprocessed,
    "argmax-draft-soft-q": ArgmaxDraftSoftQ,
    "draft-kv-rewind": DraftKvRewind,
}


# the checks each mutant is meant to be caught by (tests/test_battery_checks.py holds the battery to it;
# `specverify zoo` shows every check that catches it)
TARGETS = {
    "threshold-on-p": ("acceptance", "marginal", "identity"),
    "topk-membership": ("acceptance", "marginal", "identity"),
    "resample-from-p": ("marginal", "joint", "runs"),
    "residual-not-normalised": ("marginal", "joint"),
    "keep-tail": ("joint", "endpoints", "runs"),
    "bonus-from-wrong-row": ("marginal", "joint", "composition"),
    "coin-ge-zero": ("endpoints",),
    "coin-one-past-cdf": ("endpoints",),
    "threshold_acc=0.5": ("acceptance", "marginal", "runs"),
    "threshold_single=0.3": ("acceptance", "marginal", "runs"),
    "rng-consumed-for-zero-draft": ("rng_discipline",),
    "temperature-on-target-only": ("identity",),
    "argmax-tie-highest": ("greedy",),
    "stale-kv": ("runs",),
    "coin-reused-for-residual": ("marginal", "joint"),
    "padded-draft-indexed": ("endpoints", "marginal"),
    "sample-is-argmax": ("marginal", "runs"),
    "sampler-match": ("acceptance", "identity"),
    "seed-shared-stream": ("reproducibility", "rng_discipline"),
    "draft-q-unprocessed": ("transforms",),
    "argmax-draft-soft-q": ("runs",),
    "draft-kv-rewind": ("identity",),
}


def make(name: str):
    """`mutant:<name>` -> a fresh mutant adapter."""
    cls = MUTANTS.get(name)
    if cls is None:
        raise InputError(f"unknown mutant {name!r}; known: {', '.join(MUTANTS)}")
    adapter = cls()
    adapter.name = f"mutant:{name}"
    adapter.mutant_of = cls.__mro__[1].__name__
    return adapter
