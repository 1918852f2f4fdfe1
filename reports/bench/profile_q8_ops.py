"""Per-op CPU profile of a decode step on the q8 path (issue 30): `python reports/bench/profile_q8_ops.py`.

For M = 1 (a decode step) and M = 4 (an n-gram kappa 3 verify step), each op of SmolLM2-135M on
the invariant-q8 backend at its real shapes, 1 thread: CPU time per call (`time.thread_time`, best
of 5 loops: on the shared, loaded machine CPU time is what the op costs, wall time is mostly
waiting), the step's sum over its 30 layers and the head, and the same step measured whole
(`generate`, plain decode and n-gram kappa 3, decode CPU time per forward): the difference is the
engine's Python outside the ops. Since issue 30's fused layer the decode path runs each layer in
one numba call (`cpu_layer_q8.layer_q4_1`, timed as "fused layer"), not through the launchers. Prints a table; writes nothing.
"""

import os
import time

import numba
import numpy as np
import torch

from specverify.engine.api import RunOptions, SpecOptions, generate
from specverify.engine.engine import SamplingParams
from specverify.engine.loader import load_smollm2
from specverify.kernels import cpu_layer_q8, cpu_linear_q8, cpu_rotary
from specverify.kernels.cpu_backend import InvariantBackend
from specverify.models.prompts import encode_prompts, load_prompts

CTX = 150
"""Context length the attention rows are timed at (a bench prompt plus ~40 tokens)."""


def cpu_per_call(f, n: int) -> float:
    f()
    best = float("inf")
    for _ in range(5):
        c0 = time.thread_time()
        for _ in range(n):
            f()
        best = min(best, (time.thread_time() - c0) / n)
    return best


def main() -> None:
    torch.set_num_threads(1)
    numba.set_num_threads(1)
    be = InvariantBackend(activations="q8")
    model, tok = load_smollm2("invariant-q8", "quantized")
    c, lay = model.config, model.layers[0]
    n_layers = len(model.layers)
    print(f"load average {os.getloadavg()}; CPU time per call (us), 1 thread")
    steps, fused = {}, {}
    for m in (1, 4):
        g = torch.Generator().manual_seed(m)
        x = torch.randn(m, c.dim, generator=g)
        gu = torch.randn(m, 2 * c.ffn_dim, generator=g)
        qk = torch.randn(m, c.n_heads + c.n_kv_heads, c.head_dim, generator=g)
        pos = torch.arange(CTX, CTX + m)
        blocks = (CTX + m + 15) // 16
        kc = torch.randn(blocks, 16, c.n_kv_heads, c.head_dim, generator=g)
        vc = torch.randn(blocks, 16, c.n_kv_heads, c.head_dim, generator=g)
        q = torch.randn(m, c.n_heads, c.head_dim, generator=g)
        bt = torch.arange(blocks, dtype=torch.int32)[None]
        cl = torch.tensor([CTX + m], dtype=torch.int32)
        cu = torch.tensor([0, m], dtype=torch.int32)
        ops = {
            "qkv": (1, lambda: be.linear(x, lay.wqkv)),
            "o": (1, lambda: be.linear(torch.randn(m, c.n_heads * c.head_dim), lay.wo)),
            "gate_up": (1, lambda: be.linear(x, lay.w_gate_up)),
            "down": (1, lambda: be.linear(gu[:, :c.ffn_dim].contiguous(), lay.w_down)),
            "attention": (1, lambda: be.attention(q, kc, vc, bt, cl, cu, c.head_dim ** -0.5)),
            "rms_norm x2": (2, lambda: be.rms_norm(x, lay.attn_norm, c.norm_eps)),
            "rotary": (1, lambda: be.rotary(qk, pos, c.rope_theta)),
            "silu_mul": (1, lambda: be.silu_mul(gu[:, :c.ffn_dim], gu[:, c.ffn_dim:])),
        }
        total = 0.0
        print(f"M = {m}")
        for name, (times, f) in ops.items():
            t = cpu_per_call(f, 100) * times
            total += t * n_layers
            print(f"  {name:12} {t * 1e6:8.1f}   x{n_layers} layers {t * n_layers * 1e3:6.2f} ms")
        # the decode path itself: the whole layer in one numba call (cpu_layer_q8, what Llama.forward runs on q8)
        mats = [a for w in (lay.wqkv, lay.wo, lay.w_gate_up, lay.w_down)
                for a in w.packed(cpu_linear_q8.PACK_KEY, lambda w=w: cpu_linear_q8.pack(w))[1:]]
        kn, vn = kc.numpy().copy(), vc.numpy().copy()
        p64 = pos.numpy().astype(np.int64)
        args = (x.numpy(), lay.attn_norm.numpy(), lay.ffn_norm.numpy(), np.float32(c.norm_eps), *mats, kn, vn, p64, p64,
                cpu_rotary.inv_freq(c.head_dim, c.rope_theta), bt.numpy().astype(np.int64), np.zeros(1, np.int64),
                np.array([m], np.int64), cl.numpy().astype(np.int64), np.float32(c.head_dim ** -0.5),
                c.n_heads, c.n_kv_heads, c.ffn_dim)
        t = cpu_per_call(lambda: cpu_layer_q8.layer_q4_1(*args), 100)
        print(f"  {'fused layer':12} {t * 1e6:8.1f}   x{n_layers} layers {t * n_layers * 1e3:6.2f} ms   (one call: all of the above but the head)")
        fused[m] = t * n_layers
        xh = torch.randn(m, c.dim)
        t = cpu_per_call(lambda: be.linear(xh, model.head), 10)
        total += t
        fused[m] += t
        print(f"  {'head':12} {t * 1e6:8.1f}   {'':>10} {t * 1e3:6.2f} ms")
        print(f"  ops of one step: {total * 1e3:.2f} ms through the launchers, {fused[m] * 1e3:.2f} ms fused layers + head")
        steps[m] = total
    ids = encode_prompts(tok, load_prompts(1, categories=["edit"]))[0]
    for spec, kappa in (("none", 0), ("ngram", 3)):
        stamps = []

        def run():
            stamps.clear()
            return generate(model, None, [ids], sampling=SamplingParams(temperature=0.0, max_tokens=64),
                            spec=SpecOptions(spec, kappa=kappa, ngram_n=4, ngram_min=2),
                            run=RunOptions(backend=be, eos_token_id=tok.eos_id,
                                           on_step=lambda ev: stamps.append(time.thread_time())))
        run()
        res = run()
        steps_run = len(stamps) - 1
        cpu = stamps[-1] - stamps[0]
        print(f"generate {spec} kappa {kappa}: {len(res.tokens[0])} tokens, {steps_run} decode forwards, "
              f"{cpu / steps_run * 1e3:.2f} ms CPU a forward, {cpu / (len(res.tokens[0]) - 1) * 1e3:.2f} ms a token")
    print(f"verify step (M=4) / decode step (M=1), ops only: {steps[4] / steps[1]:.2f} through the launchers, "
          f"{fused[4] / fused[1]:.2f} fused")


if __name__ == "__main__":
    main()
