"""Mutants of the state beyond the KV cache: our engine (`specverify.engine`) on a tiny sliding-window model
(a ring-buffer KV cache) and on a tiny hybrid recurrent model (a recurrent state with checkpoints), each
with one bug in how the verify pass reads or the rollback restores that state (../shared/BUGCLASSES.md,
"State beyond the KV cache").

The exact adapters (`SlidingBitwise`, `HybridBitwise`) offer the bitwise level only, with the harness's
oracle and adversarial drafters (`battery.drafted`: rows `verify.width` and `rollback[j]`) on the
invariant op backend; no prompt-lookup proposer, no batched layouts and no negative control, so that an
audit stays within the zoo's time goal (the full bitwise level of our engine on these models is
`specverify audit specverify-sliding` and tests/test_sliding.py, tests/test_hybrid.py). Every mutant is
one of them with one model class changed; `bitwise` is the check meant to catch each.
"""

from __future__ import annotations

from specverify import __version__

from .registry import mutant

VOCAB, WINDOW, SEED = 96, 8, 0
BACKEND = "invariant"          # the batch-invariant op backend: plain decode and any verify chunk agree in bits


class SlidingBitwise:
    """Our engine on a tiny random sliding-window model (W = WINDOW, ring sized for exact rollback) at the
    bitwise level, taking the oracle and adversarial drafters: the exact base of the ring mutants."""

    name = "state-sliding"
    version = __version__
    capabilities = {"bitwise"}
    audit_defaults = {"size": "quick"}
    model_class = "SlidingLlama"    # a class of `zoo.state_models` (imported when the model is built: torch)
    ring_len = None                 # None: the ring sized for exact rollback (`engine.sliding.ring_length`)

    def __init__(self):
        import torch
        torch.set_num_threads(1)
        self._model = None

    def build_model(self):
        from specverify.engine.model import random_llama

        from . import state_models
        m = random_llama(SEED, vocab_size=VOCAB)
        cls = getattr(state_models, self.model_class)
        return cls(m.config, m.tok_embeddings, m.layers, m.norm, BACKEND, name="random-sliding", head=m.head,
                   window=WINDOW, ring_len=self.ring_len)

    def model(self):
        if self._model is None:
            self._model = self.build_model()
        return self._model

    def model_label(self) -> str:
        return f"random-sliding(W={WINDOW})"

    def bitwise_info(self):
        from specverify.adapters.bitwise_level import ADVERSARIAL, ORACLE, SUBJECT, BitwiseInfo
        from specverify.adapters.specverify_sliding import window_prompts
        return BitwiseInfo(model=self.model_label(), vocab_size=VOCAB, proposers=(), layouts=(),
                           variants={BACKEND: SUBJECT}, prompts=window_prompts(WINDOW, VOCAB),
                           drafted=(ORACLE, ADVERSARIAL))

    def decode_greedy(self, request):
        from specverify.adapters.bitwise_level import check_request
        from specverify.adapters.specverify_engine import decode_greedy
        check_request(request, self.bitwise_info(), self.name)
        return decode_greedy(self.model(), request, backend=request.variant)


class HybridBitwise(SlidingBitwise):
    """Our engine on a tiny random hybrid model (`engine.hybrid`: window attention + a per-channel linear
    recurrence, checkpointed and rolled back exactly) at the bitwise level: the exact base of the
    recurrent-state mutants."""

    name = "state-hybrid"
    model_class = "HybridLlama"

    def build_model(self):
        from specverify.engine.hybrid import random_hybrid

        from . import state_models
        return random_hybrid(SEED, vocab_size=VOCAB, window=WINDOW, backend=BACKEND,
                             cls=getattr(state_models, self.model_class), ring_len=self.ring_len)

    def model_label(self) -> str:
        return f"random-hybrid(W={WINDOW})"


@mutant(38, "ring-slot-overwritten", targets=("bitwise",))
class RingSlotOverwritten(SlidingBitwise):
    """The sliding-window KV ring is sized for plain decode (W - 1 slots): a verify chunk writes its drafts
    into slots of positions the window still reads, and after a rejection the next step reads rejected
    drafts' keys (transformers PR #48280, the OpenVINO PR #37620 review, mlx-swift-lm #505: "rejected
    tokens overwrite ring-buffer slots"; `zoo.our_engine.PlainDecodeRing`). Runs whose drafts are all
    accepted stay exact: `verify.width` passes, every `rollback[j]` fails."""

    model_class = "PlainDecodeRing"
    ring_len = WINDOW - 1


@mutant(39, "verify-chunk-single-token-path", targets=("bitwise",))
class VerifyChunkSingleTokenPath(SlidingBitwise):
    """The multi-token verify pass goes through the single-token kernel: a chunk with a warm cache is
    treated as a decode step, so every token after the first is computed without the chunk's earlier
    keys (transformers PR #46741, Mamba2: "a chunk with a warm cache is treated as a decode step"; here
    on window attention, `SingleTokenVerify`). Plain decode is unaffected; `verify.width` (the oracle's
    full chunks) fails at chunk position 1 of the first verify step."""

    model_class = "SingleTokenVerify"


@mutant(40, "recurrent-state-not-rolled-back", targets=("bitwise",))
class RecurrentStateNotRolledBack(HybridBitwise):
    """Trimming the recurrent state is a no-op: rejected drafts stay in it and corrupt every later
    prediction (ml-explore/mlx-lm PR #1109: the ArraysCache of its SSM layers is not trimmable, so
    speculative decoding kept rejected drafts in the state). Attention's K/V are rolled back exactly;
    the state is not. The oracle accepts everything (`verify.width` passes); every `rollback[j]` fails."""

    model_class = "StateNotRolledBackModel"


@mutant(41, "state-from-first-checkpoint", targets=("bitwise",))
class StateFromFirstCheckpoint(HybridBitwise):
    """After a partial acceptance the recurrent state is read from the wrong checkpoint: the step's first
    (the state after the step's first position, the last emitted token) instead of the last accepted
    draft's (vLLM #39273, PR #40738: the wrong recurrent-state checkpoint read after verification, as
    ../shared/BUGCLASSES.md records it). Exact when no draft or every draft is accepted: `verify.width`
    and `rollback[j=0]` pass, every `rollback[j]` with j >= 1 fails."""

    model_class = "FirstCheckpointModel"
