"""The "invariant" CPU backend: bitwise batch invariance of every op, its documented reduction
order, accuracy against float64 NumPy, and the negative control (the "default" backend fails the
same invariance harness on shapes where it demonstrably does).

Invariance: `kerneltools/invariance.py` (row r of a launch over M rows, M = 1..64, in a contiguous
block and in a shuffled composition with repeats, must equal row r launched alone; attention: a
query's output in mixed decode/verify/prefill launches must equal its own decode step).

Accuracy tolerances (u = unit roundoff of the output dtype: fp32 2^-24, bf16 2^-8, fp16 2^-11;
u32 = 2^-24; references are float64 on the same, already rounded, inputs):
    linear       |y - y64| <= gamma_K * (|x| @ |w|.T) + u * |y64| + tiny      gamma_K = K u32 / (1 - K u32)
    rms_norm     |y - y64| <= ((D + 8) u32 + 2u) * |y64| + tiny
    softmax      |y - y64| <= (8 + |x - max x|) u32 * y64
    log_softmax  |y - y64| <= 8 u32 * (|x - max x| + |log s|)
    silu_mul     |y - y64| <= (8 u32 + u) * |y64| + tiny         tiny = half the dtype's subnormal step
    rotary       |y - y64| <= (8 u32 + u) * (|x0| + |x1|) + tiny
    attention    |y - y64| <= 1e-5 (fp32; entries of V are O(1))
"""

import math

import numpy as np
import pytest
import torch

from specverify.kernels import accuracy, cpu_linear
from specverify.kernels.backend import get_backend
from specverify.kerneltools import invariance

DTYPES = [torch.float32, torch.bfloat16, torch.float16]


@pytest.fixture(scope="module")
def inv():
    return get_backend("invariant")


@pytest.fixture(scope="module")
def default():
    return get_backend("default")


def _msg(r):
    return f"{r.op} on {r.backend}: {r.mismatches}/{r.rows_compared} rows differ; first {r.first}"


# ---------------------------------------------------------------- the documented order, bit for bit
@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 9])
def test_linear_is_exactly_the_documented_sequential_loop(m):
    rng = np.random.default_rng(m)
    k, n = 77, 130                                    # n not a multiple of PANEL_N: padded panel
    x = rng.standard_normal((m, k), dtype=np.float32)
    w = rng.standard_normal((n, k), dtype=np.float32)
    want = np.zeros((m, n), np.float32)
    for j in range(k):                                # acc = fl32(acc + fl32(x * w)), k in order
        want = want + x[:, j:j + 1] * w[None, :, j]
    for parallel in (False, True):
        got = cpu_linear.linear(x, cpu_linear.pack_weight(w), n, parallel)
        assert np.array_equal(got, want), f"M={m} parallel={parallel}"


def test_rms_norm_is_exactly_the_documented_sequential_loop(inv):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((5, 37), dtype=np.float32)
    w = rng.standard_normal(37, dtype=np.float32)
    want = np.empty_like(x)
    for m in range(5):
        ss = np.float32(0)
        for d in range(37):
            ss = np.float32(ss + np.float32(x[m, d] * x[m, d]))
        inv_rms = np.float32(1) / np.sqrt(np.float32(ss / np.float32(37) + np.float32(1e-5)))
        want[m] = (x[m] * inv_rms) * w
    got = inv.rms_norm(torch.from_numpy(x), torch.from_numpy(w), 1e-5).numpy()
    assert np.array_equal(got, want)


def _libm_expf():
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.expf.restype, libm.expf.argtypes = ctypes.c_float, [ctypes.c_float]
    return lambda v: np.float32(libm.expf(float(v)))


def test_softmax_is_exactly_the_documented_sequence(inv):
    expf = _libm_expf()                               # numba's math.exp on float32 is libm's expf
    x = (np.random.default_rng(2).standard_normal((3, 50)) * 4).astype(np.float32)
    want_sm, want_lsm = np.empty_like(x), np.empty_like(x)
    for m in range(3):
        mx = x[m].max()
        s = 0.0
        for v in range(50):
            s = s + float(expf(x[m, v] - mx))         # float64, in order
        inv_s = np.float32(1.0 / s)
        log_s = np.float32(np.log(s))
        for v in range(50):
            want_sm[m, v] = expf(x[m, v] - mx) * inv_s
            want_lsm[m, v] = (x[m, v] - mx) - log_s
    assert np.array_equal(inv.softmax(torch.from_numpy(x)).numpy(), want_sm)
    assert np.array_equal(inv.log_softmax(torch.from_numpy(x)).numpy(), want_lsm)


@pytest.mark.parametrize("hq, dh", [(2, 5), (6, 64)], ids=["plain-loop", "register-pv-4+2-heads"])
def test_attention_is_exactly_the_documented_sequence(inv, hq, dh):
    # dh 64 takes cpu_attention._pv_rows (PV_DIM): 6 heads of one KV head = a block of 4 and one of 2
    expf = _libm_expf()
    rng = np.random.default_rng(3)
    nb, bs, hkv = 6, 3, 1
    kc = rng.standard_normal((nb, bs, hkv, dh), dtype=np.float32)
    vc = rng.standard_normal((nb, bs, hkv, dh), dtype=np.float32)
    table = np.array([[4, 1, 5, 0]], np.int32)
    q = rng.standard_normal((3, hq, dh), dtype=np.float32)        # a verify step: positions 7, 8, 9
    scale = np.float32(dh ** -0.5)
    got = inv.attention(torch.from_numpy(q), torch.from_numpy(kc), torch.from_numpy(vc), torch.from_numpy(table),
                        torch.tensor([10], dtype=torch.int32), torch.tensor([0, 3], dtype=torch.int32),
                        float(scale)).numpy()
    for j, pos in enumerate((7, 8, 9)):
        for h in range(hq):
            kv = [(table[0, t // bs], t % bs) for t in range(pos + 1)]
            score = []
            for blk, slot in kv:
                dot = np.float32(0)
                for d in range(dh):
                    dot = np.float32(dot + np.float32(q[j, h, d] * kc[blk, slot, 0, d]))
                score.append(np.float32(dot * scale))
            mx = max(score)
            e = [expf(np.float32(s - mx)) for s in score]
            z = np.float32(0)
            for et in e:
                z = np.float32(z + et)
            for d in range(dh):
                acc = np.float32(0)
                for et, (blk, slot) in zip(e, kv):
                    acc = np.float32(acc + np.float32(et * vc[blk, slot, 0, d]))
                assert got[j, h, d] == np.float32(acc / z), (j, h, d)


# ---------------------------------------------------------------- invariance, per op and dtype
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_rows_are_batch_invariant(inv, dtype):
    r = invariance.check(inv, "linear", k=576, n=960, dtype=dtype)
    assert r.ok, _msg(r)
    assert r.launches == 128 and r.rows_compared == 2 * sum(range(1, 65))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_invariant_when_k_and_n_are_ragged(inv, dtype):
    r = invariance.check(inv, "linear", k=100, n=70, dtype=dtype, sizes=range(1, 40), pool=16, seed=3)
    assert r.ok, _msg(r)


@pytest.mark.parametrize("op,d", [("rms_norm", 576), ("rms_norm", 1537), ("softmax", 1000), ("log_softmax", 1000),
                                  ("silu_mul", 1537), ("silu_mul", 1536)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_row_ops_are_batch_invariant(inv, op, d, dtype):
    r = invariance.check(inv, op, d=d, dtype=dtype)
    assert r.ok, _msg(r)


@pytest.mark.parametrize("op", ["softmax", "log_softmax"])
def test_softmax_over_a_full_vocabulary_is_batch_invariant(inv, op):
    # a 49152-wide row is where torch's own reductions split one row over threads (see the
    # negative control on mean); 16 launch sizes keep it quick
    r = invariance.check(inv, op, d=49152, sizes=range(1, 17), pool=16)
    assert r.ok, _msg(r)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_is_batch_invariant(inv, dtype):
    r = invariance.check(inv, "rotary", dtype=dtype)
    assert r.ok, _msg(r)


@pytest.mark.parametrize("dims", [dict(n_q_heads=6, n_kv_heads=2, head_dim=16, block_size=4),
                                  dict(n_q_heads=9, n_kv_heads=3, head_dim=64, block_size=16, max_ctx=70),
                                  dict(n_q_heads=10, n_kv_heads=2, head_dim=64, block_size=5, max_ctx=50),
                                  dict(n_q_heads=2, n_kv_heads=2, head_dim=20, block_size=3)])
def test_attention_query_matches_its_decode_step_in_any_launch(inv, dims):
    r = invariance.check(inv, "attention", **dims)
    assert r.ok, _msg(r)
    assert r.rows_compared >= r.launches


def test_parallel_kernels_give_the_same_bits():
    from specverify.kernels.cpu_backend import InvariantBackend
    serial, par = InvariantBackend(), InvariantBackend(parallel=True)
    g = torch.Generator().manual_seed(5)
    x, w = torch.randn(37, 576, generator=g), torch.randn(960, 576, generator=g)
    assert torch.equal(serial.linear(x, w), par.linear(x, w))
    assert invariance.check(par, "attention").ok
    # the backend splits only launches of >= PARALLEL_MIN_WORK (cpu_backend): the kernels' own
    # parallel attention directly, on a ragged batch of 3 requests
    import numpy as np
    from specverify.kernels import cpu_attention
    rng = np.random.default_rng(6)
    q = rng.standard_normal((7, 9, 64)).astype(np.float32)
    kc, vc = (rng.standard_normal((12, 16, 3, 64)).astype(np.float32) for _ in range(2))
    tables = np.arange(12).reshape(3, 4)
    args = (q, kc, vc, tables, np.array([40, 5, 63]), np.array([0, 1, 5, 7]), 0.125)
    assert np.array_equal(cpu_attention.attention(*args, parallel=True).view(np.uint32),
                          cpu_attention.attention(*args, parallel=False).view(np.uint32))


# ---------------------------------------------------------------- negative control
def test_negative_control_default_linear_is_not_batch_invariant(default):
    """The harness must see the problem it exists to catch: torch's CPU matmul (MKL) gives a row
    other bits in a launch of 2..11 rows than alone (M = 1 takes a gemv path)."""
    r = invariance.check(default, "linear", k=576, n=960, sizes=range(1, 17))
    assert not r.ok and r.first is not None
    assert 0 < r.first["max_abs_diff"] < 1e-3        # a rounding-level difference, not a wrong result


def test_negative_control_default_attention_is_not_batch_invariant(default):
    r = invariance.check(default, "attention")
    assert not r.ok, "the default attention unexpectedly passed: the harness would be blind"


def test_harness_flags_a_single_flipped_bit():
    """A backend that perturbs one row by one ulp when the launch has 7 rows is caught, at M = 7."""
    base = get_backend("invariant")

    class Flaky:
        name = "flaky"

        def linear(self, x, w):
            y = base.linear(x, w)
            if x.shape[0] == 7:
                y[3, 0] = torch.nextafter(y[3, 0], torch.tensor(float("inf")))
            return y

    r = invariance.check(Flaky(), "linear", k=64, n=64, sizes=range(1, 10), pool=16)
    assert r.mismatches == 2 and r.diff_sizes == (7,)


# ---------------------------------------------------------------- accuracy against float64
_f64 = accuracy.f64


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_linear_accuracy(inv, dtype):
    g = torch.Generator().manual_seed(11)
    k = 576
    x = torch.randn(9, k, generator=g).to(dtype)
    w = (torch.randn(300, k, generator=g) * k ** -0.5).to(dtype)
    ref, bound = accuracy.linear(x, w)
    assert (np.abs(_f64(inv.linear(x, w)) - ref) <= bound).all()
    assert inv.linear(x, w).dtype == dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rms_norm_accuracy(inv, dtype):
    g = torch.Generator().manual_seed(12)
    d = 576
    x = (torch.randn(9, d, generator=g) * 2).to(dtype)
    w = (1 + 0.1 * torch.randn(d, generator=g)).to(dtype)
    ref, bound = accuracy.rms_norm(x, w, 1e-5)
    assert (np.abs(_f64(inv.rms_norm(x, w, 1e-5)) - ref) <= bound).all()


@pytest.mark.parametrize("v", [1000, 49152])
def test_softmax_and_log_softmax_accuracy(inv, v):
    g = torch.Generator().manual_seed(13)
    x = torch.randn(4, v, generator=g) * 4
    (ref_sm, bound_sm), (ref_lsm, bound_lsm) = accuracy.softmax(x)
    sm, lsm = _f64(inv.softmax(x)), _f64(inv.log_softmax(x))
    assert (np.abs(sm - ref_sm) <= bound_sm).all()
    assert (np.abs(lsm - ref_lsm) <= bound_lsm).all()
    assert inv.softmax(x).dtype == torch.float32


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_silu_mul_accuracy(inv, dtype):
    g = torch.Generator().manual_seed(14)
    gate, up = (torch.randn(5, 300, generator=g) * 4).to(dtype), torch.randn(5, 300, generator=g).to(dtype)
    ref, bound = accuracy.silu_mul(gate, up)
    assert (np.abs(_f64(inv.silu_mul(gate, up)) - ref) <= bound).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_rotary_accuracy(inv, dtype):
    g = torch.Generator().manual_seed(15)
    t, h, dh, theta = 7, 3, 64, 10000.0
    x = torch.randn(t, h, dh, generator=g).to(dtype)
    pos = torch.tensor([0, 1, 5, 100, 1000, 4095, 8191])
    ref, bound = accuracy.rotary(x, pos, theta)
    assert (np.abs(_f64(inv.rotary(x, pos, theta)) - ref) <= bound).all()


def test_attention_accuracy_against_float64(inv):
    rng = np.random.default_rng(16)
    nb, bs, hkv, hq, dh = 20, 4, 2, 6, 16
    kc = torch.from_numpy(rng.standard_normal((nb, bs, hkv, dh), dtype=np.float32))
    vc = torch.from_numpy(rng.standard_normal((nb, bs, hkv, dh), dtype=np.float32))
    tables = torch.tensor([[3, 0, 7, 9, 11], [5, 1, 12, 2, 4], [19, 18, 17, 16, 15]], dtype=torch.int32)
    ns, ctx = [1, 4, 6], [17, 9, 6]                   # decode, verify, prefill
    cu = torch.tensor([0, 1, 5, 11], dtype=torch.int32)
    q = torch.from_numpy(rng.standard_normal((11, hq, dh), dtype=np.float32))
    lens = torch.tensor(ctx, dtype=torch.int32)
    y = _f64(inv.attention(q, kc, vc, tables, lens, cu, dh ** -0.5))
    ref, atol = accuracy.attention(q, kc, vc, tables, lens, cu, dh ** -0.5)
    assert sum(ns) == q.shape[0] and np.abs(y - ref).max() <= atol


def test_linear_pack_cache_follows_in_place_updates(inv):
    w = torch.randn(64, 32)
    x = torch.randn(3, 32)
    y0 = inv.linear(x, w)
    with torch.no_grad():
        w.mul_(2)                                     # bumps the version counter: repacked
    assert torch.equal(inv.linear(x, w), inv.linear(x, inv.pack_linear_weight(w)))
    assert not torch.equal(inv.linear(x, w), y0)
    assert math.isclose(inv.linear(x, w).abs().sum().item(), 2 * y0.abs().sum().item(), rel_tol=1e-5)
