"""Measurements for the lab, on top of the engine's public API (nothing in specverify/engine is
changed or monkey-patched).

Step times. `StepTimer(model)` times one `model.forward` over a synthetic step laid out by the
engine's own `layout.build_step`: `n_requests` requests, each with `ctx_len` cached positions
(allocated in the model's paged cache; their K/V are zeros, which costs the same as real ones) and
`n_new` new positions, logits wanted for every new position (a verify step: plain decode is n_new =
1, a kappa-draft verify n_new = kappa + 1; the step-time knee uses one request of n_new = T).
Only the forward is timed, not the layout.

Noise. The machine is shared, so every comparison is interleaved: `interleaved(fns, rounds)` runs
each function once per round, round after round; the lab takes each step's fastest round (`best`).
Clocks: by default CPU time of this process (`clock("cpu")`), which counts only the cycles the step
ran -- with one torch thread that is the step's own cost, and a co-tenant that preempts us cannot
inflate it (memory-bandwidth contention still can; the fastest round keeps that out). Wall time is
recorded beside it.

End to end. `run_generate` runs `engine.api.generate` greedily and times the decode phase from the
engine's per-step callback: decode seconds = last step - first step (the first step is every
request's prefill), on both clocks; decode tokens = emitted tokens - one per request.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from specverify.engine.api import RunOptions, SpecOptions, generate
from specverify.engine.engine import SamplingParams
from specverify.engine.kv_cache import SeqKV
from specverify.engine.layout import build_step
from specverify.engine.proposers import NgramProposer

BLOCK_SIZE = 16


CLOCKS = {"cpu": time.process_time, "wall": time.perf_counter}


def clock(name: str):
    """"cpu": this process's CPU time (a co-tenant that preempts us does not inflate it -- with one
    torch thread it equals the step's own run time); "wall": elapsed time."""
    return CLOCKS[name]


class StepTimer:
    """Times model.forward on synthetic steps; one paged cache reused across calls (grown on demand)."""

    def __init__(self, model, clock_name: str = "cpu"):
        self.model = model
        self.cache = None
        self.blocks = 0
        self.now = clock(clock_name)

    def _ensure(self, blocks: int):
        if self.cache is None or blocks > self.blocks:
            self.cache = None                                     # free the old one first
            self.blocks = max(blocks, 2 * self.blocks)
            self.cache = self.model.make_cache(self.blocks, BLOCK_SIZE, prefix_caching=False)
        return self.cache

    def __call__(self, n_requests: int, n_new: int, ctx_len: int, token: int = 1) -> float:
        per = -(-(ctx_len + n_new) // BLOCK_SIZE)
        cache = self._ensure(n_requests * per + 1)
        seqs = []
        for _ in range(n_requests):
            s = SeqKV()
            cache.ensure_capacity(s, ctx_len)
            s.num_computed = ctx_len
            seqs.append(s)
        batch = build_step(cache, seqs, [[token] * n_new] * n_requests, [n_new] * n_requests)
        t0 = self.now()
        self.model.forward(batch, cache)
        dt = self.now() - t0
        for s in seqs:
            cache.release(s)
        return dt

    def release(self):
        self.cache = None
        self.blocks = 0


def interleaved(fns: dict, rounds: int, warmup: int = 1, bar=None) -> dict:
    """{name: [seconds per round]}: every fn() (returning seconds) once per round, in order."""
    for _ in range(warmup):
        for fn in fns.values():
            fn()
    out = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            out[k].append(float(fn()))
            if bar is not None:
                bar.advance(0)
    return out


def best(xs) -> float:
    """The fastest round: the least-disturbed estimate of a step's own cost on a shared machine."""
    return float(np.min(np.asarray(xs, dtype=np.float64)))


def median(xs) -> float:
    return float(np.median(np.asarray(xs, dtype=np.float64)))


def iqr(xs) -> tuple:
    a = np.asarray(xs, dtype=np.float64)
    return float(np.percentile(a, 25)), float(np.percentile(a, 75))


def ngram_lookup_seconds(tokens, kappa: int, reps: int = 200, n_max: int = 3) -> float:
    """Seconds of one n-gram proposal (the engine's NgramProposer.lookup) on `tokens`, median of reps."""
    prop = NgramProposer(n_max=n_max)
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        prop.lookup(tokens, kappa)
        ts.append(time.perf_counter() - t0)
    return median(ts)


@dataclass
class GenRun:
    tokens: list            # [n_prompts] generated ids
    emitted: int
    decode_tokens: int
    decode_s: float         # wall seconds
    prefill_s: float
    metrics: dict           # SpecMetrics.to_dict() plus the raw counters the lab needs
    decode_cpu_s: float = 0.0   # CPU seconds of this process over the same steps

    @property
    def decode_tps(self) -> float:
        return self.decode_tokens / self.decode_s if self.decode_s > 0 else float("nan")

    def to_dict(self) -> dict:
        return {"emitted": self.emitted, "decode_tokens": self.decode_tokens, "decode_s": self.decode_s,
                "decode_cpu_s": self.decode_cpu_s, "prefill_s": self.prefill_s, "metrics": self.metrics,
                "tokens": self.tokens}


def run_generate(model, prompt_ids: list, *, spec: str, kappa: int, max_tokens: int, draft_layers: int,
                 eos_token_id=None, ignore_eos: bool = False, batch: int | None = None,
                 temperature: float = 0.0, seed: int = 0, backend="default") -> GenRun:
    """One greedy (by default) engine run over `prompt_ids`, all admitted at once (batch = len)."""
    stamps, cpu = [], []
    params = [SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=ignore_eos)
              for _ in prompt_ids]
    t0 = time.perf_counter()
    res = generate(model, None, prompt_ids, sampling=params,
                   spec=SpecOptions(spec, kappa=kappa, draft_layers=draft_layers),
                   run=RunOptions(backend=backend, seed=seed, max_batch_size=batch or len(prompt_ids),
                                  eos_token_id=eos_token_id,
                                  on_step=lambda ev: (stamps.append(time.perf_counter()), cpu.append(time.process_time()))))
    prefill = stamps[0] - t0 if stamps else 0.0
    decode = stamps[-1] - stamps[0] if len(stamps) > 1 else 0.0
    m = res.metrics
    emitted = sum(len(t) for t in res.tokens)
    metrics = m.to_dict()
    metrics.update({"drafted_at": list(m.drafted_at), "accepted_at": list(m.accepted_at),
                    "num_rejections": m.num_rejections, "num_request_steps": m.num_request_steps})
    decode_cpu = cpu[-1] - cpu[0] if len(cpu) > 1 else 0.0
    return GenRun([list(map(int, t)) for t in res.tokens], emitted, emitted - len(prompt_ids), decode, prefill, metrics,
                  decode_cpu)
