"""Resolve an op backend for the model: one shared instance per name, its paged attention
self-checked once against a float64 evaluation of the documented layout.

One instance per name matters: the invariant backend packs each weight once per instance.
The self-check exists because the "default" attention once transposed its score matrix (fixed in
38edccb): a backend that fails it is refused with a one-line error (a wrong kernel must not make a
bitwise audit pass vacuously), except "default", whose attention is then replaced by
`paged_attention` below (plain torch, per request, the same contract).
"""

from __future__ import annotations

import math

import torch

from specverify.errors import InputError
from specverify.kernels import accuracy
from specverify.kernels.backend import get_backend

_CHECKED: dict = {}
_INSTANCES: dict = {}


def paged_attention(q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale):
    """The backend attention contract in plain torch (fp32, per request; not batch-invariant)."""
    out = torch.empty_like(q)                                      # [T, Hq, Dh]
    block_size, n_kv = k_cache.shape[1], k_cache.shape[2]
    group = q.shape[1] // n_kv
    cu = cu_seqlens_q.tolist()
    ctx = context_lens.tolist()
    for b in range(len(ctx)):
        q0, q1 = cu[b], cu[b + 1]
        if q1 == q0:
            continue
        n, n_ctx = q1 - q0, ctx[b]
        blocks = block_tables[b, :math.ceil(n_ctx / block_size)].long()
        k = k_cache[blocks].reshape(-1, n_kv, k_cache.shape[3])[:n_ctx]   # [n_ctx, Hkv, Dh]
        v = v_cache[blocks].reshape(-1, n_kv, v_cache.shape[3])[:n_ctx]
        qb = q[q0:q1].reshape(n, n_kv, group, -1)                          # [n, Hkv, G, Dh]
        scores = torch.einsum("nkgd,tkd->kgnt", qb, k) * scale             # [Hkv, G, n, n_ctx]
        if n > 1:
            qpos = torch.arange(n_ctx - n, n_ctx)
            mask = torch.arange(n_ctx)[None, :] > qpos[:, None]            # [n, n_ctx]
            scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out[q0:q1] = torch.einsum("kgnt,tkd->nkgd", probs, v).reshape(n, -1, q.shape[2])
    return out


def _self_check(be) -> bool:
    g = torch.Generator().manual_seed(1234)
    bs, hq, hkv, dh, nblk = 4, 4, 2, 8, 12
    k_cache = torch.randn(nblk, bs, hkv, dh, generator=g)
    v_cache = torch.randn(nblk, bs, hkv, dh, generator=g)
    n_q = [1, 3, 5]                                  # decode, verify, prefill
    ctx = [9, 7, 5]
    tables = torch.tensor([[3, 0, 7], [5, 1, 0], [2, 9, 0]], dtype=torch.int32)
    cu = torch.tensor([0, 1, 4, 9], dtype=torch.int32)
    q = torch.randn(sum(n_q), hq, dh, generator=g)
    args = (k_cache, v_cache, tables, torch.tensor(ctx, dtype=torch.int32), cu, dh ** -0.5)
    try:
        got = be.attention(q, *args)
    except Exception:
        return False
    want = torch.from_numpy(accuracy.attention(q, *args)[0])          # float64, independent of the fallback
    return bool(torch.allclose(got.double(), want, atol=1e-4, rtol=1e-4))


class _PatchedAttention:
    """Delegates every op to `inner`, except attention (see the module docstring)."""

    def __init__(self, inner):
        self.inner = inner

    def __getattr__(self, item):
        return getattr(self.inner, item)

    def attention(self, *args):
        return paged_attention(*args)


def resolve_backend(backend="default"):
    """The op backend object for `backend` (a name or an object), attention self-checked once."""
    if isinstance(backend, str):
        if backend not in _INSTANCES:
            _INSTANCES[backend] = get_backend(backend)
        be = _INSTANCES[backend]
    else:
        be = backend
    key = type(be)
    if key not in _CHECKED:
        _CHECKED[key] = _self_check(be)
    if _CHECKED[key]:
        return be
    if getattr(be, "name", None) == "default":
        return _PatchedAttention(be)
    raise InputError(f"op backend {getattr(be, 'name', be)!r}: paged attention disagrees with the documented layout")
