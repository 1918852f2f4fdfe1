"""The ops of the backend interface (`backend.py`), one entry each: what every kernel tool iterates.

An entry (`Op`) names the backend method, makes seeded inputs for it, points at its float64
reference and error bound (`accuracy.py`), and lists the shapes the checks run it at: `small`
ones (the Triton interpreter, smoke runs, tests) and `model` ones (SmolLM2-135M's). The
invariance harness, the accuracy check, the GPU script and the bench (`specverify.kerneltools`)
iterate `OPS`; a new op is an entry here and its reference in accuracy.py, plus one method per
backend (kernels/README.md, "Adding an op").

Inputs come as a case, seeded by `seed` (a torch generator for the data, a NumPy one for the
launches drawn from it):

    RowCase     a row-wise op: a pool of input rows; a launch is any sequence of pool rows (an int64
                array, repeats allowed) and output row i is computed from pool row launch[i]
    QueryCase   paged attention: requests with their own K/V and a query per position; a launch is a
                list of runs (request, first position, n), n consecutive queries of each request

Both answer the same questions: `args(launch)` (the op's arguments), `units()` (every input row or
query), `alone(unit)` (the launch of one unit alone: its reference), `rows(launch)` (the unit of
each output row), `where(launch, pos)` (output row pos, for a report), `compositions(sizes)` (the
launches the invariance harness compares, grouped by size) and `batch(m)` (a launch of m rows).
This module imports torch (the backends do not need it to register).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from . import accuracy, quant

POOL = 64
"""Input rows a row case draws its launches from."""
ROW_SCALE = 3.0
"""Standard deviation of the row ops' inputs (softmax rows with a spread of exponents)."""
EPS = 1e-5
"""rms_norm's epsilon (the model's)."""
ROPE_THETA = 100000.0
"""rotary's base (SmolLM2's)."""
MAX_POSITION = 8192
"""Rotary positions are drawn below this (SmolLM2's context)."""


def _dt(dtype) -> str:
    return str(dtype).replace("torch.", "")


class RowCase:
    """Seeded inputs of a row-wise op: `pool` input rows (see the module docstring)."""

    def __init__(self, label: str, pool: int, make_args: Callable, seed: int, device):
        self.label, self.pool, self.device = label, pool, device
        self._make_args = make_args                 # index tensor -> the op's arguments
        self._rng = np.random.default_rng(seed)

    def args(self, launch) -> tuple:
        return self._make_args(torch.as_tensor(launch, dtype=torch.int64, device=self.device))

    def units(self):
        return range(self.pool)

    def alone(self, unit):
        return np.array([unit], np.int64)

    def rows(self, launch) -> list:
        return [int(r) for r in launch]

    def where(self, launch, pos: int) -> dict:
        return {"row": int(launch[pos])}

    def compositions(self, sizes):
        """For every launch size m: rows o, o+1, .., o+m-1 (mod pool) at a fresh offset o, and m rows
        drawn with replacement in random order (repeats land at other positions)."""
        for m in sizes:
            offset = int(self._rng.integers(self.pool))
            yield int(m), [(np.arange(offset, offset + m) % self.pool).astype(np.int64),
                           self._rng.integers(0, self.pool, m).astype(np.int64)]

    def batch(self, m: int):
        return (np.arange(m) % self.pool).astype(np.int64)


class QueryCase:
    """Seeded inputs of paged attention (see the module docstring): each request owns positions
    0..max_ctx-1 in its own scattered blocks of one paged cache, and a query vector per position.
    The reference of (request, position) is a decode step: that query alone, context position + 1."""

    def __init__(self, label: str, queries, k_cache, v_cache, tables, rng, launches: int, max_new: int, device):
        self.label, self.device = label, device
        self.queries, self.k_cache, self.v_cache, self.tables = queries, k_cache, v_cache, tables
        self.n_requests, self.max_ctx = int(queries.shape[0]), int(queries.shape[1])
        self.scale = queries.shape[-1] ** -0.5
        self.launches, self.max_new = launches, max_new
        self._rng = rng

    def args(self, runs) -> tuple:
        dev = self.device
        q = torch.cat([self.queries[b, s:s + n] for b, s, n in runs])
        bt = torch.tensor(self.tables[[b for b, _, _ in runs]], dtype=torch.int32, device=dev)
        ctx = torch.tensor([s + n for _, s, n in runs], dtype=torch.int32, device=dev)
        cu = torch.tensor(np.concatenate([[0], np.cumsum([n for _, _, n in runs])]), dtype=torch.int32, device=dev)
        return q, self.k_cache, self.v_cache, bt, ctx, cu, self.scale

    def units(self):
        return [(b, t) for b in range(self.n_requests) for t in range(self.max_ctx)]

    def alone(self, unit):
        return [(unit[0], unit[1], 1)]

    def rows(self, runs) -> list:
        return [(b, t) for b, s, n in runs for t in range(s, s + n)]

    def where(self, runs, pos: int) -> dict:
        for b, s, n in runs:
            if pos < n:
                return {"request": b, "kv_position": s + pos, "n_new": n}
            pos -= n
        raise IndexError(pos)

    def compositions(self, sizes):
        """`launches` launches (`sizes` does not apply), each mixing 1..n_requests requests that feed
        1..max_new consecutive queries each (decode, verify, prefill), grouped by their query count."""
        for _ in range(self.launches):
            n_req = int(self._rng.integers(1, self.n_requests + 1))
            reqs = [int(b) for b in self._rng.permutation(self.n_requests)[:n_req]]
            ns = [int(self._rng.integers(1, self.max_new + 1)) for _ in reqs]
            starts = [int(self._rng.integers(0, self.max_ctx - n + 1)) for n in ns]
            yield sum(ns), [list(zip(reqs, starts, ns))]

    def batch(self, m: int):
        """m queries: request 0's last m positions (a decode step for m = 1, a verify step beyond),
        spilling over to the next requests past max_ctx."""
        runs = []
        for b in range(self.n_requests):
            n = min(m, self.max_ctx)
            if n == 0:
                break
            runs.append((b, self.max_ctx - n, n))
            m -= n
        return runs


# ---------------------------------------------------------------- the seeded input makers
def _linear(seed, dtype, device, *, k: int = 576, n: int = 960, pool: int = POOL, quant: str | None = None) -> RowCase:
    """x [pool, k] and w [n, k]: an fp32 (or `dtype`) tensor, or with `quant` ("Q4_1", "Q8_0") a
    QuantizedWeight of seeded random blocks (scales of the fp32 weights' size, every quant value)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(pool, k, generator=g).to(device=device, dtype=dtype)
    if quant is None:
        w = (torch.randn(n, k, generator=g) * k ** -0.5).to(device=device, dtype=dtype)
        return RowCase(f"linear[{k}->{n},{_dt(dtype)}]", pool, lambda i: (x[i], w), seed, device)
    w = random_blocks(quant, n, k, np.random.default_rng(seed))
    return RowCase(f"linear[{k}->{n},{quant},{_dt(dtype)}]", pool, lambda i: (x[i], w), seed, device)


def random_blocks(kind: str, n: int, k: int, rng) -> quant.QuantizedWeight:
    """Seeded random GGUF blocks [n, k] of `kind`: uniform quants, fp16 scales (and Q4_1 minimums)
    sized so the weights have the spread of the fp32 case's (~k ** -0.5)."""
    nb = k // quant.BLOCK
    blocks = rng.integers(0, 256, size=(n, nb, quant.BLOCK_BYTES[kind]), dtype=np.uint8)
    step = 0.3 * k ** -0.5 if kind == quant.Q4_1 else 0.02 * k ** -0.5
    d = (step * (0.5 + rng.random((n, nb)))).astype(np.float16)
    blocks[:, :, 0:2] = d.view(np.uint8).reshape(n, nb, 2)
    if kind == quant.Q4_1:
        m = (-7.5 * d.astype(np.float32) * (0.8 + 0.4 * rng.random((n, nb)))).astype(np.float16)
        blocks[:, :, 2:4] = m.view(np.uint8).reshape(n, nb, 2)
    return quant.QuantizedWeight(kind, blocks, n, k)


def _scaled_rows(g, pool: int, width: int, dtype, device):
    return (torch.randn(pool, width, generator=g) * ROW_SCALE).to(device=device, dtype=dtype)


def _rms_norm(seed, dtype, device, *, d: int, pool: int = POOL) -> RowCase:
    g = torch.Generator().manual_seed(seed)
    x = _scaled_rows(g, pool, d, dtype, device)
    w = (1.0 + 0.1 * torch.randn(d, generator=g)).to(device=device, dtype=dtype)
    return RowCase(f"rms_norm[{d},{_dt(dtype)}]", pool, lambda i: (x[i], w, EPS), seed, device)


def _vocab_rows(op: str):
    """The maker of softmax or log_softmax: rows of width d (a vocabulary)."""
    def make(seed, dtype, device, *, d: int, pool: int = POOL) -> RowCase:
        x = _scaled_rows(torch.Generator().manual_seed(seed), pool, d, dtype, device)
        return RowCase(f"{op}[{d},{_dt(dtype)}]", pool, lambda i: (x[i],), seed, device)
    return make


def _silu_mul(seed, dtype, device, *, d: int, pool: int = POOL) -> RowCase:
    """gate and up, d wide each, as the two halves of one row (the model slices them so)."""
    x = _scaled_rows(torch.Generator().manual_seed(seed), pool, 2 * d, dtype, device)

    def args(i):
        rows = x[i]
        return rows[:, :d], rows[:, d:]
    return RowCase(f"silu_mul[{d},{_dt(dtype)}]", pool, args, seed, device)


def _rotary(seed, dtype, device, *, heads: int = 12, head_dim: int = 64, pool: int = POOL) -> RowCase:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(pool, heads, head_dim, generator=g).to(device=device, dtype=dtype)
    pos = torch.randint(0, MAX_POSITION, (pool,), generator=g).to(device)
    return RowCase(f"rotary[{heads}x{head_dim},{_dt(dtype)}]", pool, lambda i: (x[i], pos[i], ROPE_THETA), seed,
                   device)


def _attention(seed, dtype, device, *, n_requests: int = 4, max_ctx: int = 40, block_size: int = 4,
               n_q_heads: int = 6, n_kv_heads: int = 2, head_dim: int = 16, launches: int = 24,
               max_new: int = 9) -> QueryCase:
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    blocks_per_req = -(-max_ctx // block_size)
    n_blocks = n_requests * blocks_per_req + 3
    k_cache = torch.randn(n_blocks, block_size, n_kv_heads, head_dim, generator=g).to(device=device, dtype=dtype)
    v_cache = torch.randn(n_blocks, block_size, n_kv_heads, head_dim, generator=g).to(device=device, dtype=dtype)
    tables = rng.permutation(n_blocks)[:n_requests * blocks_per_req].reshape(n_requests, blocks_per_req)
    queries = torch.randn(n_requests, max_ctx, n_q_heads, head_dim, generator=g).to(device=device, dtype=dtype)
    return QueryCase(f"attention[{n_q_heads}/{n_kv_heads}x{head_dim},bs{block_size},{_dt(dtype)}]", queries,
                     k_cache, v_cache, tables, rng, launches, max_new, device)


# ---------------------------------------------------------------- the entries
def _softmax_reference(x):
    return accuracy.softmax(x)[0]


def _log_softmax_reference(x):
    return accuracy.softmax(x)[1]


ALL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
SMALL_POOL = 17
"""The small shapes' pool: a launch of more than 16 rows spans two of Triton's 16-row tiles."""


@dataclass(frozen=True)
class Shape:
    """One shape an op is checked at: its maker's keywords, the input dtypes, and for a wide row the
    largest launch the checks use (each launch of it is costly)."""

    args: dict
    dtypes: tuple = (torch.float32,)
    max_rows: int | None = None

    def sizes(self, sizes) -> tuple:
        """The launch sizes of `sizes` this shape runs."""
        return tuple(int(s) for s in sizes if self.max_rows is None or s <= self.max_rows)


@dataclass(frozen=True)
class Op:
    """One op of the backend interface (see the module docstring)."""

    name: str                   # the backend method, and the op's name in results
    make: Callable              # make(seed, dtype, device, **shape args) -> RowCase | QueryCase
    reference: Callable         # reference(*the op's arguments) -> (float64 result, bound on |y - ref|)
    small: tuple                # Shapes for the interpreter, smoke runs and tests
    model: tuple                # SmolLM2-135M's Shapes

    def case(self, seed: int = 0, dtype=None, device="cpu", **args):
        """Seeded inputs of this op (fp32 unless `dtype`), shaped by the maker's keywords `args`."""
        return self.make(seed, dtype or torch.float32, device, **args)


_VOCAB = Shape(dict(d=49152, pool=16), max_rows=16)

OPS = {op.name: op for op in (
    Op("linear", _linear, accuracy.linear,
       small=(Shape(dict(k=40, n=40, pool=SMALL_POOL), ALL_DTYPES),
              Shape(dict(k=64, n=40, pool=SMALL_POOL, quant=quant.Q4_1)),
              Shape(dict(k=64, n=40, pool=SMALL_POOL, quant=quant.Q8_0))),
       model=(Shape(dict(k=576, n=960), ALL_DTYPES), Shape(dict(k=576, n=3072)), Shape(dict(k=1536, n=576)),  # qkv, gate_up, down
              Shape(dict(k=576, n=49152, pool=16), max_rows=16),                              # the head
              Shape(dict(k=576, n=3072, quant=quant.Q4_1)), Shape(dict(k=1536, n=576, quant=quant.Q4_1)),
              Shape(dict(k=576, n=49152, pool=16, quant=quant.Q8_0), max_rows=16))),         # SmolLM2's blocks
    Op("linear_q8", _linear, accuracy.linear_q8,
       small=(Shape(dict(k=64, n=40, pool=SMALL_POOL, quant=quant.Q4_1)),
              Shape(dict(k=64, n=40, pool=SMALL_POOL, quant=quant.Q8_0))),
       model=(Shape(dict(k=576, n=960, quant=quant.Q4_1)), Shape(dict(k=576, n=576, quant=quant.Q4_1)),  # qkv, o
              Shape(dict(k=576, n=3072, quant=quant.Q4_1)), Shape(dict(k=1536, n=576, quant=quant.Q4_1)),  # gate_up, down
              Shape(dict(k=576, n=49152, pool=16, quant=quant.Q8_0), max_rows=64))),        # the head (Q8_0)
    Op("rms_norm", _rms_norm, accuracy.rms_norm,
       small=(Shape(dict(d=100, pool=SMALL_POOL)),), model=(Shape(dict(d=576)),)),
    Op("softmax", _vocab_rows("softmax"), _softmax_reference,
       small=(Shape(dict(d=300, pool=SMALL_POOL)),), model=(_VOCAB,)),
    Op("log_softmax", _vocab_rows("log_softmax"), _log_softmax_reference,
       small=(Shape(dict(d=300, pool=SMALL_POOL)),), model=(_VOCAB,)),
    Op("silu_mul", _silu_mul, accuracy.silu_mul,
       small=(Shape(dict(d=100, pool=SMALL_POOL)),),
       model=(Shape(dict(d=1536)), Shape(dict(d=1537)))),      # 1537: torch's SiLU splits such a row
    Op("rotary", _rotary, accuracy.rotary,
       small=(Shape(dict(heads=3, head_dim=16, pool=SMALL_POOL)),), model=(Shape(dict(heads=12, head_dim=64)),)),
    Op("attention", _attention, accuracy.attention,
       small=(Shape(dict(n_requests=3, max_ctx=12, block_size=4, n_q_heads=2, n_kv_heads=1, head_dim=8,
                         launches=6, max_new=4)),),
       model=(Shape(dict(n_requests=4, max_ctx=200, block_size=16, n_q_heads=9, n_kv_heads=3, head_dim=64,
                         launches=40, max_new=9)),)),
)}
"""Every op of the backend interface, by name, in the order the tools report them."""
