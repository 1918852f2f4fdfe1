"""One Llama decoder layer of the "invariant-q8" backend in a single numba call (issue 30).

The generic forward (`specverify.engine.model.Llama.forward`) makes nine backend launches a layer,
each through torch -> numpy conversions, shape checks and fresh output tensors: measured on the
q8 path, that Python between the launches cost as much CPU time as the launches themselves (a
SmolLM2-135M decode step: 8.1 ms of kernels, 17.2 ms a forward). `layer_q4_1` runs the same
launches, in the same order, on the same kernels, from one compiled function:

    h   = rms_norm(x, attn_norm)                  cpu_rms_norm._rms_norm
    qkv = linear_q8(h, wqkv)                      cpu_linear_q8._q4_1_serial   [T, (Hq+2Hkv) Dh]
    qk  = rotary(qkv[:, :(Hq+Hkv) Dh])            cpu_rotary._rotary           [T, Hq+Hkv, Dh]
    K/V cache rows at slot_mapping <- qk[:, Hq:], qkv[:, (Hq+Hkv) Dh:]        (copies)
    a   = attention(qk[:, :Hq], K, V)             cpu_attention._attention_serial
    x   = fl32(x + linear_q8(a, wo))
    h   = rms_norm(x, ffn_norm)
    gu  = linear_q8(h, w_gate_up)                                               [T, 2F]
    x   = fl32(x + linear_q8(silu_mul(gu[:, :F], gu[:, F:]), w_down))          cpu_silu_mul._silu_mul

Every value is computed by the very kernel function the generic path launches, on the same
operands (the residual add is one IEEE fp32 add per element either way), so a layer's output is
bit-identical to the generic forward's: `tests/test_kernels_q8.py` compares the two on SmolLM2's
decode and verify steps. Batch invariance is therefore inherited, not re-argued: each kernel's
docstring states its order.

Scope: the four matrices of the layer Q4_1 (SmolLM2's GGUF), fp32 norms, fp32 KV cache; the
backend (`cpu_backend.InvariantBackend.llama_layers`) takes the generic path for anything else,
and, on a parallel backend, for an attention launch it would split over threads
(`PARALLEL_MIN_WORK`: prefill).

Threads: with `split_min_work` below NO_SPLIT, each of the four linears of at least that many
multiply-adds (M N K) runs as `cpu_linear_q8._q4_1_parallel` (one parallel region a linear: x
quantised on the calling thread, then the weight's 32-column panels spread over numba's threads);
everything else stays on the calling thread. A panel's columns are
computed by the same `_panel_q4_1` code whichever thread runs it, in the order the docstring of
`cpu_linear_q8` states, so the layer's bits do not depend on `split` or on the thread count
(`tests/test_kernels_q8.py` compares 1 and 2 threads bit for bit). Issue 30: at M = 1..4 this is
what lets a 2-thread decode use its second thread on the layers, not only on the head.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from . import cpu_attention, cpu_common, cpu_intdot, cpu_linear_q8, cpu_rms_norm, cpu_rotary, cpu_silu_mul
from .cpu_attention import _attention_serial
from .cpu_common import JIT, drop_stale_cache
from .cpu_intdot import PANEL_N
from .cpu_linear_q8 import _q4_1_parallel, _q4_1_serial
from .cpu_rms_norm import _rms_norm
from .cpu_rotary import _rotary
from .cpu_silu_mul import _silu_mul

# the layer compiles in every kernel above: numba's cache of this file must not outlive an edit of one
drop_stale_cache(__file__, cpu_attention.__file__, cpu_common.__file__, cpu_intdot.__file__,
                 cpu_linear_q8.__file__, cpu_rms_norm.__file__, cpu_rotary.__file__, cpu_silu_mul.__file__)


@njit(**JIT)
def _linear(x, nib, d, mn):
    """cpu_linear_q8.linear on a Q4_1 panel set: [M, K] -> [M, P * PANEL_N] (columns past N are zero)."""
    out = np.empty((x.shape[0], nib.shape[0] * PANEL_N), np.float32)
    _q4_1_serial(x, nib, d, mn, out)
    return out


@njit(**JIT)
def _linear_split(x, nib, d, mn):
    """`_linear` with the panels spread over numba's threads (`_q4_1_parallel`: the same bits)."""
    out = np.empty((x.shape[0], nib.shape[0] * PANEL_N), np.float32)
    _q4_1_parallel(x, nib, d, mn, out)
    return out


NO_SPLIT = 1 << 62
"""`split_min_work` that keeps every linear of the layer on the calling thread."""


@njit(**JIT)
def _lin(x, nib, d, mn, split_min_work):
    """`_linear`, or `_linear_split` when its multiply-adds M N K reach split_min_work."""
    if x.shape[0] * nib.shape[0] * PANEL_N * x.shape[1] >= split_min_work:
        return _linear_split(x, nib, d, mn)
    return _linear(x, nib, d, mn)


@njit(**JIT)
def layer_q4_1(x, attn_norm, ffn_norm, eps,
               qkv_nib, qkv_d, qkv_m, o_nib, o_d, o_m, gu_nib, gu_d, gu_m, dn_nib, dn_d, dn_m,
               k_cache, v_cache, slots, positions, freq, block_tables, first_tok, n_tok, ctx_len, scale,
               n_heads, n_kv_heads, ffn_dim, split_min_work=NO_SPLIT):
    """x [T, D] float32 -> the layer's output [T, D] (a new array; x is not written). k_cache,
    v_cache [num_blocks, block_size, Hkv, Dh] float32 get the step's rows at `slots` (int64 [T]);
    positions int64 [T]; freq float64 [Dh/2] (`cpu_rotary.inv_freq`); block_tables int64 [B, *];
    first_tok, n_tok, ctx_len int64 [B]; eps, scale float32; split_min_work: a linear of at least
    that many multiply-adds spreads its panels over numba's threads (the same bits, module
    docstring; NO_SPLIT: none does)."""
    n_tok_total, dim = x.shape
    block_size, head_dim = k_cache.shape[1], k_cache.shape[3]
    n_qk = n_heads + n_kv_heads
    h = np.empty_like(x)
    _rms_norm(x, attn_norm, eps, h)
    qkv = _lin(h, qkv_nib, qkv_d, qkv_m, split_min_work)                                # [T, >= (Hq+2Hkv) Dh]
    qk_in = np.empty((n_tok_total, n_qk, head_dim), np.float32)
    for t in range(n_tok_total):
        for i in range(n_qk):
            for e in range(head_dim):
                qk_in[t, i, e] = qkv[t, i * head_dim + e]
    qk = np.empty_like(qk_in)
    _rotary(qk_in, positions, freq, qk)                                    # [T, Hq+Hkv, Dh]
    q = np.empty((n_tok_total, n_heads, head_dim), np.float32)
    for t in range(n_tok_total):
        blk = slots[t] // block_size
        slot = slots[t] - blk * block_size
        for i in range(n_heads):
            for e in range(head_dim):
                q[t, i, e] = qk[t, i, e]
        for i in range(n_kv_heads):
            for e in range(head_dim):
                k_cache[blk, slot, i, e] = qk[t, n_heads + i, e]
                v_cache[blk, slot, i, e] = qkv[t, (n_qk + i) * head_dim + e]
    a = np.empty_like(q)
    _attention_serial(q, k_cache, v_cache, block_tables, first_tok, n_tok, ctx_len, scale, a)
    o = _lin(a.reshape((n_tok_total, n_heads * head_dim)), o_nib, o_d, o_m, split_min_work)
    x1 = np.empty_like(x)
    for t in range(n_tok_total):
        for c in range(dim):
            x1[t, c] = x[t, c] + o[t, c]
    _rms_norm(x1, ffn_norm, eps, h)
    gu = _lin(h, gu_nib, gu_d, gu_m, split_min_work)                                    # [T, >= 2F]
    act = np.empty((n_tok_total, ffn_dim), np.float32)
    _silu_mul(gu[:, :ffn_dim], gu[:, ffn_dim:2 * ffn_dim], act)
    dn = _lin(act, dn_nib, dn_d, dn_m, split_min_work)
    for t in range(n_tok_total):
        for c in range(dim):
            x1[t, c] = x1[t, c] + dn[t, c]
    return x1
