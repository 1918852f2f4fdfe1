"""Kernel-only timing: the exact Q4_1/Q8_0 kernel (cpu_linear_q) against the 8-bit-activation one (cpu_linear_q8) at SmolLM2 shapes, M = 1 and 4, best of 5x10 calls, interleaved: `python reports/bench/q8_kernels.py`."""
import time

import numpy as np

from specverify.kernels import cpu_linear_q, cpu_linear_q8
from specverify.kernels.registry import random_blocks
SHAPES = [("Q4_1", 960, 576), ("Q4_1", 3072, 576), ("Q4_1", 576, 1536), ("Q8_0", 49152, 576)]   # qkv, gate_up, down, the head (exact on both)
rng = np.random.default_rng(0)
for kind, n, k in SHAPES:
    w = random_blocks(kind, n, k, rng)
    pk = cpu_linear_q.pack(w)
    for m in (1, 4):
        x = rng.standard_normal((m, k)).astype(np.float32)
        cpu_linear_q.linear(x, pk, n, k); cpu_linear_q8.linear(x, pk, n, k)
        res = {}
        for name, f in (("exact", cpu_linear_q.linear), ("q8", cpu_linear_q8.linear)):
            best = 1e9
            for _ in range(5):
                t = time.perf_counter(); 
                for _ in range(10): f(x, pk, n, k)
                best = min(best, (time.perf_counter() - t) / 10)
            res[name] = best
        print(kind, n, k, m, {a: f"{b*1e6:.0f}us" for a, b in res.items()}, f"x{res['exact']/res['q8']:.2f}", flush=True)
