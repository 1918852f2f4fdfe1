"""Llama (SmolLM2 family) over the op backend: RMSNorm, RoPE, GQA, SwiGLU, tied embeddings.

Every reduction and transcendental goes through the backend (`specverify.kernels.backend`):
linear, rms_norm, rotary, silu_mul and paged attention. What is left in plain torch is a residual
add or a gather (embedding lookup, slicing, the KV write), so a batch-invariant backend makes the
whole forward batch-invariant: the logits of a position do not depend on what else is in the launch.

Weights (`[out, in]` like nn.Linear; each matrix an fp32 tensor or, loaded with the default
`weights="quantized"`, a `kernels.quant.QuantizedWeight` in its GGUF blocks, which every backend's
linear accepts and the embedding lookup dequantizes row by row):

    tok_embeddings  [V, D]                          also the output head (tied embeddings)
    layer i:  attn_norm [D]
              wqkv      [(Hq + 2 Hkv) * Dh, D]       q, k, v projections stacked (one linear)
              wo        [D, Hq * Dh]
              ffn_norm  [D]
              w_gate_up [2 F, D]                     gate then up, stacked
              w_down    [D, F]
    norm            [D]

q and k use the GGUF/llama.cpp rotary layout (adjacent pairs), which is what the GGUF file stores
(the HF -> GGUF converter permutes the q/k rows) and what `backend.rotary` rotates.

The model protocol the engine relies on (a toy-model adapter implements the same):

    vocab_size: int
    make_cache(num_blocks, block_size) -> PagedKVCache
    forward(batch: StepBatch, cache) -> logits float32 [R, V] for batch.logits_indices
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specverify.kernels.quant import QuantizedWeight, concat_rows, embedding_rows

from .ops import resolve_backend

from .kv_cache import PagedKVCache
from .layout import StepBatch


@dataclass(frozen=True)
class LlamaConfig:
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    ffn_dim: int
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5
    max_seq_len: int = 8192

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    wqkv: torch.Tensor
    wo: torch.Tensor
    ffn_norm: torch.Tensor
    w_gate_up: torch.Tensor
    w_down: torch.Tensor


class Llama:
    """A Llama model bound to an op backend. `draft_view(n)` is the same model cut after n layers
    (the self-speculative draft: first n layers + final norm + head, sharing every weight)."""

    def __init__(self, config: LlamaConfig, tok_embeddings, layers, norm, backend="default",
                 n_layers: int | None = None, name: str = "llama", head=None):
        self.config = config
        self.tok_embeddings = tok_embeddings                    # [V, D] rows, for the lookup
        self.head = tok_embeddings if head is None else head     # [V, D] (tied; maybe a view of [D, V])
        self.layers = layers
        self.norm = norm
        self.backend = resolve_backend(backend)
        self.n_layers = config.n_layers if n_layers is None else n_layers
        self.name = name

    @property
    def vocab_size(self) -> int:
        return self.config.vocab_size

    def with_backend(self, backend) -> "Llama":
        return Llama(self.config, self.tok_embeddings, self.layers, self.norm, backend, self.n_layers, self.name, self.head)

    def draft_view(self, n_layers: int | None = None, *, skip: int | None = None) -> "Llama":
        """Self-speculative draft sharing every weight: the first `n_layers` layers (early exit), or
        with `skip=s` every s-th layer dropped from the middle (first and last 4 layers kept,
        LayerSkip/SWIFT-style), then the final norm and the head."""
        from specverify.errors import InputError
        L = self.config.n_layers
        if skip is not None:
            if skip < 2:
                raise InputError(f"draft skip {skip} must be >= 2")
            ids = [i for i in range(L) if i < 4 or i >= L - 4 or (i - 4) % skip != skip - 1]
            layers, name = [self.layers[i] for i in ids], f"{self.name}[skip every {skip}: {len(ids)} layers]"
        else:
            if n_layers is None or not 1 <= n_layers <= L:
                raise InputError(f"draft layers {n_layers} outside [1, {L}]")
            layers, name = self.layers[:n_layers], f"{self.name}[:{n_layers}]"
        return Llama(self.config, self.tok_embeddings, layers, self.norm, self.backend, len(layers), name, self.head)

    def make_cache(self, num_blocks: int, block_size: int = 16, prefix_caching: bool = True) -> PagedKVCache:
        c = self.config
        return PagedKVCache(self.n_layers, c.n_kv_heads, c.head_dim, num_blocks, block_size,
                            prefix_caching=prefix_caching)

    @torch.inference_mode()
    def forward(self, batch: StepBatch, cache: PagedKVCache) -> torch.Tensor:
        c, be = self.config, self.backend
        T, Hq, Hkv, Dh = batch.num_tokens, c.n_heads, c.n_kv_heads, c.head_dim
        scale = Dh ** -0.5
        x = embedding_rows(self.tok_embeddings, batch.token_ids)                  # [T, D]
        fused = getattr(be, "llama_layers", None)                                # one call a layer, same bits
        y = fused(x, self.layers[:self.n_layers], cache, batch, c) if fused is not None else None
        for i in range(self.n_layers if y is None else 0):
            w = self.layers[i]
            h = be.rms_norm(x, w.attn_norm, c.norm_eps)                           # [T, D]
            qkv = be.linear(h, w.wqkv)                                            # [T, (Hq+2Hkv)*Dh]
            qk = be.rotary(qkv[:, :(Hq + Hkv) * Dh].reshape(T, Hq + Hkv, Dh),
                           batch.positions, c.rope_theta)                         # [T, Hq+Hkv, Dh]
            q = qk[:, :Hq].contiguous()                                           # [T, Hq, Dh]
            k = qk[:, Hq:]                                                        # [T, Hkv, Dh]
            v = qkv[:, (Hq + Hkv) * Dh:].reshape(T, Hkv, Dh)                      # [T, Hkv, Dh]
            cache.k[i].view(-1, Hkv, Dh).index_copy_(0, batch.slot_mapping, k)
            cache.v[i].view(-1, Hkv, Dh).index_copy_(0, batch.slot_mapping, v)
            a = be.attention(q, cache.k[i], cache.v[i], batch.block_tables, batch.context_lens,
                             batch.cu_seqlens_q, scale)                           # [T, Hq, Dh]
            x = x + be.linear(a.reshape(T, Hq * Dh), w.wo)                        # [T, D]
            h = be.rms_norm(x, w.ffn_norm, c.norm_eps)
            gate_up = be.linear(h, w.w_gate_up)                                   # [T, 2F]
            gate, up = gate_up[:, :c.ffn_dim], gate_up[:, c.ffn_dim:]
            x = x + be.linear(be.silu_mul(gate, up), w.w_down)                    # [T, D]
        x = (x if y is None else y)[batch.logits_indices]                        # [R, D]
        return be.linear(be.rms_norm(x, self.norm, c.norm_eps), self.head)        # [R, V]


def build_llama(config: LlamaConfig, tensors: dict, backend="default", name="llama") -> Llama:
    """Assemble a Llama from per-projection tensors named like GGUF's (`blk.{i}.attn_q.weight`,
    ...; q and k rows already in the adjacent-pair rotary layout): fp32 tensors, or QuantizedWeight
    for the matrices (kept in their blocks; the q/k/v and gate/up projections stacked block-wise).
    The head is `output.weight` where given (untied), else the embedding."""
    def t(n):
        w = tensors[n]
        return w if isinstance(w, QuantizedWeight) else w.contiguous()

    def cat(ws):
        return concat_rows(ws) if isinstance(ws[0], QuantizedWeight) else torch.cat(ws)

    def lin(w):
        # [out, in] view over [in, out] storage: backend.linear computes x @ weight.T, and with
        # weight.T contiguous torch streams the matrix row-major (~25% faster at M = 1 here)
        return w if isinstance(w, QuantizedWeight) else w.T.contiguous().T
    layers = []
    for i in range(config.n_layers):
        p = f"blk.{i}."
        layers.append(LayerWeights(
            attn_norm=t(p + "attn_norm.weight"),
            wqkv=lin(cat([t(p + "attn_q.weight"), t(p + "attn_k.weight"), t(p + "attn_v.weight")])),
            wo=lin(t(p + "attn_output.weight")),
            ffn_norm=t(p + "ffn_norm.weight"),
            w_gate_up=lin(cat([t(p + "ffn_gate.weight"), t(p + "ffn_up.weight")])),
            w_down=lin(t(p + "ffn_down.weight")),
        ))
    embed = t("token_embd.weight")
    head = t("output.weight") if "output.weight" in tensors else embed      # untied, or tied to the embedding
    return Llama(config, embed, layers, t("output_norm.weight"), backend, name=name, head=lin(head))


def random_llama(seed: int = 0, *, vocab_size: int = 96, dim: int = 64, n_layers: int = 3, n_heads: int = 4,
                 n_kv_heads: int = 2, ffn_dim: int = 128, rope_theta: float = 10000.0,
                 backend="default") -> Llama:
    """A tiny seeded random Llama for fast tests (same code path as the real model)."""
    config = LlamaConfig(vocab_size, dim, n_layers, n_heads, n_kv_heads, ffn_dim, rope_theta, 1e-5, 4096)
    g = torch.Generator().manual_seed(seed)
    dh = config.head_dim

    def rnd(*shape, s=None):
        return torch.randn(*shape, generator=g) * (s if s is not None else shape[-1] ** -0.5)

    tensors = {"token_embd.weight": rnd(vocab_size, dim, s=1.0),
               "output_norm.weight": 1.0 + 0.1 * rnd(dim, s=1.0)}
    for i in range(n_layers):
        p = f"blk.{i}."
        tensors.update({
            p + "attn_norm.weight": 1.0 + 0.1 * rnd(dim, s=1.0),
            p + "attn_q.weight": rnd(n_heads * dh, dim),
            p + "attn_k.weight": rnd(n_kv_heads * dh, dim),
            p + "attn_v.weight": rnd(n_kv_heads * dh, dim),
            p + "attn_output.weight": 6.0 * rnd(dim, n_heads * dh),   # strong layers: less self-copying
            p + "ffn_norm.weight": 1.0 + 0.1 * rnd(dim, s=1.0),
            p + "ffn_gate.weight": rnd(ffn_dim, dim),
            p + "ffn_up.weight": rnd(ffn_dim, dim),
            p + "ffn_down.weight": 6.0 * rnd(dim, ffn_dim),
        })
    return build_llama(config, tensors, backend, name=f"random-llama(seed={seed})")
