"""Mutants of the engine loop around an exact sampler: what is drafted, what the caches keep,
which rows are transformed.

Each overrides one hook of the toy engine (`reference.toy_engine.SpecEngine`: `draft_transform`,
`verify_transform`, `propose`, `target_segment`, `draft_segment`) and declares only the "engine"
capability: its sampler is exact, so only whole runs (`runs`, `transforms`) and the identity draft
(`identity`) can catch it.
"""

from __future__ import annotations

import numpy as np

from specverify.reference.toy_engine import SpecEngine
from specverify.reference.transforms import Transform

from .registry import mutant
from specverify.reference.batch import PAD


@mutant(12, "temperature-on-target-only", targets=("identity", "engine_acceptance"))
class TemperatureOnTargetOnly(SpecEngine):
    """Temperature is applied to the target's logits but not to the draft's (top-k/top-p to both).
    The drafts are still drawn from the rows handed to the verifier, so the output stays exact, but
    the draft no longer matches the target it was built for: acceptance drops (the chapter: "identical
    transforms of the distributions used for proposal and verification"). Only the identity-draft
    check (draft = target, acceptance must be 1) and the engine's acceptance law (`engine_acceptance`,
    at temperature 0.7) see it."""

    def draft_transform(self, transform):
        return transform if transform.greedy else Transform(1.0, transform.top_k, transform.top_p)


@mutant(14, "stale-kv", targets=("runs",))
class StaleKv(SpecEngine):
    """Rejected draft positions are not rolled back: the verify pass wrote K/V for all kappa drafts,
    and the next step's target attends over them (ml-explore/mlx-lm#1109: a non-trimmable cache keeps
    rejected drafts "in the recurrent state and corrupt[s] subsequent predictions"; the chapter's
    "Leave them in place and the next step's attention reads them"). Here the target's context after a
    step is old context + all kappa drafts + the last emitted token."""

    def target_segment(self, drafts, emitted):
        n_emit = (emitted != PAD).sum(axis=1)
        last = emitted[np.arange(emitted.shape[0]), n_emit - 1]
        return np.concatenate([drafts, last[:, None]], axis=1)


@mutant(20, "draft-q-unprocessed", targets=("transforms",))
class DraftQUnprocessed(SpecEngine):
    """The drafts are drawn from the draft's processed distribution (top-k / top-p applied) but the
    verifier is handed the raw one, so q(x) in the acceptance ratio is not the law the draft was drawn
    from (huggingface/transformers#47932: "candidate generators return a q they did not sample from";
    deepseek-ai/DeepSpec#31 is the dtype variant)."""

    def verify_transform(self, draft_transform):
        return Transform(draft_transform.temperature)


@mutant(21, "argmax-draft-soft-q", targets=("runs",))
class ArgmaxDraftSoftQ(SpecEngine):
    """The draft proposes its argmax (greedy drafting) but the verifier is given the draft's soft
    distribution q, as if the token had been sampled from it (jaymody/speculative-sampling#3;
    apple/ml-recurrent-drafter#6 for beam-search candidates). The accept ratio then uses a q the draft
    never sampled from and the output is biased; a deterministic draft must be verified with q one-hot."""

    def propose(self, q, u):
        return np.argmax(q, axis=1)


@mutant(22, "draft-kv-rewind", targets=("identity", "engine_acceptance"))
class DraftKvRewind(SpecEngine):
    """The draft's KV cache is rewound wrongly after verification, so the drafter's context falls
    behind the emitted sequence (lablup/mlxcel#994, fixed in #1002: the trim missed the last accepted
    draft, in the fully accepted case it "cannot reach at all"). Here the last accepted draft token of
    each step is missing from the draft's context. The output stays exact; acceptance drops, which
    the identity-draft check and the engine's acceptance law (`engine_acceptance`: exact-but-slow) see."""

    def draft_segment(self, drafts, emitted):
        n_acc = (emitted != PAD).sum(axis=1) - 1
        seg = emitted.copy()
        rows = np.flatnonzero(n_acc > 0)
        seg[rows, n_acc[rows] - 1] = PAD
        return seg


class ShiftedVocabDraft:
    """A draft model whose ids are mapped to the wrong target ids (draft id j lands on target id j + 1
    mod V): its rows, its drafts and the q handed to the verifier all in the shifted ids, so q is what
    each draft was drawn from."""

    def __init__(self, model):
        self.model, self.vocab_size = model, model.vocab_size
        self.perm = (np.arange(self.vocab_size) - 1) % self.vocab_size     # new id j <- old id j - 1

    def logits_at(self, index):
        return self.model.logits_at(index)[:, self.perm]

    def logits(self, prefix):
        return self.model.logits(prefix)[self.perm]

    def probs(self, prefix, transform=None):
        return self.model.probs(prefix, transform)[self.perm]

    def probs_at(self, index, transform=None):
        return self.model.probs_at(index, transform)[:, self.perm]

    def table(self, max_len, transform=None):
        return self.model.table(max_len, transform)[:, self.perm]


@mutant(43, "draft-vocab-misaligned", targets=("identity", "engine_acceptance"))
class DraftVocabMisaligned(SpecEngine):
    """The draft-to-target vocabulary map (EAGLE-3's d2t) is off by one: every draft id lands on the next
    target id, and the draft's q is scattered with the same wrong map (NeMo Automodel PR #2447, verl-SpeCo
    PR #67, SpecForge PR #534; `../shared/BUGCLASSES.md`, "Acceptance"). The verifier gets the q each
    draft was drawn from, so the output stays exact; greedy acceptance collapses (the draft's argmax is
    the wrong token) and sampled acceptance falls: `engine.acceptance_greedy` and `engine.acceptance`
    fail, and the identity draft accepts less than everything."""

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        return super().generate(target, ShiftedVocabDraft(draft), prompt, kappa, transform, seed, n, length, processors)
