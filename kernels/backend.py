"""The op interface the model runs on, and the plain-torch default backend.

Every op takes and returns torch tensors. Shapes (T = flattened tokens of a ragged batch):

    linear(x [M, K], weight [N, K])               -> [M, N]   x @ weight.T, fp32 accumulation; weight a
                                                              tensor or a quant.QuantizedWeight (GGUF blocks)
    linear_q8(x [M, K], weight [N, K])            -> [M, N]   the same with each row of x first rounded to
                                                              8-bit blocks of 32 when weight is Q4_1
                                                              (quant.quantize_activations), integer
                                                              block dot products; other weights: linear
    rms_norm(x [M, D], weight [D], eps)            -> [M, D]   x / sqrt(mean(x^2) + eps) * weight
    softmax(x [M, V]) / log_softmax(x [M, V])      -> [M, V]   over the last dim, float32 out
    silu_mul(gate [M, F], up [M, F])               -> [M, F]   silu(gate) * up (SwiGLU), elementwise
    rotary(x [T, H, Dh], positions int64 [T], theta)
                                                   -> [T, H, Dh]  rotation of adjacent pairs
                                                      (x[2i], x[2i+1]) by positions * theta**(-2i/Dh)
                                                      (GGUF/llama.cpp "normal" layout)
    attention(q [T, Hq, Dh], k_cache, v_cache [num_blocks, block_size, Hkv, Dh],
              block_tables int32 [B, max_blocks], context_lens int32 [B],
              cu_seqlens_q int32 [B + 1], scale)  -> [T, Hq, Dh]

Attention layout: request b owns queries cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1 (n_b of them) and
context_lens[b] KV positions (its committed tokens plus these n_b new ones, already written to the
cache). Query j of request b sits at absolute position context_lens[b] - n_b + j and attends to KV
positions 0..that position (causal within the new tokens), read through block_tables[b]: position
t lives in block block_tables[b, t // block_size], slot t % block_size. GQA: query head h reads KV
head h // (Hq // Hkv). A decode step is n_b = 1, a verify step n_b = kappa + 1, a prefill n_b = the
prompt length; one launch may mix them.

Batch invariance contract (what "invariant" and "triton" promise and "default" does not): the output
row of any op for a given input row (for attention: a given query, its position and its request's KV)
is bitwise identical whatever the other rows of the launch are and however many there are.
"""

from __future__ import annotations

import math


class DefaultBackend:
    """Plain torch ops. Fast, and NOT batch-invariant: the negative control."""

    name = "default"
    batch_invariant = False

    def linear(self, x, weight):
        from .quant import dequantized
        return x @ dequantized(weight).T       # a QuantizedWeight: its fp32 values, cached

    def linear_q8(self, x, weight):
        from .quant import linear_q8_emulated
        return linear_q8_emulated(x, weight)   # x rounded to 8-bit blocks (Q4_1 weights), torch matmul

    def rms_norm(self, x, weight, eps: float):
        import torch
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * weight

    def softmax(self, x):
        import torch
        return torch.softmax(x.float(), dim=-1)

    def log_softmax(self, x):
        import torch
        return torch.log_softmax(x.float(), dim=-1)

    def silu_mul(self, gate, up):
        import torch.nn.functional as F
        return F.silu(gate) * up

    def rotary(self, x, positions, theta: float):
        import torch
        dh = x.shape[-1]
        inv_freq = theta ** (-torch.arange(0, dh, 2, dtype=torch.float64, device=x.device) / dh)
        ang = positions.to(torch.float64)[:, None] * inv_freq[None, :]          # [T, Dh/2]
        cos = torch.cos(ang).to(x.dtype)[:, None, :]
        sin = torch.sin(ang).to(x.dtype)[:, None, :]
        x0, x1 = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x0 * cos - x1 * sin
        out[..., 1::2] = x0 * sin + x1 * cos
        return out

    def attention(self, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale: float):
        import torch
        out = torch.empty_like(q)
        block_size = k_cache.shape[1]
        group = q.shape[1] // k_cache.shape[2]
        for b in range(context_lens.shape[0]):
            q0, q1 = int(cu_seqlens_q[b]), int(cu_seqlens_q[b + 1])
            if q1 == q0:
                continue
            n_ctx = int(context_lens[b])
            n_blocks = math.ceil(n_ctx / block_size)
            blocks = block_tables[b, :n_blocks].long()
            k = k_cache[blocks].reshape(-1, *k_cache.shape[2:])[:n_ctx]      # [n_ctx, Hkv, Dh]
            v = v_cache[blocks].reshape(-1, *v_cache.shape[2:])[:n_ctx]
            k = k.repeat_interleave(group, dim=1)
            v = v.repeat_interleave(group, dim=1)
            qb = q[q0:q1]                                                    # [n, Hq, Dh]
            scores = torch.einsum("nhd,thd->hnt", qb, k) * scale             # [Hq, n, n_ctx]
            pos = torch.arange(n_ctx - (q1 - q0), n_ctx, device=q.device)
            mask = torch.arange(n_ctx, device=q.device)[None, :] > pos[:, None]   # [n, n_ctx]
            scores = scores.masked_fill(mask[None], float("-inf"))
            out[q0:q1] = torch.einsum("hnt,thd->nhd", torch.softmax(scores, dim=-1), v)
        return out


_BACKENDS = {"default": DefaultBackend}


def register_backend(name: str, factory) -> None:
    """Make `get_backend(name)` return `factory()`; used by `cpu_backend` ("invariant") and `triton_backend`."""
    _BACKENDS[name] = factory


def backend_names() -> list[str]:
    _load_builtin()
    return sorted(_BACKENDS)


def get_backend(name: str = "default"):
    """The op backend called `name`; raises InputError for an unknown one."""
    from specverify.errors import InputError
    _load_builtin()
    if name not in _BACKENDS:
        raise InputError(f"unknown op backend {name!r}; choose one of {', '.join(sorted(_BACKENDS))}")
    return _BACKENDS[name]()


def _load_builtin() -> None:
    """Import the modules that register the other backends (they are optional)."""
    import importlib
    for mod in ("cpu_backend", "triton_backend"):
        try:
            importlib.import_module(f"{__package__}.{mod}")
        except ModuleNotFoundError as exc:
            if exc.name not in (f"{__package__}.{mod}", "triton"):
                raise
