"""Op-level batch invariance for anyone's ops: `specverify invariance pkg.module:factory`.

An op is a callable from a batch of rows to a batch of rows: `fn(x)` with x a tensor [M, *row_shape]
returns [M, ...], output row i computed from input row i only (a linear layer, a norm, a softmax, a
whole forward of one position). The factory (no arguments) returns a `RowOp`, a list of them, or a
dict name -> RowOp. Every op runs through the registry's invariance harness
(`kerneltools.invariance.case_invariance`): a seeded pool of POOL rows; each row's reference is the
op on that row alone (M = 1); then for every launch size M (default 1..64) a block of M consecutive
pool rows at a fresh offset and M rows drawn with replacement in random order, and every output row
must equal its reference bit for bit (`torch.equal`). So a row's result must not depend on M, on its
neighbours or on its position. The first differing row is reported with its M and position.

Built-in op sets (names instead of a factory): `torch-linear` (torch's default fp32 linear at
SmolLM2's qkv shape: the negative control, it must fail on a CPU), `invariant` (our numba backend's
row ops at model shapes), `invariant-q8` (the 8-bit-activation linear on GGUF blocks at SmolLM2's
four Q4_1 shapes and its Q8_0 head) and `triton` (our Triton row ops at small shapes, under TRITON_INTERPRET=1
without a GPU).

The result is an `AuditResult` (the same JSON as `audit`): one exact row `invariance[<op>]` per op.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from specverify.audit import AuditResult
from specverify.battery.base import FAIL, PASS, CheckResult
from specverify.errors import AdapterError, InputError
from specverify.settings import DEFAULTS

POOL = 64                       # input rows each op's launches are drawn from
SIZES = tuple(range(1, 65))     # launch sizes M by default
ROW_SCALE = 3.0                 # standard deviation of the seeded input rows
BATCH_VARIANT = "batch-variant"
BATCH_VARIANT_TEXT = "a row's result depends on the launch (its size M, its neighbours or its position)"


@dataclass(frozen=True)
class RowOp:
    """One op under test: `fn(x [M, *row_shape]) -> [M, ...]` on rows of `dtype`."""

    name: str
    fn: object
    row_shape: tuple
    dtype: object = None        # a torch dtype; None = float32


def _ops_of(value, spec: str) -> list:
    """The factory's answer as a list of RowOps (one-line AdapterErrors for anything else)."""
    if isinstance(value, RowOp):
        value = [value]
    if isinstance(value, dict):
        value = [v if isinstance(v, RowOp) else None for v in value.values()]
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(v, RowOp) for v in value):
        raise AdapterError(f"ops {spec!r}: the factory must return a RowOp, a list of RowOps or a dict of them "
                           f"(specverify.kerneltools.op_invariance.RowOp)")
    names = [v.name for v in value]
    if len(set(names)) != len(names):
        raise AdapterError(f"ops {spec!r}: op names must be distinct, got {names}")
    for v in value:
        if not callable(v.fn):
            raise AdapterError(f"ops {spec!r}: op {v.name!r}: fn is not callable")
        if not isinstance(v.name, str) or not v.name:
            raise AdapterError(f"ops {spec!r}: an op's name must be a non-empty string, got {v.name!r:.80}")
        shape = v.row_shape
        if (not isinstance(shape, (tuple, list)) or not shape
                or any(isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in shape)):
            raise AdapterError(f"ops {spec!r}: op {v.name!r}: row_shape {shape!r:.80} must be a tuple of positive "
                               "integers, e.g. (576,)")
        if int(np.prod(shape)) * POOL > MAX_POOL_ELEMENTS:
            raise AdapterError(f"ops {spec!r}: op {v.name!r}: row_shape {tuple(shape)} is too large ({POOL} rows "
                               f"of {int(np.prod(shape))} elements; at most {MAX_POOL_ELEMENTS} in all)")
        if v.dtype is not None and not _float_dtype(v.dtype):
            raise AdapterError(f"ops {spec!r}: op {v.name!r}: dtype {v.dtype!r:.80} must be a torch floating dtype "
                               "(e.g. torch.bfloat16) or None")
    return list(value)


MAX_POOL_ELEMENTS = 1 << 28     # elements of an op's seeded input pool (2 GiB of float64 while drawn)


def _float_dtype(dtype) -> bool:
    import torch
    return isinstance(dtype, torch.dtype) and dtype.is_floating_point


def load_ops(spec: str) -> list:
    """The RowOps named by `spec`: a built-in set (BUILTIN) or `pkg.module:factory` / `file.py:factory`."""
    if spec in BUILTIN:
        return _ops_of(BUILTIN[spec](), spec)
    from specverify.adapters.plugin import import_attr
    factory = import_attr(spec, "ops")
    try:
        value = factory()
    except Exception as exc:  # noqa: BLE001 - the user's factory may raise anything
        raise AdapterError(f"ops {spec!r}: {spec.rpartition(':')[2]}() raised {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    return _ops_of(value, spec)


class _Single:
    """A one-op backend for `case_invariance` (it calls `be.<name>(*args)`)."""

    def __init__(self, op: RowOp):
        self.name = op.name
        self._fn = op.fn

    def run(self, x):
        return self._fn(x)


def check_op(op: RowOp, *, sizes=SIZES, seed: int = 0) -> CheckResult:
    """The exact row `invariance[<op>]` (module docstring)."""
    import torch

    from specverify.kernels.registry import RowCase

    from .invariance import LaunchShapeError, case_invariance
    dtype = op.dtype or torch.float32
    g = torch.Generator().manual_seed(seed)
    pool = (torch.randn((POOL, *op.row_shape), generator=g, dtype=torch.float64) * ROW_SCALE).to(dtype)
    case = RowCase(op.name, POOL, lambda idx: (pool[idx].contiguous(),), seed, "cpu")
    t0 = time.perf_counter()
    try:
        r = case_invariance(_Single(op), "run", case, sizes)
    except LaunchShapeError as exc:
        raise AdapterError(f"op {op.name!r}: {str(exc).split(': ', 1)[-1]}") from None
    except Exception as exc:  # noqa: BLE001 - the user's op may raise anything
        raise AdapterError(f"op {op.name!r} raised {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    seconds = time.perf_counter() - t0
    shape = f"rows {tuple(op.row_shape)} {str(dtype).replace('torch.', '')}, M = {min(sizes)}..{max(sizes)}"
    data = r.to_dict()
    if r.ok:
        detail = f"{r.rows_compared} rows in {r.launches} launches bitwise equal to each row alone ({shape})"
        return CheckResult(f"invariance[{op.name}]", PASS, n=r.rows_compared, exact=True, seconds=seconds,
                           detail=detail, data=data)
    f = r.first
    detail = (f"{r.mismatches}/{r.rows_compared} rows differ from the row alone ({shape}); first: row {f['row']} at "
              f"position {f['position']} of a launch of M = {f['size']} (max |diff| {f['max_abs_diff']:.3g}); "
              f"differing at M in {list(r.diff_sizes)[:12]}{' ...' if len(r.diff_sizes) > 12 else ''}")
    return CheckResult(f"invariance[{op.name}]", FAIL, n=r.rows_compared, exact=True, seconds=seconds,
                       detail=detail, data=data)


def run(spec: str, *, sizes=SIZES, seed: int = 0, progress=None, timeout: float | None = None,
        isolated: bool = True) -> AuditResult:
    """Every op of `spec` through `check_op`, as an AuditResult (verdict fail if any row fails).

    isolated (the default, as an audit's adapter): the ops are loaded and run in a worker process of
    their own (`specverify.isolation`), each op one call under `timeout` s (default: the audit's): an op
    that hangs holding the GIL is killed at the timeout, one that segfaults, calls os._exit or raises
    SystemExit is a one-line AdapterError naming how it ended, ^C ends it at once, and what it prints
    goes to the worker's log, never to this process's stdout (`--json -`)."""
    if not sizes or any(int(m) < 1 for m in sizes):
        raise InputError(f"launch sizes {list(sizes)!r}: each must be an integer >= 1")
    t0 = time.perf_counter()
    rows = []
    if isolated:
        from specverify.isolation import open_adapter
        timeout = DEFAULTS.timeout if timeout is None else timeout
        start = max(timeout, DEFAULTS.timeout)      # starting the worker and importing the ops (torch)
        with open_adapter(OpsHost, timeout=start) as host:
            names = host.run(_load_in_worker, spec, what=f"ops {spec!r}: loading the ops")
            host.timeout = timeout
            for name in names:
                if progress:
                    progress(f"invariance {name}")
                rows.append(host.run(_check_in_worker, spec, name, tuple(sizes), seed, what=f"op {name!r}"))
    else:
        for op in load_ops(spec):
            if progress:
                progress(f"invariance {op.name}")
            rows.append(check_op(op, sizes=sizes, seed=seed))
    for row in rows:
        row.check = "invariance"
    failed = [r for r in rows if r.verdict == FAIL]
    deviation = {"kind": BATCH_VARIANT, "text": BATCH_VARIANT_TEXT, "rows": len(failed)} if failed else None
    return AuditResult(engine=spec, verdict=FAIL if failed else PASS, seed=seed, alpha=DEFAULTS.alpha, samples=0,
                       checks=rows, seconds=time.perf_counter() - t0, deviation=deviation,
                       check_seconds={"invariance": sum(r.seconds for r in rows)})


class OpsHost:
    """What the worker builds for `run(isolated=True)`: nothing but a host for the user's ops, which
    `_load_in_worker` loads there (its `ops`, by name)."""

    name = "invariance"
    version = None
    capabilities = ()

    def __init__(self):
        self.ops: dict = {}


def _load_in_worker(host: OpsHost, spec: str) -> list:
    """In the worker: load the ops of `spec` onto the host; their names, in order."""
    try:
        ops = load_ops(spec)
    except InputError as exc:       # a bad spec: its own message (one line, exit 2)
        raise AdapterError(str(exc)) from None
    host.ops = {op.name: op for op in ops}
    return list(host.ops)


def _check_in_worker(host: OpsHost, spec: str, name: str, sizes: tuple, seed: int) -> CheckResult:
    """In the worker: `check_op` of the loaded op `name`."""
    return check_op(host.ops[name], sizes=sizes, seed=seed)


# ----------------------------------------------------------------------------------- built-in sets

def _backend_ops(be, *, k: int, n: int, d: int, seed: int = 0) -> list:
    """The row ops of a kernels backend with seeded weights: linear [k -> n], rms_norm, softmax,
    silu_mul (gate and up as the two halves of a row), each over rows of width k, d, d, 2d."""
    import torch
    g = torch.Generator().manual_seed(seed)
    w = torch.randn((n, k), generator=g) / k ** 0.5
    norm_w = 1.0 + 0.1 * torch.randn(d, generator=g)
    return [RowOp(f"{be.name}.linear[{k}->{n}]", lambda x: be.linear(x, w), (k,)),
            RowOp(f"{be.name}.rms_norm[{d}]", lambda x: be.rms_norm(x, norm_w, 1e-5), (d,)),
            RowOp(f"{be.name}.softmax[{d}]", be.softmax, (d,)),
            RowOp(f"{be.name}.silu_mul[{d}]", lambda x: be.silu_mul(x[:, :d].contiguous(), x[:, d:].contiguous()), (2 * d,))]


def torch_linear_ops():
    """torch's default fp32 linear at SmolLM2's qkv shape (576 -> 960): the negative control."""
    import torch
    g = torch.Generator().manual_seed(0)
    w = torch.randn((960, 576), generator=g) / 24.0
    return [RowOp("torch.linear[576->960]", lambda x: torch.nn.functional.linear(x, w), (576,))]


def invariant_ops():
    """Our numba backend's row ops at model widths."""
    from specverify.kernels.backend import get_backend
    return _backend_ops(get_backend("invariant"), k=576, n=960, d=576)


def invariant_q8_ops():
    """Our 8-bit-activation linear (`invariant-q8`) on seeded blocks at SmolLM2's four Q4_1 shapes and
    its Q8_0 head (576 -> 49152)."""
    import numpy as np

    from specverify.kernels.backend import get_backend
    from specverify.kernels.quant import Q4_1, Q8_0
    from specverify.kernels.registry import random_blocks
    be = get_backend("invariant-q8")
    ops = []
    for k, n, kind in ((576, 960, Q4_1), (576, 576, Q4_1), (576, 3072, Q4_1), (1536, 576, Q4_1), (576, 49152, Q8_0)):
        w = random_blocks(kind, n, k, np.random.default_rng(k + n))
        ops.append(RowOp(f"{be.name}.linear[{k}->{n},{kind}]", lambda x, w=w: be.linear(x, w), (k,)))
    return ops


def triton_ops():
    """Our Triton row ops at small widths (interpreted on a CPU: TRITON_INTERPRET=1 is set when there is no GPU)."""
    from specverify.kernels.triton_common import interpret_without_gpu
    interpret_without_gpu()
    from specverify.kernels.backend import get_backend
    return _backend_ops(get_backend("triton"), k=40, n=40, d=100)


BUILTIN = {"torch-linear": torch_linear_ops, "invariant": invariant_ops, "invariant-q8": invariant_q8_ops,
           "triton": triton_ops}
