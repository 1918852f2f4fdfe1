"""Batch-invariant CPU paged attention (numba) for decode, verify and prefill queries in one launch.

Layout: `backend.py` (q [T, Hq, Dh]; k_cache, v_cache [num_blocks, block_size, Hkv, Dh]; request b
owns queries cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1; its query j sits at absolute position
pos = context_lens[b] - n_b + j and attends to KV positions 0 .. pos; query head h reads KV head
h // (Hq // Hkv)).

Order. The output of a (query, head) is a fixed sequence of rounded fp32 operations on its own q
row and its request's K/V at positions 0 .. pos -- never on another query, another request, or a
position past pos -- so a query has the same output in a decode step (n_b = 1) and at any position
of a verify or prefill step. With t = 0 .. pos in order:

    score_t = fl32(dot_t * fl32(scale)),  dot_t = 0; for d in 0 .. Dh-1: dot_t = fl32(dot_t + fl32(q[d] * k_t[d]))
    mx  = max_t score_t                                     (exact)
    e_t = expf(fl32(score_t - mx));   z = 0; for t: z = fl32(z + e_t)
    acc_d = 0; for t: acc_d = fl32(acc_d + fl32(e_t * v_t[d]));   out_d = fl32(acc_d / z)

How (speed only, not the arithmetic): a work item is (request, KV head); it copies K in chunks of
POS_CHUNK positions into a transposed [Dh, POS_CHUNK] buffer, once for all the item's rows (its
queries x the query heads of that KV head), and computes a row's POS_CHUNK scores with the
accumulators in vector registers, vectorised across positions (each position's dot product still
runs over d in order). Positions past a row's own `pos` are computed in its last chunk but never
read. With head dim PV_DIM (64), the P.V sums of up to PV_ROWS heads of one query (one n_kv) run
together in `_pv_rows`: accumulators in registers, each V row read once for all of them; each
acc_d is still its own sum over t in order (the same bits as the plain loop; 1.3x faster a decode
step and 1.6x a 4-row verify step at SmolLM2's shape, context 150). With `parallel=True` the work items are spread over numba's threads (prange): that changes
who computes an item, never how.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .cpu_common import JIT, carray, stack_f32

POS_CHUNK = 64
MAX_HEAD_DIM = 256
PV_DIM = 64
"""Head dim of the register-resident P.V loop (`_pv_rows`; SmolLM2's); other head dims take the plain loop."""
PV_ROWS = 4
"""Query heads of one query whose P.V accumulators `_pv_rows` holds at once (4 x 64 floats = 16 AVX-512 registers)."""
_PV_ACC = PV_ROWS * PV_DIM


@njit(inline="always", **JIT)
def _score_row(q, ti, h, k_t, scale, scores, r, c0):
    """scores[r, c0:c0+POS_CHUNK] = fl32(dot(q[ti, h], k_t[:, j]) * scale), d in order."""
    acc = carray(stack_f32(POS_CHUNK), (POS_CHUNK,))
    for j in range(POS_CHUNK):
        acc[j] = 0.0
    for d in range(q.shape[2]):
        qd = q[ti, h, d]
        for j in range(POS_CHUNK):
            acc[j] += qd * k_t[d, j]
    for j in range(POS_CHUNK):
        scores[r, c0 + j] = acc[j] * scale


@njit(inline="always", **JIT)
def _pv_rows(scores, zs, r0, rows, v_cache, block_tables, b, kvh, n_kv, out, ti, h0):
    """out[ti, h0 + i] = fl32(acc / zs[r0 + i]) for rows r0 + i (i < rows, a constant <= PV_ROWS: the
    heads of one query, so one n_kv), acc_d = sum over t in order of fl32(e_t * v_t[d]) -- the
    module's sequence, with the rows' accumulators in registers and each V row read once for them."""
    acc = carray(stack_f32(_PV_ACC), (PV_ROWS, PV_DIM))
    for i in range(rows):
        for d in range(PV_DIM):
            acc[i, d] = 0.0
    block_size = v_cache.shape[1]
    for t in range(n_kv):
        blk = block_tables[b, t // block_size]
        slot = t % block_size
        for i in range(rows):
            e = scores[r0 + i, t]
            for d in range(PV_DIM):
                acc[i, d] += e * v_cache[blk, slot, kvh, d]
    for i in range(rows):
        z = zs[r0 + i]
        for d in range(PV_DIM):
            out[ti, h0 + i, d] = acc[i, d] / z


@njit(inline="always", **JIT)
def _item(q, k_cache, v_cache, block_tables, first_tok, n_tok, ctx_len, scale, out, item):
    """All rows (queries x query heads) of one (request, KV head) work item."""
    n_q_heads, head_dim = q.shape[1], q.shape[2]
    block_size, n_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = n_q_heads // n_kv_heads
    b = item // n_kv_heads
    kvh = item - b * n_kv_heads
    n_b = n_tok[b]
    if n_b == 0:
        return
    ctx = ctx_len[b]
    first_pos = ctx - n_b
    n_rows = n_b * group
    n_chunks = (ctx + POS_CHUNK - 1) // POS_CHUNK
    scores = np.empty((n_rows, n_chunks * POS_CHUNK), np.float32)
    k_t = np.empty((head_dim, POS_CHUNK), np.float32)
    for c in range(n_chunks):
        c0 = c * POS_CHUNK
        for j in range(POS_CHUNK):                       # K chunk, transposed (zeros past ctx)
            t = c0 + j
            if t < ctx:
                blk = block_tables[b, t // block_size]
                slot = t % block_size
                for d in range(head_dim):
                    k_t[d, j] = k_cache[blk, slot, kvh, d]
            else:
                for d in range(head_dim):
                    k_t[d, j] = 0.0
        for r in range(n_rows):
            qi = r // group
            if c0 <= first_pos + qi:                     # the row attends to this chunk
                _score_row(q, first_tok[b] + qi, kvh * group + r - qi * group, k_t, scale, scores, r, c0)
    zs = np.empty(n_rows, np.float32)
    for r in range(n_rows):
        n_kv = first_pos + r // group + 1
        mx = scores[r, 0]
        for t in range(1, n_kv):
            if scores[r, t] > mx:
                mx = scores[r, t]
        z = np.float32(0.0)
        for t in range(n_kv):
            e = math.exp(scores[r, t] - mx)
            scores[r, t] = e
            z += e
        zs[r] = z
    if head_dim == PV_DIM:                               # accumulators in registers, each V row read once
        for qi in range(n_b):                            #   for up to PV_ROWS heads of one query
            r0 = qi * group
            ti = first_tok[b] + qi
            n_kv = first_pos + qi + 1
            rest = group
            while rest >= PV_ROWS:
                _pv_rows(scores, zs, r0, PV_ROWS, v_cache, block_tables, b, kvh, n_kv, out, ti, kvh * group + r0 - qi * group)
                r0 += PV_ROWS
                rest -= PV_ROWS
            if rest == 3:
                _pv_rows(scores, zs, r0, 3, v_cache, block_tables, b, kvh, n_kv, out, ti, kvh * group + r0 - qi * group)
            elif rest == 2:
                _pv_rows(scores, zs, r0, 2, v_cache, block_tables, b, kvh, n_kv, out, ti, kvh * group + r0 - qi * group)
            elif rest == 1:
                _pv_rows(scores, zs, r0, 1, v_cache, block_tables, b, kvh, n_kv, out, ti, kvh * group + r0 - qi * group)
        return
    acc = carray(stack_f32(MAX_HEAD_DIM), (MAX_HEAD_DIM,))
    for r in range(n_rows):
        qi = r // group
        ti = first_tok[b] + qi
        h = kvh * group + r - qi * group
        n_kv = first_pos + qi + 1
        z = zs[r]
        for d in range(head_dim):
            acc[d] = 0.0
        for t in range(n_kv):
            blk = block_tables[b, t // block_size]
            slot = t % block_size
            e = scores[r, t]
            for d in range(head_dim):
                acc[d] += e * v_cache[blk, slot, kvh, d]
        for d in range(head_dim):
            out[ti, h, d] = acc[d] / z


@njit(**JIT)
def _attention_serial(q, k_cache, v_cache, block_tables, first_tok, n_tok, ctx_len, scale, out):
    for item in range(n_tok.shape[0] * k_cache.shape[2]):
        _item(q, k_cache, v_cache, block_tables, first_tok, n_tok, ctx_len, scale, out, item)


@njit(parallel=True, **JIT)
def _attention_parallel(q, k_cache, v_cache, block_tables, first_tok, n_tok, ctx_len, scale, out):
    for item in prange(n_tok.shape[0] * k_cache.shape[2]):
        _item(q, k_cache, v_cache, block_tables, first_tok, n_tok, ctx_len, scale, out, item)


def attention(q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale: float,
              parallel: bool = False) -> np.ndarray:
    """Launcher: float32 q [T, Hq, Dh] and caches (C-contiguous), int block_tables [B, max_blocks],
    context_lens [B], cu_seqlens_q [B+1] -> out [T, Hq, Dh] float32."""
    if q.shape[2] > MAX_HEAD_DIM:
        raise ValueError(f"attention: head dim {q.shape[2]} > {MAX_HEAD_DIM}")
    cu = np.asarray(cu_seqlens_q, np.int64)
    ctx = np.asarray(context_lens, np.int64)
    n_tok = np.diff(cu)
    if (n_tok < 0).any() or (n_tok > ctx).any():
        raise ValueError("attention: cu_seqlens_q / context_lens describe a query outside its context")
    out = np.empty_like(q)
    if q.shape[0]:
        kernel = _attention_parallel if parallel else _attention_serial
        kernel(q, k_cache, v_cache, np.asarray(block_tables, np.int64), cu[:-1].copy(), n_tok, ctx,
               np.float32(scale), out)
    return out
