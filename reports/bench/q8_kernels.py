"""Kernel-only timing of one decode step's linears: the exact Q4_1/Q8_0 kernel (cpu_linear_q) against
the 8-bit-activation one (cpu_linear_q8, integer block sums) over SmolLM2's 121 matrices as distinct
seeded weights (30 layers x qkv, o, gate_up, down + the Q8_0 head: ~100 MB, streamed from memory as
in a real step), M = 1 and 4 (a kappa-3 verify), best of 4 interleaved passes, wall and thread CPU
time (the CPU time is less sensitive to the shared machine's load): `python reports/bench/q8_kernels.py`."""
import time

import numpy as np

from specverify.kernels import cpu_linear_q, cpu_linear_q8, quant
from specverify.kernels.registry import random_blocks

LAYER = [(quant.Q4_1, 960, 576), (quant.Q4_1, 576, 576), (quant.Q4_1, 3072, 576), (quant.Q4_1, 576, 1536)]
SHAPES = LAYER * 30 + [(quant.Q8_0, 49152, 576)]
rng = np.random.default_rng(0)
weights = [random_blocks(kind, n, k, rng) for kind, n, k in SHAPES]
kernels = {"exact": (cpu_linear_q, [cpu_linear_q.pack(w) for w in weights]),
           "q8": (cpu_linear_q8, [cpu_linear_q8.pack(w) for w in weights])}


def step(mod, packs, m):
    for (_, n, k), p in zip(SHAPES, packs):
        mod.linear(np.ones((m, k), np.float32), p, n, k)


for m in (1, 4):
    res = {name: [] for name in kernels}
    for name, (mod, packs) in kernels.items():
        step(mod, packs, m)                                       # compile
    for _ in range(4):
        for name, (mod, packs) in kernels.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            step(mod, packs, m)
            res[name].append((time.perf_counter() - t0, time.thread_time() - c0))
    wall = {k: min(a for a, _ in v) for k, v in res.items()}
    cpu = {k: min(b for _, b in v) for k, v in res.items()}
    print(f"M={m}: " + ", ".join(f"{k} wall {wall[k] * 1e3:.1f} ms cpu {cpu[k] * 1e3:.1f} ms" for k in kernels)
          + f"; exact/q8 cpu x{cpu['exact'] / cpu['q8']:.2f}", flush=True)
