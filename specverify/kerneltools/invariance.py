"""The batch-invariance harness: does a row's output depend on what else shares the launch?

Every op of the registry (`specverify.kernels.registry`) on its seeded inputs (a case). The
reference of an input unit is the op launched on that unit alone. Then the op is launched on the
case's compositions, and every output row must equal its reference bit for bit (`torch.equal`, so
-0.0 != 0.0 and NaN != NaN both count as differences):

Row ops (linear, rms_norm, softmax, log_softmax, silu_mul, rotary). A pool of R input rows; the
reference of row r is row r alone (M = 1). For every launch size M in `sizes`, two compositions of
M rows drawn from the pool with a seeded generator

    "block":    rows o, o+1, .., o+M-1 (mod R), o a fresh offset per M
    "shuffled": M rows drawn with replacement, in random order (repeats land at other positions)

Attention. A pool of requests, each with its own K/V (positions 0..max_ctx-1, in its own
scattered blocks of a shared paged cache) and one query vector per position. The reference of
(request b, position t) is a decode step: that request alone, one query, context t + 1. Each
launch mixes several requests, each feeding a run of n_b consecutive queries (a decode n_b = 1, a
verify n_b = kappa + 1, or a prefill), and every query's output must equal its decode reference.

Results are `InvarianceResult` objects; nothing is printed (except by `main`, the command line).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from specverify.kernels.registry import OPS


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


FULL_SIZES = range(1, 65)
"""Launch sizes of the model shapes: every M up to 64, so every row position of a 16-row tile."""
QUICK_SIZES = (1, 2, 3, 5, 8, 13, 16, 17, 31, 33, 64)
"""Launch sizes under the Triton interpreter (each launch runs every program in Python): both
edges of a 16-row tile, and several tiles."""


class LaunchShapeError(ValueError):
    """An op's result is not one row per row of its launch."""


def _rows_of(out, m: int, label: str):
    """`out` if it is a tensor of m rows (one per row of the launch), else LaunchShapeError: an op that
    returns M + 1 rows (or M - 1) is not row-wise, whatever its first rows hold."""
    if not isinstance(out, torch.Tensor) or out.ndim == 0 or out.shape[0] != m:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise LaunchShapeError(f"{label}: a launch of {m} row(s) returned {got}: an op returns one row per input row")
    return out


def same_bits(a, b) -> bool:
    """Whether two result rows are bit for bit equal: same shape and dtype and the same bytes (a NaN
    computed the same way twice is the same row; torch.equal calls NaN != NaN)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if torch.equal(a, b):
        return True
    if not (a.is_floating_point() or a.is_complex()):
        return False
    return torch.equal(a.reshape(-1).contiguous().view(torch.uint8), b.reshape(-1).contiguous().view(torch.uint8))


def case_invariance(be, op: str, case, sizes=FULL_SIZES) -> InvarianceResult:
    """Backend method `op` on `case` (a registry case) through the harness (the module docstring),
    over the launch sizes `sizes`."""
    fn = getattr(be, op)
    refs = {u: _rows_of(fn(*case.args(case.alone(u))), 1, case.label)[0].clone() for u in case.units()}
    launches = rows = bad = 0
    first = None
    seen, diff_sizes = [], []
    for m, group in case.compositions(sizes):
        seen.append(m)
        size_bad = False
        for launch in group:
            units = list(case.rows(launch))
            out = _rows_of(fn(*case.args(launch)), len(units), case.label)
            launches += 1
            for pos, u in enumerate(units):
                rows += 1
                if not same_bits(out[pos], refs[u]):
                    bad += 1
                    size_bad = True
                    if first is None:
                        diff = (out[pos].double() - refs[u].double()).abs().max().item()
                        first = {"size": m, "position": pos, **case.where(launch, pos), "max_abs_diff": diff}
        if size_bad:
            diff_sizes.append(m)
    return InvarianceResult(case.label, be.name, launches, rows, bad, tuple(seen), first, tuple(diff_sizes))


def check(be, op: str, *, dtype=None, sizes=FULL_SIZES, seed: int = 0, device="cpu", **shape) -> InvarianceResult:
    """Op `op` of backend `be` through the harness, on the registry's seeded inputs of `shape` (its
    maker's keywords: `k`, `n` for linear, `d` for the other row ops, ...; `pool` rows) and `dtype`
    (fp32 by default), over the launch sizes `sizes` (attention draws its own launches)."""
    return case_invariance(be, op, OPS[op].case(seed, dtype, device, **shape), sizes)


def battery(be, quick: bool = False, device="cpu", sizes=None) -> list:
    """Every op of the registry through the harness, at each of its shapes and dtypes: the model
    shapes (SmolLM2's) over FULL_SIZES, or for the Triton interpreter (`quick`) the small ones over
    QUICK_SIZES; `sizes` replaces either list."""
    res = []
    for op in OPS.values():
        for shape in op.small if quick else op.model:
            for dt in shape.dtypes:
                res.append(check(be, op.name, dtype=dt, device=device,
                                 sizes=shape.sizes(sizes or (QUICK_SIZES if quick else FULL_SIZES)), **shape.args))
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
