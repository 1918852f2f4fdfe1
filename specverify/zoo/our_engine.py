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
