"""Benchmark: the engine's model on the "invariant" CPU backend against "default" (and the Triton kernels).

    python -m specverify.kerneltools.bench [--layers 30] [--context 128] [--rounds 5] [--tiny] [--json PATH|-]

The model is the engine's own Llama (`specverify.engine.model.random_llama`): SmolLM2-135M's shapes
with random fp32 weights (D 576, 9 query / 3 KV heads of 64, FFN 1536, vocab 49152, tied head, 30
layers; `--layers` keeps the first n), or with `--tiny` random_llama's small test config. One request
prefills `--context` random tokens; then each backend runs one decode step (1 token) and verify
steps of kappa + 1 tokens (kappa = 3, 7) at that position (the KV rolled back after each step, as
the engine rolls back rejected drafts), rounds interleaved (A B A B ..), the median step time of
each (backend, step) taken over all rounds. Reported: step time, tokens/s (tokens of the step /
step time: for verify, the positions scored), and the ratio invariant / default of tokens/s
measured in this one run -- the machine's other load affects both alike. Also: whether row 0 of
each verify step equals the decode step's logits at the same position bit for bit (True for a
batch-invariant backend), and the Triton interpreter's time per call of every op of the registry
on its small shape (without a GPU; with one, the GPU numbers come from `gpu_check.py`).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from functools import partial

SMOLLM2_135M = dict(vocab_size=49152, dim=576, n_layers=30, n_heads=9, n_kv_heads=3, ffn_dim=1536,
                    rope_theta=100000.0)
"""`random_llama`'s keywords for SmolLM2-135M's shapes."""
BLOCK_SIZE = 16
"""KV cache block size (the engine's default)."""
TIMED_ROWS = 4
"""Rows (attention: queries) of each timed Triton call: a kappa = 3 verify step."""


@dataclass
class StepTiming:
    step: str               # "decode" or "verify(kappa=K)"
    tokens: int
    ms: dict                # backend -> median ms per step
    tokens_per_s: dict      # backend -> tokens / s
    ratio: float            # invariant tokens/s / default tokens/s
    cost_vs_decode: dict    # backend -> step time / decode step time


@dataclass
class BenchResult:
    config: dict
    steps: list
    row0_equals_decode: dict          # backend -> {kappa: bool}
    triton_interpreter_ms: dict = field(default_factory=dict)
    environment: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def build_model(n_layers: int | None = None, seed: int = 0, tiny: bool = False):
    """The engine's Llama with random weights on the "default" backend: SmolLM2-135M's shapes, or
    random_llama's small config (`tiny`); `n_layers` layers when given."""
    from specverify.engine.model import random_llama
    shape = {} if tiny else dict(SMOLLM2_135M)
    if n_layers is not None:
        shape["n_layers"] = n_layers
    return random_llama(seed, **shape)


class Session:
    """One request of `model` with its first `context` positions prefilled (random tokens):
    `step(tokens)` feeds `tokens` at position `context` and returns their logits [len(tokens), V],
    then rolls the KV back, so every step runs at the same position."""

    def __init__(self, model, context: int, max_tokens: int, seed: int):
        import torch

        from specverify.engine.kv_cache import SeqKV
        self.model, self.context = model, context
        self.cache = model.make_cache(math.ceil((context + max_tokens) / BLOCK_SIZE), BLOCK_SIZE, prefix_caching=False)
        self.seq = SeqKV()
        g = torch.Generator().manual_seed(seed)
        self._feed(torch.randint(0, model.vocab_size, (context,), generator=g).tolist(), 1)

    def _feed(self, tokens, n_logits: int):
        from specverify.engine.layout import build_step
        return self.model.forward(build_step(self.cache, [self.seq], [tokens], [n_logits]), self.cache)

    def step(self, tokens):
        logits = self._feed(tokens, len(tokens))
        self.cache.rollback(self.seq, self.context)
        return logits


def run_bench(n_layers: int | None = None, context: int = 128, kappas=(3, 7), rounds: int = 5,
              steps_per_round: int = 3, parallel: bool = False, triton_small: bool = True, seed: int = 0,
              tiny: bool = False) -> BenchResult:
    import torch

    from specverify.kernels.cpu_backend import InvariantBackend
    model = build_model(n_layers, seed, tiny)
    models = {"default": model, "invariant": model.with_backend(InvariantBackend(parallel=parallel))}
    g = torch.Generator().manual_seed(seed + 7)
    steps = [("decode", 1)] + [(f"verify(kappa={k})", k + 1) for k in kappas]
    tokens = {name: torch.randint(0, model.vocab_size, (n,), generator=g).tolist() for name, n in steps}
    sessions = {b: Session(m, context, max(n for _, n in steps), seed + 1) for b, m in models.items()}
    times = {(b, s): [] for b in models for s, _ in steps}
    for b, sess in sessions.items():                   # warm-up: numba compile, weight packing
        for s, _ in steps:
            sess.step(tokens[s])
    for _ in range(rounds):
        for b, sess in sessions.items():
            for s, _ in steps:
                for _ in range(steps_per_round):
                    t0 = time.perf_counter()
                    sess.step(tokens[s])
                    times[(b, s)].append(time.perf_counter() - t0)
    # row 0 of a verify step vs the decode step at the same position (same token, same cache)
    row0 = {}
    for b, sess in sessions.items():
        row0[b] = {}
        for k in kappas:
            toks = [tokens["decode"][0]] + tokens[f"verify(kappa={k})"][1:]
            dec = sess.step(toks[:1])
            ver = sess.step(toks)
            row0[b][str(k)] = bool(torch.equal(ver[0], dec[0]))
    results = []
    med = {key: statistics.median(v) for key, v in times.items()}
    for s, n in steps:
        ms = {b: med[(b, s)] * 1e3 for b in models}
        tps = {b: n / med[(b, s)] for b in models}
        results.append(asdict(StepTiming(s, n, ms, tps, tps["invariant"] / tps["default"],
                                         {b: med[(b, s)] / med[(b, "decode")] for b in models})))
    res = BenchResult(
        config=dict(asdict(model.config), model=model.name, context=context, rounds=rounds,
                    steps_per_round=steps_per_round, parallel=parallel),
        steps=results, row0_equals_decode=row0,
        environment=dict(torch=torch.__version__, threads=torch.get_num_threads(), cpu_count=os.cpu_count(),
                         load_avg_1min=os.getloadavg()[0]))
    if triton_small:
        res.triton_interpreter_ms = triton_interpreter_timings()
    return res


def triton_interpreter_timings(reps: int = 3) -> dict:
    """ms per call of every op of the registry on the Triton backend, at its first small shape and
    TIMED_ROWS rows, and of `sampler.verify`; under TRITON_INTERPRET=1 (or on a GPU)."""
    import numpy as np
    import torch

    from specverify.kernels import sampler
    from specverify.kernels.backend import get_backend
    from specverify.kernels.registry import OPS
    from specverify.kernels.triton_common import require_triton
    from specverify.reference.batch import Coins, VerifyBatch
    try:
        require_triton()
    except Exception as exc:                           # noqa: BLE001 -- reported, not raised
        return {"skipped": str(exc)}
    be = get_backend("triton")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    calls = {}
    for op in OPS.values():
        case = op.case(0, None, dev, **op.small[0].args)
        calls[f"{case.label} M={TIMED_ROWS}"] = partial(getattr(be, op.name), *case.args(case.batch(TIMED_ROWS)))
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(64), size=8)
    batch = VerifyBatch.from_requests([([1, 2, 3], p[:4], p[4:7], False), ([5], p[6:8], p[7:8], False)])
    coins = Coins.random(batch, rng)
    calls["sampler.verify[2 requests, 4 drafts, V 64]"] = partial(sampler.verify, batch, coins)
    out = {}
    for name, fn in calls.items():
        fn()
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        if dev == "cuda":
            torch.cuda.synchronize()
        out[name] = (time.perf_counter() - t0) / reps * 1e3
    out["mode"] = "gpu" if dev == "cuda" else "TRITON_INTERPRET=1"
    return out


def format_table(res: BenchResult) -> str:
    c, env = res.config, res.environment
    lines = [f"{c['model']}: {c['n_layers']} layers, D {c['dim']}, vocab {c['vocab_size']}, context {c['context']}, "
             f"{env['threads']} torch threads, invariant parallel={c['parallel']}, "
             f"load average {env['load_avg_1min']:.1f} on {env['cpu_count']} CPUs",
             f"{'step':<17}{'default ms':>11}{'invariant ms':>14}{'default tok/s':>15}{'invariant tok/s':>17}"
             f"{'ratio':>8}"]
    for s in res.steps:
        lines.append(f"{s['step']:<17}{s['ms']['default']:>11.1f}{s['ms']['invariant']:>14.1f}"
                     f"{s['tokens_per_s']['default']:>15.1f}{s['tokens_per_s']['invariant']:>17.1f}{s['ratio']:>8.2f}")
    lines.append("verify row 0 == decode logits, bitwise: " +
                 ", ".join(f"{b} {v}" for b, v in res.row0_equals_decode.items()))
    if res.triton_interpreter_ms:
        mode = res.triton_interpreter_ms.get("mode", "")
        lines.append(f"Triton kernels ({mode}), ms per call:")
        for k, v in res.triton_interpreter_ms.items():
            if k != "mode":
                lines.append(f"  {k:<45}{v:>10.1f}" if isinstance(v, float) else f"  {k}: {v}")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specverify.kerneltools.bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=None, help="keep the model's first n layers (default: all)")
    ap.add_argument("--tiny", action="store_true", help="random_llama's small test config instead of SmolLM2's shapes")
    ap.add_argument("--context", type=int, default=128, help="positions prefilled before the timed steps (>= 1)")
    ap.add_argument("--kappa", type=int, action="append", default=None, help="verify steps of kappa+1 tokens (default 3, 7)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps-per-round", type=int, default=3)
    ap.add_argument("--parallel", action="store_true", help="invariant backend on numba's threads")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch intra-op threads for the run (default: torch's choice; 1 is robust on a busy machine)")
    ap.add_argument("--no-triton", action="store_true", help="skip the Triton interpreter timings")
    ap.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH ('-' = stdout)")
    args = ap.parse_args(argv)
    if not args.no_triton:
        from specverify.kernels.triton_common import interpret_without_gpu
        interpret_without_gpu()
    if args.threads:
        import torch
        torch.set_num_threads(args.threads)
    if args.context < 1:
        ap.error("--context must be >= 1")
    res = run_bench(args.layers, args.context, tuple(args.kappa or (3, 7)), args.rounds, args.steps_per_round,
                    args.parallel, not args.no_triton, tiny=args.tiny)
    if args.json == "-":
        print(json.dumps(res.to_dict(), indent=1))
        return 0
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res.to_dict(), f, indent=1)
    print(format_table(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
