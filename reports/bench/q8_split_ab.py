"""Issue 30, the 2-thread fused layer: in one process, SmolLM2 plain decode on `invariant-q8` at
1 thread (serial layer), 2 threads with the layer unsplit (only the head splits: the old
behaviour), 2 threads split from LAYER_SPLIT_MIN_WORK (the default) and 2 threads with every
linear split (each linear's panels over numba's threads), interleaved, AB_REPS
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
from specverify.kernels.cpu_backend import LAYER_SPLIT_MIN_WORK, InvariantBackend
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


run(1, cpu_layer_q8.NO_SPLIT)
run(2, 0)                                          # warm / compile
MODES = (("1t", 1, cpu_layer_q8.NO_SPLIT), ("2t-nosplit", 2, cpu_layer_q8.NO_SPLIT),
         ("2t-split", 2, LAYER_SPLIT_MIN_WORK), ("2t-splitall", 2, 0))
out = {k: [] for k, _, _ in MODES}
ref = None
print("load before", os.getloadavg())
for rep in range(int(os.environ.get("AB_REPS", "3"))):
    for key, th, sp in MODES:
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
for key in ("2t-split", "2t-splitall"):
    print(f"{key}/2t-nosplit: %.2f" % (np.median(out[key]) / np.median(out["2t-nosplit"])))
print("logits rows bit-equal across all runs:", len(ref[1]), "rows each")
