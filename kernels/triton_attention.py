"""Batch-invariant Triton paged attention for decode, verify and prefill queries in one launch.

Layout: `backend.py` (q [T, Hq, Dh]; k_cache, v_cache [num_blocks, block_size, Hkv, Dh]; query j of
request b sits at position context_lens[b] - n_b + j and attends to KV positions 0 .. that one
through block_tables[b]; query head h reads KV head h // (Hq // Hkv)).

One program per (query token, query head): it reads only its own q row, its request's block table
and KV, and its own position -- never another query. KV is reduced in fixed chunks of BLOCK_KV
*absolute* positions (chunk c = positions c*BLOCK_KV .. c*BLOCK_KV + BLOCK_KV - 1), chunks in order,
with the online-softmax recurrence (fp32):

    m = -inf, l = 0, acc[d] = 0
    for c in 0 .. pos // BLOCK_KV:
        s_t = sum_d(q[d] * k_t[d]) * scale   for t in the chunk (tl.sum: a tree fixed by BLOCK_D)
        s_t = -inf where t > pos                 (masked: exp gives an exact 0, p_t * v_t adds 0)
        m' = max(m, max_t s_t);  alpha = exp(m - m');  p_t = exp(s_t - m')
        l = l * alpha + sum_t p_t;   acc = acc * alpha + sum_t p_t * v_t;   m = m'
    out = acc / l                                    (fp32; a bf16/fp16 q gets it cast by torch)

The chunk boundaries and the number of chunks depend only on the query's position, so the query
has the same output in a decode step (n_b = 1) and at any position of a verify or prefill step.
"""

from __future__ import annotations

import triton
import triton.language as tl

from .triton_common import CompileSpec

BLOCK_KV = 16


@triton.jit
def _attention_kernel(q_ptr, k_ptr, v_ptr, bt_ptr, req_ptr, pos_ptr, out_ptr, scale,
                      n_q_heads, group, block_size,
                      stride_qt, stride_qh, stride_kb, stride_ks, stride_kh,
                      stride_vb, stride_vs, stride_vh, stride_bt, stride_ot, stride_oh,
                      HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_KV: tl.constexpr):
    item = tl.program_id(0)
    ti = item // n_q_heads
    h = item % n_q_heads
    kvh = h // group
    b = tl.load(req_ptr + ti)
    pos = tl.load(pos_ptr + ti)
    d = tl.arange(0, BLOCK_D)
    dmask = d < HEAD_DIM
    q = tl.load(q_ptr + ti * stride_qt + h * stride_qh + d, mask=dmask, other=0.0).to(tl.float32)
    m = tl.full((), float("-inf"), tl.float32)
    l = tl.zeros((), tl.float32)
    acc = tl.zeros((BLOCK_D,), tl.float32)
    offs = tl.arange(0, BLOCK_KV)
    for c0 in range(0, pos + 1, BLOCK_KV):
        t = c0 + offs
        valid = t <= pos
        blk = tl.load(bt_ptr + b * stride_bt + t // block_size, mask=valid, other=0)
        slot = t % block_size
        kv_mask = valid[:, None] & dmask[None, :]
        k = tl.load(k_ptr + blk[:, None] * stride_kb + slot[:, None] * stride_ks + kvh * stride_kh + d[None, :],
                    mask=kv_mask, other=0.0).to(tl.float32)                        # [BLOCK_KV, BLOCK_D]
        v = tl.load(v_ptr + blk[:, None] * stride_vb + slot[:, None] * stride_vs + kvh * stride_vh + d[None, :],
                    mask=kv_mask, other=0.0).to(tl.float32)
        s = tl.sum(k * q[None, :], axis=1) * scale
        s = tl.where(valid, s, float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        l = l * alpha + tl.sum(p, axis=0)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        m = m_new
    out = tl.div_rn(acc, l)
    tl.store(out_ptr + ti * stride_ot + h * stride_oh + d, out, mask=dmask)


def token_layout(context_lens, cu_seqlens_q):
    """(request, absolute position) of every query token, as int64 tensors on the same device."""
    import torch
    n_per_req = (cu_seqlens_q[1:] - cu_seqlens_q[:-1]).to(torch.int64)
    req = torch.repeat_interleave(torch.arange(context_lens.shape[0], device=context_lens.device), n_per_req)
    first = cu_seqlens_q[:-1].to(torch.int64)[req]
    j = torch.arange(req.shape[0], device=req.device) - first
    pos = context_lens.to(torch.int64)[req] - n_per_req[req] + j
    return req, pos


def attention(q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale: float):
    """Launcher (layout above) -> out [T, Hq, Dh] in q's dtype."""
    import torch
    t, hq, dh = q.shape
    hkv = k_cache.shape[2]
    q = q if q.stride(2) == 1 else q.contiguous()
    out = torch.empty((t, hq, dh), dtype=torch.float32, device=q.device)
    if t == 0:
        return out.to(q.dtype)
    req, pos = token_layout(context_lens, cu_seqlens_q)
    bt = block_tables.contiguous()
    _attention_kernel[(t * hq,)](
        q, k_cache, v_cache, bt, req, pos, out, float(scale), hq, hq // hkv, k_cache.shape[1],
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        v_cache.stride(0), v_cache.stride(1), v_cache.stride(2), bt.stride(0), out.stride(0), out.stride(1),
        HEAD_DIM=dh, BLOCK_D=triton.next_power_of_2(dh), BLOCK_KV=BLOCK_KV)
    return out if q.dtype == torch.float32 else out.to(q.dtype)     # downcast in torch (RTNE)


COMPILE = (CompileSpec("attention", _attention_kernel,
                       {"bt_ptr": "*i32", "req_ptr": "*i64", "pos_ptr": "*i64", "scale": "fp32"},
                       dict(HEAD_DIM=64, BLOCK_D=64, BLOCK_KV=BLOCK_KV)),)
