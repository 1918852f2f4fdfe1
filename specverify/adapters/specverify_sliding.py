"""Our engine on the tiny sliding-window family (`models.sliding`, `engine.sliding`: a ring-buffer KV
cache with exact rollback) at the bitwise level: `specverify audit specverify-sliding`.

The model: a tiny random Mistral-style model with window WINDOW over VOCAB tokens (built once under the
cache root; transformers writes the folder), run by our engine from that folder. Variants: "invariant"
(the batch-invariant op backend, the subject) and "default" (torch's ops, the negative control).
Proposers: n-gram prompt lookup, and the harness's oracle and adversarial drafters (`verify.width`,
`rollback[j]`). Prompts (`window_prompts`): every length 1 .. 3 W, so that the first position past the
window (position W, where the first key leaves it) and the ring's first wrap fall at every output offset
and every verify-chunk position; the first four lengths W - 3 .. W put the window edge at outputs 3, 2,
1, 0 of the drafted runs (they decode the first four prompts).
"""

from __future__ import annotations

import numpy as np

from specverify import __version__

WINDOW = 8
VOCAB = 96
SEED = 0
SUBJECT_BACKEND, CONTROL_BACKEND = "invariant", "default"


def window_prompts(window: int = WINDOW, vocab: int = VOCAB, seed: int = SEED) -> tuple:
    """Prompts of every length 1 .. 3 window (the lengths window - 3 .. window first), seeded tokens with a
    repeated span so that prompt lookup proposes something."""
    rng = np.random.default_rng(seed)
    lengths = list(range(window - 3, window + 1)) + [n for n in range(1, 3 * window + 1)
                                                     if not window - 3 <= n <= window]
    out = []
    for n in lengths:
        span = rng.integers(0, vocab, max(1, (n + 1) // 2))
        out.append(tuple(int(t) for t in np.concatenate([span, span])[:n]))
    return tuple(out)


class SpecverifySliding:
    name = "specverify-sliding"
    version = __version__
    capabilities = {"bitwise"}
    audit_defaults = {"size": "quick"}

    def __init__(self, engine_class=None, model_loader=None):
        import torch
        torch.set_num_threads(1)
        self.engine_class = engine_class
        self.model_loader = model_loader            # folder -> model (the tests' planted bugs); None: load_sliding
        self._model = None

    def model(self):
        if self._model is None:
            from specverify.engine.sliding import load_sliding
            from specverify.models import sliding
            folder = sliding.build(sliding.root() / f"target-V{VOCAB}-s{SEED}-w{WINDOW}", VOCAB, SEED, window=WINDOW)
            self._model = (self.model_loader or load_sliding)(folder)
        return self._model

    def bitwise_info(self):
        from specverify.adapters.bitwise_level import NEGATIVE_CONTROL, SUBJECT, BitwiseInfo
        return BitwiseInfo(model=f"tiny-sliding(W={WINDOW})", vocab_size=VOCAB, proposers=("ngram",),
                           variants={SUBJECT_BACKEND: SUBJECT, CONTROL_BACKEND: NEGATIVE_CONTROL},
                           prompts=window_prompts(), drafted=("oracle", "adversarial"))

    def decode_greedy(self, request):
        from specverify.adapters.bitwise_level import check_request
        from specverify.adapters.specverify_engine import decode_greedy
        check_request(request, self.bitwise_info(), "this engine")
        return decode_greedy(self.model(), request, backend=request.variant, engine_class=self.engine_class)


def make():
    return SpecverifySliding()
