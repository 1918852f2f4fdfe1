"""The batch-invariance harness: does a row's output depend on what else shares the launch?

Row ops (linear, rms_norm, softmax, log_softmax, silu_mul, rotary). A pool of R input rows; the
reference of row r is the op launched on row r alone (M = 1). For every launch size M in `sizes`
the op is launched on two compositions of M rows drawn from the pool with a seeded generator

    "block":    rows o, o+1, .., o+M-1 (mod R), o a fresh offset per M
    "shuffled": M rows drawn with replacement, in random order (repeats land at other positions)

and every output row must equal its reference bit for bit (`torch.equal`, so -0.0 != 0.0 and
NaN != NaN both count as differences).

Attention. A pool of requests, each with its own K/V (positions 0..max_ctx-1, in its own
scattered blocks of a shared paged cache) and one query vector per position. The reference of
(request b, position t) is a decode step: that request alone, one query, context t + 1. Each
launch mixes several requests, each feeding a run of n_b consecutive queries (a decode n_b = 1, a
verify n_b = kappa + 1, or a prefill), and every query's output must equal its decode reference.

Results are `InvarianceResult` objects; nothing is printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class InvarianceResult:
    op: str
    backend: str
    launches: int                 # launches compared against the references
    rows_compared: int
    mismatches: int               # output rows that differ from their reference
    sizes: tuple = ()             # launch sizes tried (rows, or query tokens for attention)
    first: dict | None = None     # the first difference: launch size, position, row, max |diff|
    diff_sizes: tuple = field(default=())   # launch sizes with at least one differing row

    @property
    def ok(self) -> bool:
        return self.mismatches == 0

    def to_dict(self) -> dict:
        return {"op": self.op, "backend": self.backend, "ok": self.ok, "launches": self.launches,
                "rows_compared": self.rows_compared, "mismatches": self.mismatches,
                "sizes": [int(s) for s in self.sizes], "first": self.first,
                "diff_sizes": [int(s) for s in self.diff_sizes]}


def row_invariance(launch, pool_size: int, sizes=range(1, 65), seed: int = 0, op: str = "",
                   backend: str = "") -> InvarianceResult:
    """`launch(idx)` runs the op on pool rows `idx` (an int64 array) and returns [len(idx), ...]."""
    import torch
    rng = np.random.default_rng(seed)
    refs = [launch(np.array([r], np.int64))[0].clone() for r in range(pool_size)]
    launches = rows = bad = 0
    first = None
    diff_sizes = []
    for m in sizes:
        offset = int(rng.integers(pool_size))
        comps = [(np.arange(offset, offset + m) % pool_size).astype(np.int64),
                 rng.integers(0, pool_size, m).astype(np.int64)]
        size_bad = False
        for idx in comps:
            out = launch(idx)
            launches += 1
            for pos, r in enumerate(idx):
                rows += 1
                if not torch.equal(out[pos], refs[r]):
                    bad += 1
                    size_bad = True
                    if first is None:
                        diff = (out[pos].double() - refs[r].double()).abs().max().item()
                        first = {"size": int(m), "position": pos, "row": int(r), "max_abs_diff": diff}
        if size_bad:
            diff_sizes.append(int(m))
    return InvarianceResult(op, backend, launches, rows, bad, tuple(int(s) for s in sizes), first,
                            tuple(diff_sizes))


def linear_invariance(be, k: int = 576, n: int = 960, dtype=None, sizes=range(1, 65), pool: int = 64,
                      seed: int = 0, device="cpu") -> InvarianceResult:
    import torch
    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(pool, k, generator=g).to(device=device, dtype=dtype)
    w = (torch.randn(n, k, generator=g) * k ** -0.5).to(device=device, dtype=dtype)
    idx_t = _indexer(device)
    return row_invariance(lambda idx: be.linear(x[idx_t(idx)], w), pool, sizes, seed,
                          f"linear[{k}->{n},{_dt(dtype)}]", be.name)


def row_op_invariance(be, op: str, d: int, dtype=None, sizes=range(1, 65), pool: int = 64, seed: int = 0,
                      scale: float = 3.0, device="cpu") -> InvarianceResult:
    """rms_norm, softmax, log_softmax or silu_mul (gate and up each d wide) on rows of width d."""
    import torch
    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(seed)
    width = 2 * d if op == "silu_mul" else d
    x = (torch.randn(pool, width, generator=g) * scale).to(device=device, dtype=dtype)
    w = (1.0 + 0.1 * torch.randn(d, generator=g)).to(device=device, dtype=dtype)
    idx_t = _indexer(device)
    fns = {
        "rms_norm": lambda xs: be.rms_norm(xs, w, 1e-5),
        "softmax": be.softmax,
        "log_softmax": be.log_softmax,
        "silu_mul": lambda xs: be.silu_mul(xs[:, :d], xs[:, d:]),
    }
    fn = fns[op]
    return row_invariance(lambda idx: fn(x[idx_t(idx)]), pool, sizes, seed, f"{op}[{d},{_dt(dtype)}]", be.name)


def rotary_invariance(be, heads: int = 12, head_dim: int = 64, dtype=None, sizes=range(1, 65), pool: int = 64,
                      seed: int = 0, theta: float = 100000.0, device="cpu") -> InvarianceResult:
    import torch
    dtype = dtype or torch.float32
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(pool, heads, head_dim, generator=g).to(device=device, dtype=dtype)
    pos = torch.randint(0, 8192, (pool,), generator=g).to(device)
    idx_t = _indexer(device)
    return row_invariance(lambda idx: be.rotary(x[idx_t(idx)], pos[idx_t(idx)], theta), pool, sizes, seed,
                          f"rotary[{heads}x{head_dim},{_dt(dtype)}]", be.name)


def attention_invariance(be, n_requests: int = 4, max_ctx: int = 40, block_size: int = 4, n_q_heads: int = 6,
                         n_kv_heads: int = 2, head_dim: int = 16, launches: int = 24, max_new: int = 9,
                         dtype=None, seed: int = 0, device="cpu") -> InvarianceResult:
    """Decode reference vs mixed launches (see the module docstring). Query runs of 1..max_new tokens."""
    import torch
    dtype = dtype or torch.float32
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    blocks_per_req = -(-max_ctx // block_size)
    n_blocks = n_requests * blocks_per_req + 3
    k_cache = torch.randn(n_blocks, block_size, n_kv_heads, head_dim, generator=g).to(device=device, dtype=dtype)
    v_cache = torch.randn(n_blocks, block_size, n_kv_heads, head_dim, generator=g).to(device=device, dtype=dtype)
    tables = rng.permutation(n_blocks)[:n_requests * blocks_per_req].reshape(n_requests, blocks_per_req)
    queries = torch.randn(n_requests, max_ctx, n_q_heads, head_dim, generator=g).to(device=device, dtype=dtype)
    scale = head_dim ** -0.5

    def run(reqs, starts, ns):
        """One launch: request reqs[i] feeds queries at positions starts[i] .. starts[i]+ns[i]-1."""
        q = torch.cat([queries[b, s:s + n] for b, s, n in zip(reqs, starts, ns)])
        bt = torch.tensor(tables[list(reqs)], dtype=torch.int32, device=device)
        ctx = torch.tensor([s + n for s, n in zip(starts, ns)], dtype=torch.int32, device=device)
        cu = torch.tensor(np.concatenate([[0], np.cumsum(ns)]), dtype=torch.int32, device=device)
        return be.attention(q, k_cache, v_cache, bt, ctx, cu, scale)

    refs = {(b, t): run([b], [t], [1])[0].clone() for b in range(n_requests) for t in range(max_ctx)}
    rows = bad = 0
    first = None
    sizes, diff_sizes = [], []
    for i in range(launches):
        n_req = int(rng.integers(1, n_requests + 1))
        reqs = [int(b) for b in rng.permutation(n_requests)[:n_req]]
        ns = [int(rng.integers(1, max_new + 1)) for _ in reqs]
        starts = [int(rng.integers(0, max_ctx - n + 1)) for n in ns]
        out = run(reqs, starts, ns)
        sizes.append(sum(ns))
        row = 0
        launch_bad = False
        for b, s, n in zip(reqs, starts, ns):
            for t in range(s, s + n):
                rows += 1
                if not torch.equal(out[row], refs[(b, t)]):
                    bad += 1
                    launch_bad = True
                    if first is None:
                        diff = (out[row].double() - refs[(b, t)].double()).abs().max().item()
                        first = {"size": sum(ns), "position": row, "request": b, "kv_position": t,
                                 "n_new": n, "max_abs_diff": diff}
                row += 1
        if launch_bad:
            diff_sizes.append(sum(ns))
    return InvarianceResult(f"attention[{n_q_heads}/{n_kv_heads}x{head_dim},bs{block_size},{_dt(dtype)}]",
                            be.name, launches, rows, bad, tuple(sizes), first, tuple(diff_sizes))


def _indexer(device):
    import torch
    return lambda idx: torch.as_tensor(idx, dtype=torch.int64, device=device)


def _dt(dtype) -> str:
    return str(dtype).replace("torch.", "")


def battery(be, quick: bool = False, device="cpu") -> list:
    """Every op of backend `be` through the harness: SmolLM2 shapes on the CPU backends, small
    ones for the Triton interpreter (`quick`)."""
    import torch
    if quick:
        res = [linear_invariance(be, k=40, n=40, dtype=dt, pool=64, device=device)
               for dt in (torch.float32, torch.bfloat16, torch.float16)]
        sizes = (1, 2, 3, 5, 8, 13, 16, 17, 31, 33, 64)
        res += [row_op_invariance(be, op, d, sizes=sizes, device=device)
                for op, d in (("rms_norm", 100), ("softmax", 300), ("log_softmax", 300), ("silu_mul", 100))]
        res.append(rotary_invariance(be, heads=3, head_dim=16, sizes=sizes, device=device))
        res.append(attention_invariance(be, n_requests=3, max_ctx=12, block_size=4, n_q_heads=2, n_kv_heads=1,
                                        head_dim=8, launches=6, max_new=4, device=device))
        return res
    res = [linear_invariance(be, dtype=dt, device=device) for dt in (torch.float32, torch.bfloat16, torch.float16)]
    res.append(linear_invariance(be, k=1536, n=576, device=device))
    res.append(linear_invariance(be, k=576, n=49152, sizes=range(1, 17), pool=16, device=device))
    res += [row_op_invariance(be, op, d, device=device)
            for op, d in (("rms_norm", 576), ("silu_mul", 1536), ("silu_mul", 1537))]
    res += [row_op_invariance(be, op, 49152, sizes=range(1, 17), pool=16, device=device)
            for op in ("softmax", "log_softmax")]
    res.append(rotary_invariance(be, device=device))
    res.append(attention_invariance(be, n_requests=4, max_ctx=70, block_size=16, n_q_heads=9, n_kv_heads=3,
                                    head_dim=64, launches=24, device=device))
    return res


def main(argv=None) -> int:
    """python -m specverify.kerneltools.invariance [--backend NAME ...] [--json]: the battery as a table."""
    import argparse
    import json
    ap = argparse.ArgumentParser(prog="python -m specverify.kerneltools.invariance")
    ap.add_argument("--backend", action="append", default=None, help="default, invariant, triton (repeatable)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    names = args.backend or ["invariant", "default"]
    from specverify.kernels.backend import get_backend
    from specverify.kernels.triton_common import interpret_without_gpu, interpreting
    if "triton" in names:
        interpret_without_gpu()
    rows = []
    for name in names:
        quick = name == "triton" and interpreting()
        rows += battery(get_backend(name), quick=quick)
    if args.json:
        print(json.dumps([r.to_dict() for r in rows], indent=1))
    else:
        for r in rows:
            sizes = sorted(set(r.sizes))
            span = f"{sizes[0]}..{sizes[-1]} ({len(sizes)} sizes)" if sizes else "-"
            diff = f" differs at {list(r.diff_sizes)[:8]} first {r.first}" if not r.ok else ""
            print(f"{r.backend:<10}{r.op:<38}{'OK ' if r.ok else 'DIFF'} launches {r.launches:>4} rows {r.rows_compared:>5}"
                  f" sizes {span}{diff}")
    return 0 if all(r.ok for r in rows if r.backend != "default") else 1


if __name__ == "__main__":
    import sys
    sys.exit(main())
