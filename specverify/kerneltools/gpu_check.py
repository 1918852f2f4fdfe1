"""GPU check: the Triton kernels' invariance, exactness and speed on a real CUDA device, as JSON.

    python -m specverify.kerneltools.gpu_check [--out FILE]     # on a CUDA machine, TRITON_INTERPRET unset
    python -m specverify.kerneltools.gpu_check --smoke          # tiny shapes, any device (the interpreter
                                                            # on a CPU): keeps this script from rotting

It runs, with the kernels compiled for the device (no interpreter):
  * invariance (`invariance.py`): linear fp32/bf16/fp16 at SmolLM2 shapes for every M in 1..64;
    rms_norm, softmax, log_softmax (a 49152 vocabulary), silu_mul, rotary; paged attention with
    SmolLM2's heads (9 query / 3 KV, head dim 64) in mixed decode/verify/prefill launches; and the
    same harness on the "default" backend (torch/cuBLAS) for comparison;
  * accuracy of the matmul against float64;
  * the sampler kernels against the float64 reference on V = 49152 rows, random and endpoint coins,
    chain and tree;
  * a benchmark: Triton matmul vs torch.matmul (cuBLAS) per M, paged attention decode/verify, the
    sampler kernels (microseconds per call, CUDA-synchronised, median of repeats).
Exit status 0 when every invariance and exactness check passes, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time


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

    from . import invariance
    device = "cuda" if torch.cuda.is_available() else "cpu"
    tri = get_backend("triton")
    default = get_backend("default")
    out = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu (TRITON_INTERPRET=1)",
           "smoke": smoke, "torch": torch.__version__}
    import triton
    out["triton"] = triton.__version__

    # ------------------------------------------------------------ invariance
    if smoke:
        dims = dict(k=40, n=40, sizes=(1, 2, 17), pool=17)
        rows = dict(sizes=(1, 3, 17), pool=17)
        vocab, d_model, ffn = 300, 48, 64
        att = dict(n_requests=2, max_ctx=10, block_size=4, n_q_heads=2, n_kv_heads=1, head_dim=8, launches=3,
                   max_new=4)
    else:
        dims = dict(k=576, n=960, sizes=range(1, 65), pool=64)
        rows = dict(sizes=range(1, 65), pool=64)
        vocab, d_model, ffn = 49152, 576, 1536
        att = dict(n_requests=4, max_ctx=200, block_size=16, n_q_heads=9, n_kv_heads=3, head_dim=64, launches=40,
                   max_new=9)
    inv = []
    for name, be in (("triton", tri), ("default", default)):
        for dt in (torch.float32, torch.bfloat16, torch.float16):
            inv.append(invariance.linear_invariance(be, dtype=dt, device=device, **dims))
        if not smoke:
            inv.append(invariance.linear_invariance(be, k=1536, n=576, device=device, sizes=range(1, 65), pool=64))
        for op, d in (("rms_norm", d_model), ("softmax", vocab), ("log_softmax", vocab), ("silu_mul", ffn)):
            inv.append(invariance.row_op_invariance(be, op, d, device=device, **rows))
        inv.append(invariance.rotary_invariance(be, heads=3 if smoke else 12, head_dim=16 if smoke else 64,
                                                device=device, **rows))
        inv.append(invariance.attention_invariance(be, device=device, **att))
    out["invariance"] = [r.to_dict() for r in inv]
    ok = all(r.ok for r in inv if r.backend == "triton")

    # ------------------------------------------------------------ accuracy of the matmul
    g = torch.Generator().manual_seed(0)
    k = dims["k"]
    x = torch.randn(64, k, generator=g, dtype=torch.float64)
    w = torch.randn(dims["n"], k, generator=g, dtype=torch.float64) * k ** -0.5
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
    v = 16 if smoke else vocab
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

    # ------------------------------------------------------------ benchmark
    bench = {}
    reps = 1 if smoke else 20
    shapes = [(40, 40)] if smoke else [(576, 960), (576, 3072), (1536, 576), (576, 49152)]
    for kk, n in shapes:
        for dt in (torch.float32, torch.bfloat16):
            wt = (torch.randn(n, kk, generator=g) * kk ** -0.5).to(device=device, dtype=dt)
            for m in (1, 4) if smoke else (1, 4, 8, 64, 512):
                xt = torch.randn(m, kk, generator=g).to(device=device, dtype=dt)
                key = f"linear[{m}x{kk} @ {kk}x{n},{str(dt).replace('torch.', '')}]"
                bench[key] = {"triton_us": _timed(lambda: tri.linear(xt, wt), device, reps),
                              "torch_us": _timed(lambda: xt @ wt.T, device, reps)}
    nb = 8 if smoke else 80
    hq, hkv, dh, bs = (2, 1, 8, 4) if smoke else (9, 3, 64, 16)
    kc = torch.randn(nb, bs, hkv, dh, generator=g).to(device)
    vc = torch.randn(nb, bs, hkv, dh, generator=g).to(device)
    bt = torch.randperm(nb, generator=g).to(torch.int32)[None].to(device)
    ctx_len = nb * bs - 8
    for t in (1, 4) if smoke else (1, 4, 8):
        q = torch.randn(t, hq, dh, generator=g).to(device)
        ctx = torch.tensor([ctx_len], dtype=torch.int32, device=device)
        cu = torch.tensor([0, t], dtype=torch.int32, device=device)
        bench[f"attention[{t} queries, ctx {ctx_len}]"] = {
            "triton_us": _timed(lambda: tri.attention(q, kc, vc, bt, ctx, cu, dh ** -0.5), device, reps),
            "default_us": _timed(lambda: default.attention(q, kc, vc, bt, ctx, cu, dh ** -0.5), device, reps)}
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
