"""Our own engine (`specverify.engine`) with one real bug, for the tests that prove the audits catch it.

    StaleKvEngine          rejected draft positions are not rolled back in the KV cache
    DraftOutOfSyncEngine   the draft model never ingests the last token of a step (exact output, slow)
    PlainDecodeRing        a sliding-window model whose ring buffer is sized for plain decode: rejected
                           drafts overwrite ring slots the next window still reads (`plain_decode_ring(folder)`)

Run it with `generate(..., run=RunOptions(engine_class=StaleKvEngine))`. The sampler-level and
toy-engine mutants (`mutant:<name>`) are the other modules of this package.
"""

from __future__ import annotations

from specverify.engine.engine import Engine
from specverify.engine.sliding import SlidingLlama, load_sliding


class StaleKvEngine(Engine):
    """Rejected draft positions are not rolled back in the KV cache: the verify pass wrote K/V for every
    draft, and the next step's target attends over the rejected ones too (ml-explore/mlx-lm#1109: a
    non-trimmable cache keeps rejected drafts "in the recurrent state and corrupt[s] subsequent
    predictions"; `zoo.engine_loop.StaleKv` is the same bug in the toy engine). A token can
    then take up to kappa + 1 KV positions. Prefix caching is off: a block's K/V would no longer belong
    to the tokens it is keyed by, a second bug."""

    def __init__(self, target, proposer=None, **options):
        super().__init__(target, proposer, **{**options, "prefix_caching": False})

    def roll_back_rejected(self, req) -> None:
        """Keep the rejected drafts' K/V in the context."""

    @staticmethod
    def kv_positions_per_token(max_kappa: int) -> int:
        return max_kappa + 1


class PlainDecodeRing(SlidingLlama):
    """A sliding-window model over a ring of W - 1 slots, what plain decode needs (the step's own key
    comes fresh): a verify chunk writes its drafts into the slots of the positions just before the window,
    and after a rejection the next step's window reads those slots -- keys of rejected drafts in place
    of accepted tokens' (the issue's "ring slots overwritten by rejected tokens"; llama.cpp sizes its SWA cache
    n_swa + n_ubatch cells a sequence, src/llama-kv-cache-iswa.cpp, room for a whole batch past the window). Runs whose drafts are all
    accepted stay exact (`verify.width` passes); every `rollback[j]` fails."""

    check_chunks = False


def plain_decode_ring(folder, backend="default") -> PlainDecodeRing:
    """The sliding-window folder's model with the plain-decode-sized ring (`PlainDecodeRing`)."""
    from specverify.models.sliding import params_of
    return load_sliding(folder, backend, ring_len=params_of(folder)["window"] - 1, cls=PlainDecodeRing)


class _Lagging:
    """A request as a drafter that missed its last token sees it: every attribute the request's, the
    token list one short."""

    def __init__(self, req):
        self._req = req

    def __getattr__(self, name):
        return getattr(self._req, name)

    @property
    def tokens(self):
        return self._req.tokens[:-1]


class _LaggingProposer:
    """The draft-model proposer fed one token behind: it drafts after tokens[:-1] and commits one
    position short, so its KV holds each step's drafts where the step's last emitted token belongs."""

    def __init__(self, inner):
        self.inner = inner
        self.name = getattr(inner, "name", "draft")

    def propose(self, reqs, ks):
        return self.inner.propose([_Lagging(r) for r in reqs], ks)

    def accepted(self, req, n_valid):
        self.inner.accepted(_Lagging(req), n_valid - 1)

    def release(self, req):
        self.inner.release(req)


class DraftOutOfSyncEngine(Engine):
    """The draft model's KV falls out of sync with the committed sequence: the token a step emits last
    (the bonus or the recovered token) is never ingested by the drafter, whose cache then holds drafts
    where that token belongs (vLLM's EAGLE "draft KV not updated after a step without drafts", the
    hidden-state and rewind variants in `../shared/BUGCLASSES.md`, "Acceptance"). The drafts are still
    verified with the q they were drawn from, so the output law stays exact; acceptance collapses,
    which only the acceptance law (`checks.engine_acceptance`) sees with a real draft."""

    def __init__(self, target, proposer=None, **options):
        super().__init__(target, None if proposer is None else _LaggingProposer(proposer), **options)


# ----------------------------------------------------------------------------- drafters out of sync in one condition
# Each engine below keeps the exact output law (every draft is verified with the q it was drawn from)
# and loses acceptance only when one knob of the metamorphic acceptance rows
# (`checks.acceptance_invariance`) is set: the row of that knob must catch it, the others pass.

POSITION_LIMIT = 128        # DraftLagPastPosition: the prompt length beyond which its drafter lags


class _LagIf:
    """The draft-model proposer, one token behind (as `_LaggingProposer`) for the requests `lag(req)`
    picks at their first proposal, in step with the committed sequence for the others."""

    def __init__(self, inner, lag):
        self.inner, self.lag = inner, lag
        self.name = getattr(inner, "name", "draft")
        self.lagging: dict = {}

    def _view(self, req):
        if req.id not in self.lagging:
            self.lagging[req.id] = bool(self.lag(req))
        return _Lagging(req) if self.lagging[req.id] else req

    def propose(self, reqs, ks):
        return self.inner.propose([self._view(r) for r in reqs], ks)

    def accepted(self, req, n_valid):
        lag = self.lagging.get(req.id, False)
        self.inner.accepted(_Lagging(req) if lag else req, n_valid - 1 if lag else n_valid)

    def release(self, req):
        self.lagging.pop(req.id, None)
        self.inner.release(req)


class DraftLagOnCacheHit(Engine):
    """A request admitted with a prefix-cache hit gets a drafter one token behind for the rest of its life:
    the target's K/V of the cached prefix are reused, the drafter's state for it is not rebuilt in step
    (SGLang PR #19897: on a radix-cache hit the draft KV slots of the cached tokens were never written;
    `../shared/BUGCLASSES.md`, "Acceptance"). Cold runs are untouched."""

    def __init__(self, target, proposer=None, **options):
        self.hit_ids: set = set()
        super().__init__(target, None if proposer is None else _LagIf(proposer, lambda r: r.id in self.hit_ids), **options)

    def _admit(self):
        waiting = list(self.scheduler.waiting)
        running = super()._admit()
        self.hit_ids.update(r.id for r in waiting if r in running and r.kv.num_committed_blocks > 0 and r.num_steps == 0)
        return running


class DraftLagWhenChunked(Engine):
    """A prompt prefilled in more than one chunk leaves the drafter one token behind: its catch-up counts
    the chunks, not the tokens (the chunked-prefill form of a drafter out of sync, `../shared/BUGCLASSES.md`,
    "Acceptance"). Whole-prompt prefills are untouched."""

    def __init__(self, target, proposer=None, **options):
        super().__init__(target, None if proposer is None else _LagIf(
            proposer, lambda r: self.prefill_chunk is not None and len(r.prompt) > self.prefill_chunk), **options)


class DraftLagPastPosition(Engine):
    """A drafter whose state is sized for POSITION_LIMIT positions: past it (a long prompt) it falls one
    token behind (a draft ring or rotary table too short for the context; the position form of a drafter
    out of sync, `../shared/BUGCLASSES.md`, "Acceptance"). Short contexts are untouched."""

    def __init__(self, target, proposer=None, **options):
        super().__init__(target, None if proposer is None else _LagIf(
            proposer, lambda r: len(r.prompt) > POSITION_LIMIT), **options)


class _Dropping:
    """A request as a drafter that never ingested the tokens at `drop` (indices into its tokens) sees it."""

    def __init__(self, req, drop):
        self._req, self._drop = req, drop

    def __getattr__(self, name):
        return getattr(self._req, name)

    @property
    def tokens(self):
        return [t for i, t in enumerate(self._req.tokens) if i not in self._drop]


class _SkipAfterPlainStep:
    """The draft-model proposer that ingests committed tokens only when it is asked for drafts: the token
    a step without drafts emits (the prefill's, a plain decode's) never reaches its KV."""

    def __init__(self, inner):
        self.inner = inner
        self.name = getattr(inner, "name", "draft")
        self.drop: dict = {}            # request id -> indices of tokens the drafter never ingested
        self.asked: set = set()         # requests asked for drafts this step

    def propose(self, reqs, ks):
        self.asked.update(r.id for r in reqs)
        return self.inner.propose([_Dropping(r, self.drop.setdefault(r.id, set())) for r in reqs], ks)

    def accepted(self, req, n_valid):
        drop = self.drop.setdefault(req.id, set())
        if req.id in self.asked:
            self.asked.discard(req.id)
        else:
            drop.add(n_valid)           # the token this plain step emits lands at index n_valid
        self.inner.accepted(_Dropping(req, drop), n_valid - sum(1 for i in drop if i < n_valid))

    def release(self, req):
        self.drop.pop(req.id, None)
        self.inner.release(req)


class DraftKvNotIngestedAfterK0(Engine):
    """Mutant 42's engine: the drafter's KV is not fed the token of a step that made no drafts (vllm-metal
    PR #716: with dynamic K, `propose()` returned before ingesting committed tokens when K was 0, and the
    drafter resumed from a stale cache; "reduced speculative-token acceptance even though the target-model
    output remained correct"). Here the prefill's token and every plain decode step's token are missing
    from the drafter's context."""

    def __init__(self, target, proposer=None, **options):
        super().__init__(target, None if proposer is None else _SkipAfterPlainStep(proposer), **options)
