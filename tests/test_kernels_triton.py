"""The "triton" backend under TRITON_INTERPRET=1 (set by conftest before triton is imported):
bitwise batch invariance per op and dtype, accuracy against float64 NumPy, and the one-line error
when neither a GPU nor the interpreter is available. Shapes are small: the interpreter runs every
program in Python.

Invariance (kerneltools/invariance.py): linear over every M in 1..64 (all row positions of its
16-row tiles, several tiles); the one-program-per-row ops over M in SIZES (1..64, both tile
edges); attention queries in mixed decode/verify/prefill launches vs their own decode step.

Accuracy tolerances (u32 = 2^-24; u = unit roundoff of the output dtype; float64 reference on the
same rounded inputs):
    linear       |y - y64| <= gamma_K * (|x| @ |w|.T) + u * |y64| + tiny
    rms_norm     |y - y64| <= ((D + 8) u32 + 2u) * |y64| + tiny
    softmax      |y - y64| <= (8 + |x - max x|) u32 * y64 + 1e-12     (GPU exp is approximate:
    log_softmax  |y - y64| <= 8 u32 (|x - max x| + |log s|) + 1e-6      the interpreter's is libm)
    silu_mul     |y - y64| <= (8 u32 + u) * |y64| + tiny
    rotary       |y - y64| <= (8 u32 + u) * (|x0| + |x1|) + tiny
    attention    |y - y64| <= 1e-5
"""

import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from specverify.kernels import accuracy
from specverify.kernels.backend import get_backend
from specverify.kerneltools import invariance

pytest.importorskip("triton")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
SIZES = (1, 2, 3, 5, 8, 13, 16, 17, 31, 33, 64)


@pytest.fixture(scope="module")
def tri():
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0") and not torch.cuda.is_available():
        pytest.skip("needs TRITON_INTERPRET=1 (tests/conftest.py sets it) or a GPU")
    return get_backend("triton")


def _msg(r):
    return f"{r.op} on {r.backend}: {r.mismatches}/{r.rows_compared} rows differ; first {r.first}"


_f64 = accuracy.f64


# ---------------------------------------------------------------- invariance
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_rows_are_batch_invariant_for_every_m_up_to_64(tri, dtype):
    r = invariance.check(tri, "linear", k=40, n=40, dtype=dtype, sizes=range(1, 65), pool=64)
    assert r.ok, _msg(r)


@pytest.mark.parametrize("op,d", [("rms_norm", 100), ("softmax", 300), ("log_softmax", 300), ("silu_mul", 100)])
def test_row_ops_are_batch_invariant(tri, op, d):
    r = invariance.check(tri, op, d=d, sizes=SIZES, pool=64)
    assert r.ok, _msg(r)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_row_ops_low_precision_are_batch_invariant(tri, dtype):
    for op in ("rms_norm", "silu_mul"):
        r = invariance.check(tri, op, d=48, dtype=dtype, sizes=(1, 3, 8, 17), pool=17)
        assert r.ok, _msg(r)


def test_softmax_row_longer_than_one_chunk_is_invariant(tri):
    r = invariance.check(tri, "softmax", d=2500, sizes=(1, 2, 5), pool=5)   # 3 chunks of 1024
    assert r.ok, _msg(r)


def test_rotary_is_batch_invariant(tri):
    r = invariance.check(tri, "rotary", heads=3, head_dim=16, sizes=SIZES, pool=64)
    assert r.ok, _msg(r)


@pytest.mark.parametrize("dims", [
    dict(n_requests=3, max_ctx=12, block_size=4, n_q_heads=2, n_kv_heads=1, head_dim=8, launches=6, max_new=4),
    dict(n_requests=2, max_ctx=20, block_size=3, n_q_heads=4, n_kv_heads=2, head_dim=12, launches=4, max_new=5),
])
def test_attention_query_matches_its_decode_step_in_any_launch(tri, dims):
    # block_size 3 and head dim 12 exercise chunks straddling pages and a masked head-dim tail
    r = invariance.check(tri, "attention", **dims)
    assert r.ok, _msg(r)


@pytest.mark.slow
@pytest.mark.parametrize("op,d", [("rms_norm", 576), ("softmax", 1000), ("silu_mul", 1536)])
def test_row_ops_every_m_up_to_64_slow(tri, op, d):
    r = invariance.check(tri, op, d=d, sizes=range(1, 65), pool=64)
    assert r.ok, _msg(r)


# ---------------------------------------------------------------- accuracy
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_accuracy(tri, dtype):
    g = torch.Generator().manual_seed(21)
    k = 70                                            # three K tiles, the last one partial
    x = torch.randn(19, k, generator=g).to(dtype)
    w = (torch.randn(45, k, generator=g) * k ** -0.5).to(dtype)
    ref, bound = accuracy.linear(x, w)
    assert (np.abs(_f64(tri.linear(x, w)) - ref) <= bound).all()
    assert tri.linear(x, w).dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_accuracy(tri, dtype):
    g = torch.Generator().manual_seed(22)
    d = 100
    x = (torch.randn(5, d, generator=g) * 2).to(dtype)
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
    ref, bound = accuracy.rms_norm(x, w, 1e-5)
    assert (np.abs(_f64(tri.rms_norm(x, w, 1e-5)) - ref) <= bound).all()


def test_softmax_and_log_softmax_accuracy(tri):
    g = torch.Generator().manual_seed(23)
    x = torch.randn(3, 2500, generator=g) * 4
    (ref_sm, bound_sm), (ref_lsm, bound_lsm) = accuracy.softmax(x)
    sm, lsm = _f64(tri.softmax(x)), _f64(tri.log_softmax(x))
    assert (np.abs(sm - ref_sm) <= bound_sm + 1e-12).all()
    assert (np.abs(lsm - ref_lsm) <= bound_lsm + 1e-6).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_mul_accuracy(tri, dtype):
    g = torch.Generator().manual_seed(24)
    gu = (torch.randn(4, 200, generator=g) * 4).to(dtype)
    gate, up = gu[:, :100], gu[:, 100:]               # strided halves, as the engine slices them
    ref, bound = accuracy.silu_mul(gate, up)
    assert (np.abs(_f64(tri.silu_mul(gate, up)) - ref) <= bound).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_accuracy(tri, dtype):
    g = torch.Generator().manual_seed(25)
    t, h, dh, theta = 5, 3, 16, 10000.0
    qkv = torch.randn(t, 2 * h, dh, generator=g).to(dtype)
    x = qkv[:, :h]                                    # a strided view, as the engine passes it
    pos = torch.tensor([0, 1, 17, 1000, 8191])
    ref, bound = accuracy.rotary(x, pos, theta)
    assert (np.abs(_f64(tri.rotary(x, pos, theta)) - ref) <= bound).all()


def test_attention_accuracy_against_float64(tri):
    rng = np.random.default_rng(26)
    nb, bs, hkv, hq, dh = 12, 4, 2, 4, 8
    kc = torch.from_numpy(rng.standard_normal((nb, bs, hkv, dh), dtype=np.float32))
    vc = torch.from_numpy(rng.standard_normal((nb, bs, hkv, dh), dtype=np.float32))
    tables = torch.tensor([[3, 0, 7, 9, 11], [5, 1, 10, 2, 4]], dtype=torch.int32)
    ns, ctx = [1, 4], [19, 9]                          # a decode and a verify step
    cu = torch.tensor([0, 1, 5], dtype=torch.int32)
    q = torch.from_numpy(rng.standard_normal((5, hq, dh), dtype=np.float32))
    lens = torch.tensor(ctx, dtype=torch.int32)
    y = _f64(tri.attention(q, kc, vc, tables, lens, cu, dh ** -0.5))
    ref, atol = accuracy.attention(q, kc, vc, tables, lens, cu, dh ** -0.5)
    assert sum(ns) == q.shape[0] and np.abs(y - ref).max() <= atol


def test_backends_agree_to_rounding(tri):
    """The Triton and numba kernels reduce in different orders, so their bits may differ, but not
    by more than rounding: the same tiny model gives logits within 1e-4."""
    inv = get_backend("invariant")
    g = torch.Generator().manual_seed(27)
    x, w = torch.randn(6, 64, generator=g), torch.randn(32, 64, generator=g) * 0.125
    assert torch.allclose(tri.linear(x, w), inv.linear(x, w), atol=1e-5, rtol=1e-5)


# ---------------------------------------------------------------- refusal without GPU or interpreter
def test_backend_refuses_with_a_one_line_error_without_gpu_or_interpreter():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the backend is usable without the interpreter")
    code = ("from specverify.errors import InputError\n"
            "from specverify.kernels.backend import get_backend\n"
            "try:\n    get_backend('triton')\nexcept InputError as e:\n    print('ERR', e)\n")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ERR ") and "TRITON_INTERPRET=1" in lines[0], out
