"""The "invariant" op backend, the CPU one: batch-invariant torch CPU ops on numba kernels, fast
enough to run a 135M-parameter model (`python -m specverify.kerneltools.bench` measures it against
"default"). It is registered as "invariant", the name the engine's flags and results use.

Every op computes each output row (for attention: each query and head) alone, in a fixed order of
rounded operations that its kernel's docstring spells out (`cpu_linear`, `cpu_rms_norm`,
`cpu_softmax`, `cpu_rotary`, `cpu_silu_mul`, `cpu_attention`): no split-K, no reduction whose
order depends on the number of rows, no vector/scalar remainder split, no thread-count
dependence. So a row's bits do not depend on which rows share the launch, how many there are, or
where the row sits; `tests/test_kernels_invariant.py` checks that for M = 1..64 and ragged mixes.

Using it efficiently (what the engine should know):
  * fp32 everywhere is the fast path. bf16/fp16 inputs are accepted (converted to fp32, exactly,
    computed with fp32 accumulation, cast back), at the cost of a conversion per call.
  * `linear` packs each weight once into K-major panels (`cpu_linear.pack_weight`, ~the weight's
    size again in memory) and caches the packing per weight tensor object, checked against its
    data pointer and version counter. Pass the *same* tensor object every call (a fresh view
    each call would repack each call). `pack_linear_weight(w)` packs explicitly; `linear` accepts
    the result in place of w. Any weight layout works (W or W.T.contiguous().T alike).
  * A `QuantizedWeight` (GGUF Q4_1 / Q8_0 blocks) goes to `cpu_linear_q`, which dequantizes in
    registers and sums in `cpu_linear`'s order: the same bits as the fp32-dequantized matrix, from
    a panel layout (built once, kept on the weight) of 0.75 / 1.125 bytes per weight.
  * "invariant-q8" is this backend with `activations="q8"`: `linear` on a Q4_1 or Q8_0 weight
    quantises each row of x to 8-bit blocks and takes exact integer dot products
    (`cpu_linear_q8`, its own k-pair panel layout): faster, still batch-invariant, but NOT the
    fp32 path's logits (x is rounded to 8 bits per block). The method `linear_q8` is that kernel
    on every backend, whatever `activations` says.
  * `llama_layers(x, layers, cache, batch, config)` runs a Llama's decoder layers on the q8 path
    one numba call a layer (`cpu_layer_q8`: the same kernels and bits as the nine launches a
    layer of the generic forward, without their Python); None where it does not apply (see there).
    On a parallel backend the fused layer splits the panels of its linears of at least
    LAYER_SPLIT_MIN_WORK multiply-adds over the threads (issue 30: at M = 1..4 every launch is
    below PARALLEL_MIN_WORK, but inside the compiled call a fork-join costs microseconds).
  * A (kappa+1)-row verify step reads each weight once, like a decode step (the micro-kernel
    handles ROW_BLOCK = 4 rows per pass over a cached panel), so it costs far less than kappa+1
    decode steps.
  * Use `silu_mul(gate, up)` for the SwiGLU gate rather than torch's SiLU, whose vectorised and
    scalar-remainder exps can differ (a row length that is not a multiple of 16 shows it).
  * Threads: by default the kernels run on the calling thread (`InvariantBackend(parallel=True)`
    spreads linear panels and attention heads over numba's threads: same bits, faster on an idle
    machine, slower on a contended one: numba's OpenMP pool is not torch's). Even then a launch
    smaller than PARALLEL_MIN_WORK multiply-adds runs on the calling thread: a decode step makes
    ~200 launches, and a fork-join over threads costs more than a small launch gains (on the
    shared 2 cores a parallel launch waits for its other thread to be scheduled: the 2-thread bench
    of every launch in parallel did not finish one prompt in 17 minutes). Which launches split
    changes who computes a row, never how: the same bits.
"""

from __future__ import annotations

import weakref

import numpy as np

from . import (cpu_attention, cpu_layer_q8, cpu_linear, cpu_linear_q, cpu_linear_q8, cpu_rms_norm, cpu_rotary, cpu_silu_mul,
               cpu_softmax)
from .backend import register_backend
from .cpu_common import assert_no_svml
from .quant import Q4_1, QuantizedWeight


class PackedLinearWeight:
    """A weight [N, K] packed for `cpu_linear` (K-major panels, float32)."""

    __slots__ = ("panels", "n", "k", "__weakref__")

    def __init__(self, weight):
        w = weight.detach()
        self.n, self.k = int(w.shape[0]), int(w.shape[1])
        self.panels = cpu_linear.pack_weight(w.float().numpy())

    @property
    def shape(self):
        return (self.n, self.k)


def _f32(t):
    """A C-contiguous float32 numpy view (or copy) of a CPU tensor."""
    import torch
    if t.dtype is torch.float32 and not t.requires_grad and t.is_contiguous():
        return t.numpy()                                   # the common case, ~1 us
    t = t.detach()
    if t.dtype != torch.float32:
        t = t.float()
    return t.contiguous().numpy()


def _rows(x):
    """x as [M, last] (a no-op for the usual 2-D input)."""
    return x if x.dim() == 2 else x.reshape(-1, x.shape[-1])


class InvariantBackend:
    """Batch-invariant CPU ops (numba kernels); see the module docstring."""

    name = "invariant"
    batch_invariant = True

    def __init__(self, parallel: bool = False, activations: str = "fp32"):
        assert_no_svml()
        if activations not in ACTIVATIONS:
            raise ValueError(f"activations {activations!r}: choose one of {', '.join(ACTIVATIONS)}")
        self.parallel = bool(parallel)
        self.activations = activations
        if activations == "q8":
            self.name = Q8_NAME
        self._packed: dict[int, tuple] = {}

    # ------------------------------------------------------------------ linear
    def pack_linear_weight(self, weight) -> PackedLinearWeight:
        """Pack `weight` [N, K] once; `linear(x, packed)` then skips the cache lookup."""
        return weight if isinstance(weight, PackedLinearWeight) else PackedLinearWeight(weight)

    def _lookup(self, weight) -> PackedLinearWeight:
        key = id(weight)
        version = _version(weight)
        hit = self._packed.get(key)
        if hit is not None:
            ref, ptr, ver, shape, packed = hit
            if ref() is weight and ptr == weight.data_ptr() and ver == version and shape == tuple(weight.shape):
                return packed
        packed = PackedLinearWeight(weight)
        self._packed[key] = (weakref.ref(weight), weight.data_ptr(), version, tuple(weight.shape), packed)
        weakref.finalize(weight, self._packed.pop, key, None)
        return packed

    def linear(self, x, weight):
        if self.activations == "q8":
            return self.linear_q8(x, weight)
        return self._linear(x, weight, cpu_linear_q)

    def linear_q8(self, x, weight):
        """x @ weight.T with x rounded to 8-bit blocks when weight is GGUF-quantized (Q4_1 or Q8_0:
        `cpu_linear_q8`); an fp32 weight: `linear`'s exact kernel."""
        return self._linear(x, weight, cpu_linear_q8)

    def _linear(self, x, weight, quantized_kernel):
        import torch
        if isinstance(weight, QuantizedWeight):
            n = weight.n
            panels = weight.packed(quantized_kernel.PACK_KEY, lambda: quantized_kernel.pack(weight))
            x2 = _f32(_rows(x))
            y = quantized_kernel.linear(x2, panels, n, weight.k, _split(self.parallel, x2.shape[0] * n * weight.k))
        else:
            packed = weight if isinstance(weight, PackedLinearWeight) else self._lookup(weight)
            n = packed.n
            x2 = _f32(_rows(x))
            y = cpu_linear.linear(x2, packed.panels, n, _split(self.parallel, x2.shape[0] * n * packed.k))
        y = torch.from_numpy(y)
        if x.dim() != 2:
            y = y.reshape(*x.shape[:-1], n)
        return y if x.dtype == torch.float32 else y.to(x.dtype)

    # ------------------------------------------------------------------ row ops
    def rms_norm(self, x, weight, eps: float):
        import torch
        x2 = _f32(_rows(x))
        if x.dtype == torch.float32 and weight.dtype == torch.float32:
            y = cpu_rms_norm.rms_norm(x2, _f32(weight), eps)
            return torch.from_numpy(y).reshape(x.shape)
        # other dtypes: normalise in fp32, cast, then scale in the input dtype (like the default)
        y = torch.from_numpy(cpu_rms_norm.rms_norm(x2, np.ones(x2.shape[1], np.float32), eps))
        return y.reshape(x.shape).to(x.dtype) * weight

    def softmax(self, x):
        import torch
        return torch.from_numpy(cpu_softmax.softmax(_f32(_rows(x)))).reshape(x.shape)

    def log_softmax(self, x):
        import torch
        return torch.from_numpy(cpu_softmax.log_softmax(_f32(_rows(x)))).reshape(x.shape)

    def silu_mul(self, gate, up):
        import torch
        g2 = _rows(gate).detach().numpy() if gate.dtype == torch.float32 else _f32(_rows(gate))
        u2 = _rows(up).detach().numpy() if up.dtype == torch.float32 else _f32(_rows(up))
        y = torch.from_numpy(cpu_silu_mul.silu_mul(g2, u2)).reshape(gate.shape)
        return y if gate.dtype == torch.float32 else y.to(gate.dtype)

    def rotary(self, x, positions, theta: float):
        import torch
        pos = positions.detach().to(torch.int64).contiguous().numpy()
        y = torch.from_numpy(cpu_rotary.rotary(_f32(x), pos, theta))
        return y if x.dtype == torch.float32 else y.to(x.dtype)

    # ------------------------------------------------------------------ a whole decoder stack
    def llama_layers(self, x, layers, cache, batch, config):
        """The decoder layers of `specverify.engine.model.Llama` on x [T, D] in one compiled call a
        layer (`cpu_layer_q8.layer_q4_1`: the same kernels, the same bits as the generic forward's
        launches), or None where that does not apply -- the fp32-activation variant, a matrix that
        is not Q4_1, a non-fp32 norm / activation / cache, or an attention launch this backend would
        split over threads (prefill) -- and the caller runs its generic loop. A parallel backend
        splits the output panels of each linear of at least LAYER_SPLIT_MIN_WORK multiply-adds over
        numba's threads inside the call (the same bits)."""
        import torch
        if self.activations != "q8" or x.dtype != torch.float32 or cache.k.dtype != torch.float32:
            return None
        T = int(x.shape[0])
        Hq, Hkv, Dh, F = config.n_heads, config.n_kv_heads, config.head_dim, config.ffn_dim
        ctx = batch.context_lens.numpy().astype(np.int64)
        if T == 0 or Dh > cpu_attention.MAX_HEAD_DIM or Dh % 2:
            return None
        if self.parallel and T * Hq * Dh * int(ctx.max()) >= PARALLEL_MIN_WORK:
            return None                                    # the generic path splits attention over threads
        mats = []
        for w in layers:
            ws = (w.wqkv, w.wo, w.w_gate_up, w.w_down)
            if not all(isinstance(m, QuantizedWeight) and m.kind == Q4_1 for m in ws):
                return None
            if w.attn_norm.dtype != torch.float32 or w.ffn_norm.dtype != torch.float32:
                return None
            mats.append([m.packed(cpu_linear_q8.PACK_KEY, lambda m=m: cpu_linear_q8.pack(m))[1:] for m in ws])
        cu = batch.cu_seqlens_q.numpy().astype(np.int64)
        n_tok = np.diff(cu)
        if (n_tok < 0).any() or (n_tok > ctx).any():
            raise ValueError("attention: cu_seqlens_q / context_lens describe a query outside its context")
        first_tok = cu[:-1].copy()
        tables = batch.block_tables.numpy().astype(np.int64)
        slots = batch.slot_mapping.numpy().astype(np.int64)
        positions = batch.positions.numpy().astype(np.int64)
        freq = cpu_rotary.inv_freq(Dh, config.rope_theta)
        eps, scale = np.float32(config.norm_eps), np.float32(Dh ** -0.5)
        k_all, v_all = cache.k.numpy(), cache.v.numpy()
        h = np.ascontiguousarray(x.numpy(), dtype=np.float32)
        for i, (w, m) in enumerate(zip(layers, mats)):
            h = cpu_layer_q8.layer_q4_1(
                h, _f32(w.attn_norm), _f32(w.ffn_norm), eps, *m[0], *m[1], *m[2], *m[3],
                k_all[i], v_all[i], slots, positions, freq, tables, first_tok, n_tok, ctx, scale, Hq, Hkv, F,
                LAYER_SPLIT_MIN_WORK if self.parallel else cpu_layer_q8.NO_SPLIT)
        return torch.from_numpy(h)

    # ------------------------------------------------------------------ attention
    def attention(self, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale: float):
        import torch
        ctx = context_lens.detach().cpu().numpy()
        work = q.shape[0] * q.shape[1] * q.shape[2] * int(ctx.max()) if q.shape[0] and ctx.size else 0
        out = cpu_attention.attention(
            _f32(q), _f32(k_cache), _f32(v_cache), block_tables.detach().cpu().numpy(),
            ctx, cu_seqlens_q.detach().cpu().numpy(), scale, _split(self.parallel, work))
        y = torch.from_numpy(out)
        return y if q.dtype == torch.float32 else y.to(q.dtype)


def _version(t):
    try:
        return t._version
    except RuntimeError:       # an inference-mode tensor has no version counter
        return None


PARALLEL_MIN_WORK = 1 << 23
"""Multiply-adds (M N K for a linear, T Hq Dh max-context for attention) below which a launch of a
parallel backend runs on the calling thread: with SmolLM2 at M = 1..4 only the head (49152 x 576)
splits; prefill launches all do. The fused q8 layer (`llama_layers`) applies it to attention only:
its linears split from LAYER_SPLIT_MIN_WORK."""


LAYER_SPLIT_MIN_WORK = 3 << 18
"""Multiply-adds from which a linear inside the fused q8 layer of a parallel backend splits its
panels over numba's threads (`cpu_layer_q8`: one parallel region, a few microseconds, not a
Python launch). Measured at M = 1 on the shared cores (load ~4, weights hot): gate_up (1.8 M)
22.5 -> 15.0 us split, down (0.88 M) 15.2 -> 12.8 us, qkv (0.55 M) 8.1 -> 10.1 us: 786432 splits the
first two at decode and all four from M = 2 (a verify step)."""


def _split(parallel: bool, work: int) -> bool:
    return parallel and work >= PARALLEL_MIN_WORK


ACTIVATIONS = ("fp32", "q8")
"""How `linear` takes x against a Q4_1 weight: as it is (exact) or rounded to 8-bit blocks."""
Q8_NAME = "invariant-q8"


register_backend("invariant", InvariantBackend)
register_backend(Q8_NAME, lambda: InvariantBackend(activations="q8"))
