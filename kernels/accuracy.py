"""Float64 references and the stated error bound of every model op, per dtype.

Each function takes the op's (rounded) inputs and returns (ref, bound): the float64 result of the
same inputs and the largest |y - ref| the op may show elementwise. u = unit roundoff of the
output dtype, u32 = 2^-24 (the fp32 accumulation), tiny = half a subnormal step of the dtype:

    linear     gamma_K |x| |w|^T + u |ref| + tiny          gamma_K = K u32 / (1 - K u32)
    linear_q8  (Q4_1 or Q8_0 w; ref = the float64 product of the UNquantised x and the dequantized w)
               sum_k h dx_b(k) |w_k|                          x rounded to 8-bit blocks, h = 0.5 + 2^-12
             + u32 sum_k |w_k| xh_k + gamma_(nb+3) sum_k (|d q_k| + |m|) xh_k + tiny
                                                             xh_k = |x_k| + h dx_b(k), nb = K / 32
               (Q8_0: m = 0; an fp32 weight: linear's bound)
    rms_norm   ((D + 8) u32 + 2u) |ref| + tiny
    softmax    (8 + |x - max|) u32 ref          log_softmax  8 u32 (|x - max| + |log sum|)
    silu_mul   (8 u32 + u) |ref| + tiny
    rotary     (8 u32 + u) (|x0| + |x1|) + tiny            over each rotated pair
    attention  1e-5 absolute (fp32 inputs)

The tests of every backend check their ops against these (tests/test_kernels_*.py), and so does
`specverify.kerneltools.accuracy_check` for every op of the registry (`registry.py`).
"""

from __future__ import annotations

import numpy as np
import torch

U32 = 2.0 ** -24
UNIT = {torch.float32: 2.0 ** -24, torch.bfloat16: 2.0 ** -8, torch.float16: 2.0 ** -11}
TINY = {torch.float32: 2.0 ** -149, torch.bfloat16: 2.0 ** -133, torch.float16: 2.0 ** -25}
ATTENTION_ATOL = 1e-5


def f64(t) -> np.ndarray:
    from .quant import QuantizedWeight
    if isinstance(t, QuantizedWeight):
        return t.dequantize().astype(np.float64)
    return t.detach().double().cpu().numpy()


def linear(x, w):
    xd, wd = f64(x), f64(w)
    ref = xd @ wd.T
    k = xd.shape[1]
    gamma = k * U32 / (1 - k * U32)
    return ref, gamma * (np.abs(xd) @ np.abs(wd).T) + UNIT[x.dtype] * np.abs(ref) + TINY[x.dtype]


QUANT_HALF = 0.5 + 2.0 ** -12
"""Largest |x - dx q| / dx of an activation rounded to 8 bits (half a step, plus the rounding of
x * (127 / amax), of + 0.5 and of dx, all below 2^-12 of a step)."""


def linear_q8(x, w):
    """Float64 x @ w.T of the unquantised x and the bound of `linear_q8` (module docstring): the
    error of rounding x to 8-bit blocks, then the fp32 rounding of the per-block combination
    (d dx) isum + m sx and of the sum over blocks."""
    from .quant import BLOCK, QMAX, QuantizedWeight
    if not isinstance(w, QuantizedWeight):
        return linear(x, w)
    xd, wd = f64(x), f64(w)
    ref = xd @ wd.T
    m, k = xd.shape
    nb = k // BLOCK
    dx = np.repeat(np.abs(xd).reshape(m, nb, BLOCK).max(-1) / QMAX, BLOCK, axis=1)       # [M, K]
    xh = np.abs(xd) + QUANT_HALF * dx
    a = np.abs(w.q().astype(np.float64).reshape(w.n, nb, BLOCK) * w.d[:, :, None])       # |d q|
    if w.m is not None:
        a = a + np.abs(w.m)[:, :, None]                                                  # + |m| (Q4_1)
    a = a.reshape(w.n, k)
    gamma = (nb + 3) * U32 / (1 - (nb + 3) * U32)
    bound = QUANT_HALF * (dx @ np.abs(wd).T) + U32 * (xh @ np.abs(wd).T) + gamma * (xh @ a.T) + TINY[x.dtype]
    return ref, bound


def rms_norm(x, w, eps: float):
    xd, wd = f64(x), f64(w)
    ref = xd / np.sqrt((xd ** 2).mean(-1, keepdims=True) + eps) * wd
    d = xd.shape[-1]
    return ref, ((d + 8) * U32 + 2 * UNIT[x.dtype]) * np.abs(ref) + TINY[x.dtype]


def softmax(x):
    """((ref softmax, bound), (ref log_softmax, bound))."""
    xd = f64(x)
    z = xd - xd.max(-1, keepdims=True)
    log_s = np.log(np.exp(z).sum(-1, keepdims=True))
    ref_sm, ref_lsm = np.exp(z - log_s), z - log_s
    return (ref_sm, (8 + np.abs(z)) * U32 * ref_sm), (ref_lsm, 8 * U32 * (np.abs(z) + np.abs(log_s)))


def silu_mul(gate, up):
    gd, ud = f64(gate), f64(up)
    ref = gd / (1 + np.exp(-gd)) * ud
    return ref, (8 * U32 + UNIT[gate.dtype]) * np.abs(ref) + TINY[gate.dtype]


def rotary(x, positions, theta: float):
    xd = f64(x)
    dh = xd.shape[-1]
    ang = positions.double().cpu().numpy()[:, None] * theta ** (-np.arange(0, dh, 2) / dh)[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    ref = np.empty_like(xd)
    ref[..., 0::2] = xd[..., 0::2] * c - xd[..., 1::2] * s
    ref[..., 1::2] = xd[..., 0::2] * s + xd[..., 1::2] * c
    mag = np.repeat(np.abs(xd[..., 0::2]) + np.abs(xd[..., 1::2]), 2, axis=-1)
    return ref, (8 * U32 + UNIT[x.dtype]) * mag + TINY[x.dtype]


def attention(q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale: float):
    """Float64 paged causal attention (layout: `backend`); the bound is ATTENTION_ATOL."""
    qd, kd, vd = f64(q), f64(k_cache), f64(v_cache)
    bs, hkv, hq = kd.shape[1], kd.shape[2], qd.shape[1]
    ref = np.empty_like(qd)
    for b in range(len(context_lens)):
        q0, q1, n_ctx = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1]), int(context_lens[b])
        for row in range(q0, q1):
            pos = n_ctx - (q1 - q0) + (row - q0)
            kv_pos = np.arange(pos + 1)
            blk = block_tables[b].cpu().numpy()[kv_pos // bs]
            for h in range(hq):
                k = kd[blk, kv_pos % bs, h // (hq // hkv)]
                v = vd[blk, kv_pos % bs, h // (hq // hkv)]
                sc = k @ qd[row, h] * scale
                p = np.exp(sc - sc.max())
                ref[row, h] = p @ v / p.sum()
    return ref, ATTENTION_ATOL
