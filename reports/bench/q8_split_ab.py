"""Issue 30, the 2-thread fused layer: in one process, SmolLM2 plain decode on `invariant-q8` at
1 thread (serial layer), 2 threads with the layer unsplit (only the head splits: the old
behaviour) and 2 threads split (each linear's panels over numba's threads), interleaved, AB_REPS
repeats of AB_TOKENS tokens; prints the tok/s (median and each) and the split/unsplit ratio, and
fails if any run's tokens or logits rows differ in a bit from the first run's.

    uptime; python reports/bench/q8_split_ab.py; uptime
"""
import os
import time

import numba
import numpy as np
import torch

from specverify.kernels import cpu_layer_q8
from specverify.kernels.cpu_backend import InvariantBackend
from specverify.engine.api import RunOptions, SpecOptions, generate
from specverify.engine.engine import SamplingParams
from specverify.engine.loader import load_smollm2

model, tok = load_smollm2("default", "quantized")
prompts = [tok.encode("The history of the city begins with")]
real = cpu_layer_q8.layer_q4_1
mode = {"split": None}


def layer(*a):
    a = list(a)
    if mode["split"] is not None:
        a[-1] = mode["split"]
    return real(*a)


cpu_layer_q8.layer_q4_1 = layer
N = int(os.environ.get("AB_TOKENS", "48"))


def run(threads, split):
    torch.set_num_threads(threads); numba.set_num_threads(threads)
    mode["split"] = split
    be = InvariantBackend(parallel=threads > 1, activations="q8")
    rows = {}
    t = time.perf_counter()
    res = generate(model, None, prompts, sampling=SamplingParams(temperature=0.0, max_tokens=N), spec=SpecOptions("none", kappa=0),
                   run=RunOptions(backend=be, eos_token_id=None, record_logits=lambda r, i, row: rows.__setitem__((r, i), row.clone())))
    return N / (time.perf_counter() - t), res.tokens, rows


run(1, False); run(2, True)   # warm / compile
out = {k: [] for k in ("1t", "2t-nosplit", "2t-split")}
ref = None
print("load before", os.getloadavg())
for rep in range(int(os.environ.get("AB_REPS", "3"))):
    for key, th, sp in (("1t", 1, False), ("2t-nosplit", 2, False), ("2t-split", 2, True)):
        r, toks, rows = run(th, sp)
        out[key].append(r)
        if ref is None:
            ref = (toks, rows)
        else:
            same = toks == ref[0] and all(torch.equal(rows[k].view(torch.int32), ref[1][k].view(torch.int32)) for k in ref[1])
            if not same:
                raise SystemExit(f"{key}: tokens or logits differ from the 1-thread run")
print("load after", os.getloadavg())
for k, v in out.items():
    print(k, "tok/s median %.1f" % np.median(v), ["%.1f" % x for x in v])
print("split/nosplit at 2 threads: %.2f" % (np.median(out["2t-split"]) / np.median(out["2t-nosplit"])))
print("all logits rows bit-equal across 1t / 2t-nosplit / 2t-split:", len(ref[1]), "rows")
