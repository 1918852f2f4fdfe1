"""GPU check: the Triton kernels' invariance, exactness and speed on a real CUDA device, as JSON.

    python -m specverify.kerneltools.gpu_check [--out FILE]   # on a CUDA machine, TRITON_INTERPRET unset
    python -m specverify.kerneltools.gpu_check --smoke        # tiny shapes, any device (the interpreter
                                                              # on a CPU): keeps this script from rotting

It runs, with the kernels compiled for the device (no interpreter), for every op of the registry
(`specverify.kernels.registry`) at each of its model shapes and dtypes (the small ones with --smoke),
on the "triton" backend and, for comparison, on "default" (torch/cuBLAS):
  * invariance (`invariance.py`): every launch size in 1..64 (launches of a vocabulary-wide row:
    1..16); paged attention in mixed decode/verify/prefill launches;
  * accuracy against the float64 references (`accuracy_check.py`; reported, not gated: a GPU's exp
    is not libm's), and the matmul's error relative to sum |x||w| per dtype;
  * the sampler kernels against the float64 reference on V = 49152 rows, random and endpoint coins,
    chain and tree;
  * a benchmark: microseconds per call of every op at 1, 4, 8, 64 and 512 rows (attention: queries
    of one request: a decode step, then verify steps), Triton vs default, and the sampler kernels
    (CUDA-synchronised, median of repeats).
Exit status 0 when every invariance and exactness check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from specverify.kernels.registry import OPS

SMOKE_SIZES = (1, 2, 17)
"""Launch sizes of the smoke run (17 rows: two of the matmul's 16-row tiles)."""
BENCH_ROWS = (1, 4, 8, 64, 512)
"""Rows (attention: queries) per timed launch: a decode step, verify steps, batches."""
SMOKE_BENCH_ROWS = (1, 4)
VOCAB = 49152
"""Width of the sampler kernels' rows (SmolLM2's vocabulary)."""
SMOKE_VOCAB = 16


def _timed(fn, device, reps=20):
    import torch
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if device == "cuda":
            torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e6


def run(smoke: bool = False) -> dict:
    import numpy as np
    import torch

    from specverify.reference.batch import Coins, VerifyBatch
    from specverify.reference.chain import verify_batch
    from specverify.reference.tree import DraftTree
    from specverify.reference.tree import tree_verify as ref_tree

    from specverify.kernels import sampler
    from specverify.kernels.backend import get_backend

    from . import accuracy_check, invariance
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tri = get_backend("triton")
    default = get_backend("default")
    out = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (TRITON_INTERPRET=1)",
           "smoke": smoke, "torch": torch.__version__}
    import triton
    out["triton"] = triton.__version__

    # ------------------------------------------------------------ invariance and accuracy, every op
    sizes = SMOKE_SIZES if smoke else None
    inv = [r for be in (tri, default) for r in invariance.battery(be, quick=smoke, device=device, sizes=sizes)]
    out["invariance"] = [r.to_dict() for r in inv]
    ok = all(r.ok for r in inv if r.backend == "triton")
    out["accuracy"] = [r.to_dict() for be in (tri, default)
                       for r in accuracy_check.battery(be, quick=smoke, device=device)]

    # ------------------------------------------------------------ the matmul against float64
    g = torch.Generator().manual_seed(0)
    shape = (OPS["linear"].small if smoke else OPS["linear"].model)[0].args
    k = shape["k"]
    x = torch.randn(64, k, generator=g, dtype=torch.float64)
    w = torch.randn(shape["n"], k, generator=g, dtype=torch.float64) * k ** -0.5
    ref = x @ w.T
    scale = x.abs() @ w.abs().T
    acc = {}
    for dt in (torch.float32, torch.bfloat16, torch.float16):
        xd, wd = x.to(dt), w.to(dt)
        y = tri.linear(xd.to(device), wd.to(device)).double().cpu()
        exact = xd.double() @ wd.double().T                      # same rounded inputs
        acc[str(dt).replace("torch.", "")] = {
            "max_err_over_sum_abs": float(((y - exact).abs() / scale).max()),
            "max_err_vs_fp64_inputs": float((y - ref).abs().max()),
        }
    out["linear_accuracy"] = acc

    # ------------------------------------------------------------ sampler kernels vs the reference
    rng = np.random.default_rng(0)
    v = SMOKE_VOCAB if smoke else VOCAB
    exact_runs, exact_ok = 0, True

    def rows_(n):
        p = rng.dirichlet(np.full(v, 0.3), size=n)
        p[:, rng.integers(v, size=3)] = 0.0
        return p / p.sum(1, keepdims=True)
    for with_q in (True, False):
        reqs = []
        for kk in (3, 0, 7, 1) if not smoke else (2, 0, 1):
            t = rows_(kk + 1)
            q = 0.5 * t[:kk] + 0.5 * rows_(kk) if kk else np.zeros((0, v))
            q = q / q.sum(1, keepdims=True) if kk else q
            src = q if with_q else t[:kk]
            reqs.append(([int(rng.choice(v, p=src[i])) for i in range(kk)], t, q if with_q else None, False))
        b = VerifyBatch.from_requests(reqs)
        coin_sets = [Coins.random(b, rng) for _ in range(1 if smoke else 4)]
        ends = (0.0, 1.0) if smoke else (0.0, 5e-324, 1 - 2 ** -53, 1 - 2 ** -24, 1.0)
        coin_sets += [Coins(np.full(int(b.num_draft_tokens.sum()), c), np.full(b.batch_size, c)) for c in ends]
        for coins in coin_sets:
            exact_runs += 1
            exact_ok &= bool(np.array_equal(sampler.verify(b, coins), verify_batch(b, coins)))
    tree = DraftTree([int(x) for x in rng.integers(0, v, 6)], [-1, -1, 0, 0, 2, 4])
    tp = rows_(7)
    for coins in (rng.random(6), np.ones(6)) if smoke else (rng.random(6), np.zeros(6), np.ones(6)):
        exact_runs += 1
        got, want = sampler.tree_verify(tree, tp, None, coins, 0.5), ref_tree(tree, tp, None, coins, 0.5)
        exact_ok &= all(np.array_equal(a, c) for a, c in zip(got, want))
    out["sampler_exact"] = {"runs": exact_runs, "ok": exact_ok, "vocab": v}
    ok &= exact_ok

    # ------------------------------------------------------------ benchmark, every op
    bench = {}
    reps = 1 if smoke else 20
    for op in OPS.values():
        for shape in op.small if smoke else op.model:
            for dt in shape.dtypes:
                case = op.case(0, dt, device, **shape.args)
                for m in SMOKE_BENCH_ROWS if smoke else BENCH_ROWS:
                    args = case.args(case.batch(m))
                    row = bench[f"{case.label} M={m}"] = {}
                    for be in (tri, default):
                        fn = getattr(be, op.name)
                        row[f"{be.name}_us"] = _timed(lambda: fn(*args), device, reps)
    bench[f"sampler.verify[4 requests, 11 drafts, V {v}]"] = {
        "triton_us": _timed(lambda: sampler.verify(b, coin_sets[0]), device, max(1, reps // 4)),
        "reference_us": _timed(lambda: verify_batch(b, coin_sets[0]), "cpu", max(1, reps // 4))}
    out["bench"] = bench
    out["ok"] = bool(ok)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m specverify.kerneltools.gpu_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on any device (interpreter on a CPU)")
    ap.add_argument("--out", help="also write the JSON to this file")
    args = ap.parse_args(argv)
    import torch

    from specverify.kernels.triton_common import interpret_without_gpu, interpreting
    if not args.smoke:
        if not torch.cuda.is_available():
            print(json.dumps({"ok": False, "error": "no CUDA device (use --smoke for the interpreter)"}))
            return 2
        if interpreting():
            print(json.dumps({"ok": False, "error": "unset TRITON_INTERPRET to run the kernels on the GPU"}))
            return 2
    else:
        interpret_without_gpu()
    t0 = time.perf_counter()
    res = run(smoke=args.smoke)
    res["seconds"] = time.perf_counter() - t0
    text = json.dumps(res, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    print(text)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
