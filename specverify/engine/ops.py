"""Resolve an op backend for the model: one shared instance per name, its paged attention
self-checked once against a float64 evaluation of the documented layout.

One instance per name matters: the invariant backend packs each weight once per instance.
The self-check guards the bitwise audit: a backend whose attention disagrees with the documented
layout (as the "default" one did before 38edccb, whose scores were transposed) is refused with a
one-line error, so a wrong kernel cannot make a bitwise audit pass vacuously.
"""

from __future__ import annotations

import torch

from specverify.errors import InputError
from specverify.kernels import accuracy
from specverify.kernels.backend import get_backend

_CHECKED: dict = {}
_INSTANCES: dict = {}


def _self_check(be) -> bool:
    """Whether `be.attention` agrees with the float64 reference on a mixed decode/verify/prefill launch."""
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
    want = torch.from_numpy(accuracy.attention(q, *args)[0])          # float64
    return bool(torch.allclose(got.double(), want, atol=1e-4, rtol=1e-4))


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
    raise InputError(f"op backend {getattr(be, 'name', be)!r}: paged attention disagrees with the documented layout")
