"""What a lab run measures: `LabConfig` (the full lab, or `quick_config()` on a tiny random model),
its key (the hash that names its saved state) and its validation."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from specverify.errors import InputError

from . import measure as M


@dataclass
class LabConfig:
    quick: bool = False
    proposers: tuple = ("ngram", "draft")
    kappas: tuple = (1, 2, 3, 4, 5, 6, 7, 8)
    draft_layers: int | None = None  # None: the depth whose predicted speedup E/(v + kappa c) is largest
    draft_depths: tuple = (2, 4, 6, 10, 15, 20, 25)
    depth_prompts: int = 4
    prompts_per_category: int = 2
    max_tokens: int = 48
    knee_T: tuple = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
    batches: tuple = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    sweep_kappa: int = 3
    ctx_len: int = 48
    e2e_batches: tuple = (1, 4, 16)
    e2e_max_tokens: int = 24
    rounds: int = 3
    temperature: float = 0.0
    threads: int | None = 1         # one thread: a co-tenant on the other core cannot stall a GEMM barrier
    clock: str = "cpu"              # "cpu" (process CPU time) or "wall"
    seed: int = 0
    backend: str = "invariant"      # the op backend the engine ships with (batch-invariant, and faster
                                    # than torch's default ops for verify steps on this CPU)

    @classmethod
    def quick_config(cls, **kw) -> "LabConfig":
        base = dict(quick=True, kappas=(1, 2, 3), draft_depths=(1, 2), depth_prompts=1, prompts_per_category=1,
                    max_tokens=12,
                    knee_T=(1, 2, 4, 8, 16, 32), batches=(1, 2, 4, 8), sweep_kappa=2, ctx_len=16,
                    e2e_batches=(1, 2), e2e_max_tokens=8, rounds=2)
        base.update(kw)
        return cls(**base)

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def validate(self) -> None:
        if not self.kappas or min(self.kappas) < 1:
            raise InputError("kappas must be >= 1")
        if self.sweep_kappa < 1:
            raise InputError("the batch sweep's kappa must be >= 1")
        for p in self.proposers:
            if p not in ("ngram", "draft"):
                raise InputError(f"unknown proposer {p!r}: choose ngram or draft")
        if not self.batches or min(self.batches) < 1 or not self.knee_T or min(self.knee_T) < 1:
            raise InputError("batch sizes and knee positions must be >= 1")
        if self.rounds < 1 or self.max_tokens < 2:
            raise InputError("need rounds >= 1 and max_tokens >= 2")
        if self.clock not in M.CLOCKS:
            raise InputError(f"clock {self.clock!r}: choose cpu or wall")
        if self.draft_layers is None and not self.draft_depths:
            raise InputError("give --draft-layers or some draft depths to choose from")
