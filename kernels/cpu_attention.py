"""Batch-invariant CPU paged attention (numba) for decode, verify and prefill queries in one launch.

Layout: `backend.py` (q [T, Hq, Dh]; k_cache, v_cache [num_blocks, block_size, Hkv, Dh]; request b
owns queries cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1; its query j sits at absolute position
pos = context_lens[b] - n_b + j and attends to KV positions 0 .. pos; query head h reads KV head
h // (Hq // Hkv)).

Order. Each (query, head) is computed alone, by one thread, from its own q row, its position and
its request's KV -- never from the other queries or requests, so a query has the same output in a
decode step (n_b = 1) and at any position of a verify step. Positions past `pos` are never read (a
masked position contributes nothing at all). With LANES = 16 and t = 0 .. pos in order:

    dot(q, k_t):  lane l (0 <= l < LANES):  p_l = 0; for c in 0, 1, ..:  p_l = fl32(p_l + fl32(q[c*LANES+l] * k_t[c*LANES+l]))
                  s = p_0;  for l in 1 .. LANES-1:  s = fl32(s + p_l)            (absent lanes are 0.0)
    score_t = fl32(s * fl32(scale));   mx = max_t score_t (exact)
    e_t = expf(fl32(score_t - mx));    z = 0; for t: z = fl32(z + e_t)
    acc_d = 0; for t: acc_d = fl32(acc_d + fl32(e_t * v_t[d]));    out_d = fl32(acc_d / z)

With `parallel=True` the work items (query, head) are spread over numba's threads (prange); that
changes who computes an item, never how.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .cpu_common import JIT, carray, stack_f32

LANES = 16
MAX_HEAD_DIM = 256


@njit(inline="always", **JIT)
def _dot(q, ti, h, k_cache, blk, slot, kvh):
    head_dim = q.shape[2]
    part = carray(stack_f32(LANES), (LANES,))
    for lane in range(LANES):
        part[lane] = 0.0
    full = head_dim // LANES
    for c in range(full):
        for lane in range(LANES):
            part[lane] += q[ti, h, c * LANES + lane] * k_cache[blk, slot, kvh, c * LANES + lane]
    for lane in range(head_dim - full * LANES):
        part[lane] += q[ti, h, full * LANES + lane] * k_cache[blk, slot, kvh, full * LANES + lane]
    s = part[0]
    for lane in range(1, LANES):
        s += part[lane]
    return s


@njit(inline="always", **JIT)
def _item(q, k_cache, v_cache, block_tables, token_req, token_pos, scale, out, item):
    """Output of one (query token, head) work item."""
    n_q_heads, head_dim = q.shape[1], q.shape[2]
    block_size, n_kv_heads = k_cache.shape[1], k_cache.shape[2]
    ti = item // n_q_heads
    h = item - ti * n_q_heads
    kvh = h // (n_q_heads // n_kv_heads)
    b = token_req[ti]
    n_kv = token_pos[ti] + 1
    scores = np.empty(n_kv, np.float32)
    mx = np.float32(-np.inf)
    for t in range(n_kv):
        blk = block_tables[b, t // block_size]
        sc = _dot(q, ti, h, k_cache, blk, t % block_size, kvh) * scale
        scores[t] = sc
        if sc > mx:
            mx = sc
    z = np.float32(0.0)
    for t in range(n_kv):
        e = math.exp(scores[t] - mx)
        scores[t] = e
        z += e
    acc = carray(stack_f32(MAX_HEAD_DIM), (MAX_HEAD_DIM,))
    for d in range(head_dim):
        acc[d] = 0.0
    for t in range(n_kv):
        blk = block_tables[b, t // block_size]
        slot = t % block_size
        e = scores[t]
        for d in range(head_dim):
            acc[d] += e * v_cache[blk, slot, kvh, d]
    for d in range(head_dim):
        out[ti, h, d] = acc[d] / z


@njit(**JIT)
def _attention_serial(q, k_cache, v_cache, block_tables, token_req, token_pos, scale, out):
    for item in range(q.shape[0] * q.shape[1]):
        _item(q, k_cache, v_cache, block_tables, token_req, token_pos, scale, out, item)


@njit(parallel=True, **JIT)
def _attention_parallel(q, k_cache, v_cache, block_tables, token_req, token_pos, scale, out):
    for item in prange(q.shape[0] * q.shape[1]):
        _item(q, k_cache, v_cache, block_tables, token_req, token_pos, scale, out, item)


def token_layout(context_lens: np.ndarray, cu_seqlens_q: np.ndarray):
    """(request, absolute position) of every query token, from the ragged layout."""
    n_per_req = np.diff(cu_seqlens_q.astype(np.int64))
    if (n_per_req < 0).any() or (n_per_req > context_lens).any():
        raise ValueError("attention: cu_seqlens_q / context_lens describe a query outside its context")
    req = np.repeat(np.arange(context_lens.shape[0], dtype=np.int64), n_per_req)
    first = cu_seqlens_q[:-1].astype(np.int64)
    pos = context_lens.astype(np.int64)[req] - n_per_req[req] + (np.arange(req.shape[0]) - first[req])
    return req, pos


def attention(q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale: float,
              parallel: bool = False) -> np.ndarray:
    """Launcher: float32 q [T, Hq, Dh] and caches (C-contiguous), int block_tables [B, max_blocks],
    context_lens [B], cu_seqlens_q [B+1] -> out [T, Hq, Dh] float32."""
    if q.shape[2] > MAX_HEAD_DIM:
        raise ValueError(f"attention: head dim {q.shape[2]} > {MAX_HEAD_DIM}")
    req, pos = token_layout(np.asarray(context_lens), np.asarray(cu_seqlens_q))
    out = np.empty_like(q)
    if q.shape[0]:
        kernel = _attention_parallel if parallel else _attention_serial
        kernel(q, k_cache, v_cache, np.ascontiguousarray(block_tables, dtype=np.int64), req, pos,
                   np.float32(scale), out)
    return out
