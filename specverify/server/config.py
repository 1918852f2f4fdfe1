"""What `specverify serve` was asked for: a light module (no torch, no FastAPI), so that the command
line can register `serve` without importing the engine."""

from __future__ import annotations

from dataclasses import dataclass

VARIANT_NAMES = ("exact", "recovered-from-p", "stop-per-step", "cap-crossed", "usage-charges-drafts",
                 "logprobs-from-draft", "stream-last-token", "seed-offset-by-steps",
                 "preempt-keeps-draft-state", "preempt-accepts-stale-drafts",
                 "stream-splits-characters")   # `variants.VARIANTS`, in order


@dataclass(frozen=True)
class ServeConfig:
    model: str = "tiny:4,7"
    spec: str = "ngram:3"           # "none", "ngram[:N]", "draft[:LAYERS]", "uniform", "skewed"
    kappa: int = 3
    max_batch: int = 64
    max_context: int = 512
    block_size: int = 16
    seed: int = 0
    backend: str = "default"
    variant: str = "exact"
    kv_budget: int | None = None    # KV positions of the target's cache (None: max_batch full-context requests)
    toy_text: str = "words"         # a tiny:V,SEED model's text: words " t{i}" or "multibyte" byte pieces
