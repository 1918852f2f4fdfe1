"""Benchmark: the "invariant" CPU backend against the "default" backend (and the Triton kernels).

    python -m specverify.kerneltools.bench [--layers 30] [--context 128] [--rounds 5] [--json PATH|-]

A layer stack of SmolLM2-135M's shapes (random fp32 weights: D 576, 9 query / 3 KV heads of 64,
FFN 1536, vocab 49152, tied head, 30 layers; weights stored [in, out] like the engine's) runs one
decode step (1 token) and verify steps of kappa + 1 tokens (kappa = 3, 7) over a paged KV cache
holding `--context` earlier positions, with each backend, rounds interleaved (A B A B ..), the
median step time of each (backend, step) taken over all rounds. Reported: step time, tokens/s
(tokens of the step / step time: for verify, the positions scored), and the ratio invariant /
default of tokens/s measured in this one run -- the machine's other load affects both alike.
Also: whether row 0 of each verify step equals the decode step's logits at the same position bit
for bit (True for a batch-invariant backend), and the Triton interpreter's time per kernel call
on a small shape (without a GPU; with one, the GPU numbers come from `gpu_check.py`).
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

SMOLLM2_135M = dict(dim=576, n_heads=9, n_kv_heads=3, head_dim=64, ffn_dim=1536, vocab=49152, n_layers=30,
                    rope_theta=100000.0, eps=1e-5)


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


class LayerStack:
    """A SmolLM2-shaped Llama over an op backend (the engine's forward, without the tokenizer)."""

    def __init__(self, n_layers: int, seed: int = 0, cfg=None):
        import torch
        self.cfg = dict(SMOLLM2_135M, **(cfg or {}), n_layers=n_layers)
        c = self.cfg
        g = torch.Generator().manual_seed(seed)
        qkv = (c["n_heads"] + 2 * c["n_kv_heads"]) * c["head_dim"]

        def lin(n_out, n_in):             # [out, in] view over [in, out] storage, as the engine does
            return (torch.randn(n_out, n_in, generator=g) * n_in ** -0.5).T.contiguous().T

        def norm(d):
            return 1.0 + 0.1 * torch.randn(d, generator=g)
        self.layers = [dict(attn_norm=norm(c["dim"]), wqkv=lin(qkv, c["dim"]),
                            wo=lin(c["dim"], c["n_heads"] * c["head_dim"]), ffn_norm=norm(c["dim"]),
                            w_gate_up=lin(2 * c["ffn_dim"], c["dim"]), w_down=lin(c["dim"], c["ffn_dim"]))
                       for _ in range(n_layers)]
        self.embed = torch.randn(c["vocab"], c["dim"], generator=g)
        self.head = self.embed.T.contiguous().T
        self.norm = norm(c["dim"])

    def make_cache(self, n_ctx: int, block_size: int = 16, seed: int = 1):
        import torch
        c = self.cfg
        n_blocks = math.ceil((n_ctx + 16) / block_size) + 2
        g = torch.Generator().manual_seed(seed)
        shape = (c["n_layers"], n_blocks, block_size, c["n_kv_heads"], c["head_dim"])
        k, v = torch.randn(shape, generator=g), torch.randn(shape, generator=g)
        table = torch.randperm(n_blocks, generator=g)[:n_blocks].to(torch.int32)[None, :]
        return k, v, table, block_size

    def forward(self, be, tokens, start: int, cache):
        """Logits [T, V] for `tokens` at positions start .. start+T-1 of one request."""
        import torch
        c = self.cfg
        k_cache, v_cache, table, bs = cache
        T, Hq, Hkv, Dh = len(tokens), c["n_heads"], c["n_kv_heads"], c["head_dim"]
        pos = torch.arange(start, start + T)
        slots = table[0, pos // bs].long() * bs + pos % bs
        ctx = torch.tensor([start + T], dtype=torch.int32)
        cu = torch.tensor([0, T], dtype=torch.int32)
        x = self.embed[torch.as_tensor(tokens)]
        for i, w in enumerate(self.layers):
            h = be.rms_norm(x, w["attn_norm"], c["eps"])
            qkv = be.linear(h, w["wqkv"])
            qk = be.rotary(qkv[:, :(Hq + Hkv) * Dh].reshape(T, Hq + Hkv, Dh), pos, c["rope_theta"])
            q, k = qk[:, :Hq].contiguous(), qk[:, Hq:]
            v = qkv[:, (Hq + Hkv) * Dh:].reshape(T, Hkv, Dh)
            k_cache[i].view(-1, Hkv, Dh).index_copy_(0, slots, k)
            v_cache[i].view(-1, Hkv, Dh).index_copy_(0, slots, v)
            a = be.attention(q, k_cache[i], v_cache[i], table, ctx, cu, Dh ** -0.5)
            x = x + be.linear(a.reshape(T, Hq * Dh), w["wo"])
            h = be.rms_norm(x, w["ffn_norm"], c["eps"])
            gate_up = be.linear(h, w["w_gate_up"])
            x = x + be.linear(be.silu_mul(gate_up[:, :c["ffn_dim"]], gate_up[:, c["ffn_dim"]:]), w["w_down"])
        return be.linear(be.rms_norm(x, self.norm, c["eps"]), self.head)


def run_bench(n_layers: int = 30, context: int = 128, kappas=(3, 7), rounds: int = 5, steps_per_round: int = 3,
              parallel: bool = False, triton_small: bool = True, seed: int = 0) -> BenchResult:
    import torch

    from specverify.kernels.backend import get_backend
    from specverify.kernels.cpu_backend import InvariantBackend
    model = LayerStack(n_layers, seed)
    backends = {"default": get_backend("default"), "invariant": InvariantBackend(parallel=parallel)}
    g = torch.Generator().manual_seed(seed + 7)
    vocab = model.cfg["vocab"]
    steps = [("decode", 1)] + [(f"verify(kappa={k})", k + 1) for k in kappas]
    tokens = {name: torch.randint(0, vocab, (n,), generator=g).tolist() for name, n in steps}
    caches = {name: model.make_cache(context) for name in backends}
    times = {(b, s): [] for b in backends for s, _ in steps}
    with torch.inference_mode():
        for b, be in backends.items():                 # warm-up: numba compile, weight packing
            for s, n in steps:
                model.forward(be, tokens[s], context, caches[b])
        for _ in range(rounds):
            for b, be in backends.items():
                for s, n in steps:
                    for _ in range(steps_per_round):
                        t0 = time.perf_counter()
                        model.forward(be, tokens[s], context, caches[b])
                        times[(b, s)].append(time.perf_counter() - t0)
        # row 0 of a verify step vs the decode step at the same position (same token, same cache)
        row0 = {}
        for b, be in backends.items():
            row0[b] = {}
            for k in kappas:
                toks = [tokens["decode"][0]] + tokens[f"verify(kappa={k})"][1:]
                dec = model.forward(be, toks[:1], context, caches[b])
                ver = model.forward(be, toks, context, caches[b])
                row0[b][str(k)] = bool(torch.equal(ver[0], dec[0]))
    results = []
    med = {key: statistics.median(v) for key, v in times.items()}
    for s, n in steps:
        ms = {b: med[(b, s)] * 1e3 for b in backends}
        tps = {b: n / med[(b, s)] for b in backends}
        results.append(asdict(StepTiming(s, n, ms, tps, tps["invariant"] / tps["default"],
                                         {b: med[(b, s)] / med[(b, "decode")] for b in backends})))
    res = BenchResult(
        config=dict(model.cfg, context=context, rounds=rounds, steps_per_round=steps_per_round, parallel=parallel),
        steps=results, row0_equals_decode=row0,
        environment=dict(torch=torch.__version__, threads=torch.get_num_threads(), cpu_count=os.cpu_count(),
                         load_avg_1min=os.getloadavg()[0]))
    if triton_small:
        res.triton_interpreter_ms = triton_interpreter_timings()
    return res


def triton_interpreter_timings(reps: int = 3) -> dict:
    """ms per call of each Triton kernel on a small shape, under TRITON_INTERPRET=1 (or on a GPU)."""
    import numpy as np
    import torch

    from specverify.kernels.backend import get_backend
    from specverify.kernels.triton_common import require_triton
    try:
        require_triton()
    except Exception as exc:                           # noqa: BLE001 -- reported, not raised
        return {"skipped": str(exc)}
    be = get_backend("triton")
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 64, generator=g).to(dev)
    w = torch.randn(64, 64, generator=g).to(dev)
    rows = torch.randn(4, 256, generator=g).to(dev)
    qkv = torch.randn(4, 6, 16, generator=g).to(dev)
    pos = torch.arange(20, 24).to(dev)
    kc = torch.randn(8, 4, 2, 16, generator=g).to(dev)
    vc = torch.randn(8, 4, 2, 16, generator=g).to(dev)
    bt = torch.tensor([[3, 1, 4, 0, 5, 2, 7, 6]], dtype=torch.int32, device=dev)
    ctx = torch.tensor([24], dtype=torch.int32, device=dev)
    cu = torch.tensor([0, 4], dtype=torch.int32, device=dev)
    calls = {
        "linear[4x64 @ 64x64]": lambda: be.linear(x, w),
        "rms_norm[4x256]": lambda: be.rms_norm(rows, rows[0], 1e-5),
        "softmax[4x256]": lambda: be.softmax(rows),
        "silu_mul[4x128]": lambda: be.silu_mul(rows[:, :128], rows[:, 128:]),
        "rotary[4x6x16]": lambda: be.rotary(qkv, pos, 10000.0),
        "attention[4 queries x 4 heads, ctx 24]": lambda: be.attention(qkv[:, :4].contiguous(), kc, vc, bt, ctx, cu, 0.25),
    }
    from specverify.reference.batch import Coins, VerifyBatch

    from specverify.kernels import sampler
    rng = np.random.default_rng(0)
    p = rng.dirichlet(np.ones(64), size=8)
    batch = VerifyBatch.from_requests([([1, 2, 3], p[:4], p[4:7], False), ([5], p[6:8], p[7:8], False)])
    coins = Coins.random(batch, rng)
    calls["sampler.verify[2 requests, 4 drafts, V 64]"] = lambda: sampler.verify(batch, coins)
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
    lines = [f"layer stack: {res.config['n_layers']} layers of SmolLM2-135M shapes, context {res.config['context']}, "
             f"{res.environment['threads']} torch threads, invariant parallel={res.config['parallel']}, "
             f"load average {res.environment['load_avg_1min']:.1f} on {res.environment['cpu_count']} CPUs",
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
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--context", type=int, default=128, help="KV positions already in the cache")
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
    res = run_bench(args.layers, args.context, tuple(args.kappa or (3, 7)), args.rounds, args.steps_per_round,
                    args.parallel, not args.no_triton)
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
