"""A tiny hybrid recurrent model in our engine: sliding-window attention (`engine.sliding`) plus, in every
layer, a per-channel linear recurrence, and the recurrent state's checkpoints and exact rollback
(docs/sliding-window.md, "Recurrent state").

The recurrence (a diagonal linear RNN, the simplest member of the SSM / linear-attention family): in layer
i, before attention,

    u_t = rms_norm(x_t) * w_in                       [D]   elementwise
    h_t = a * h_{t-1} + (1 - a) * u_t                [D]   a in (0, 1) per channel, h_{-1} = 0
    x_t = x_t + g * h_t                              [D]

Every operation is elementwise in float32 and the positions of a request go through it one at a time, in
order, in every step (prefill, decode, verify chunk), so the state after position t has the same bits
whatever the chunk or the batch: the recurrence adds no reduction whose order could differ.

The state lives in `HybridCache` (a `RingKVCache`, one ring per request, plus):

    state   float32 [n_layers, num_rings, D]              the state after the request's last computed position
    ckpt    float32 [n_layers, num_rings, MAX_CHUNK, D]   checkpoints: the state after position t in slot
                                                          t mod MAX_CHUNK (every position a step computes)
    first   int64   [num_rings]                           the first position of the ring's last step

A step reads `state`, computes its positions in order, writes each position's state to its checkpoint
slot and the last one to `state`. `rollback(seq, n)` with n < num_computed (drafts rejected: positions
n .. num_computed - 1 are forgotten) restores the checkpoint of position n - 1, the last accepted one,
and sets num_computed back. A step has at most MAX_CHUNK positions after its first kept one, so the
checkpoint is still there. The planted bugs (`zoo.state`): a rollback that does not restore the state
(it keeps the rejected drafts' updates; mlx-lm PR #1109) and one that restores the checkpoint of the
step's first position instead of the last accepted one (vLLM #39273, PR #40738).
"""

from __future__ import annotations

import numpy as np
import torch

from specverify.errors import InputError

from .kv_cache import SeqKV
from .layout import StepBatch
from .model import Llama, random_llama
from .sliding import MAX_CHUNK, RingKVCache, SlidingLlama

DECAY_RANGE = (0.5, 0.95)        # per-channel a of the toy recurrence: memory of ~2 to ~20 positions
STATE_GAIN = 1.0                 # scale of g, the recurrence's output gain


class HybridCache(RingKVCache):
    """A ring-buffer KV cache plus each request's recurrent state and its checkpoints (module docstring)."""

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, num_rings: int, ring_len: int, dim: int,
                 dtype=torch.float32):
        super().__init__(n_layers, n_kv_heads, head_dim, num_rings, ring_len, dtype)
        self.state = torch.zeros((n_layers, num_rings, dim), dtype=dtype)
        self.ckpt = torch.zeros((n_layers, num_rings, MAX_CHUNK, dim), dtype=dtype)
        self.first = np.zeros(num_rings, np.int64)

    def ensure_capacity(self, seq: SeqKV, n_positions: int) -> None:
        fresh = not seq.block_ids
        super().ensure_capacity(seq, n_positions)
        if fresh:                                   # a new request starts from h_{-1} = 0
            self.state[:, seq.block_ids[0]] = 0.0

    def restore(self, ring: int, position: int) -> None:
        """The state after `position` (a checkpoint of the ring's last step) becomes the current state."""
        self.state[:, ring] = self.ckpt[:, ring, position % MAX_CHUNK]

    def rollback(self, seq: SeqKV, num_valid: int) -> None:
        """Positions >= num_valid are forgotten: the state goes back to the checkpoint of num_valid - 1."""
        if num_valid < seq.num_computed:
            if num_valid < 1 or seq.num_computed - num_valid >= MAX_CHUNK:
                raise InputError(f"hybrid cache: no checkpoint of position {num_valid - 1} "
                                 f"({seq.num_computed} computed, {MAX_CHUNK} checkpoints)")
            self.restore(seq.block_ids[0], num_valid - 1)
        seq.num_computed = min(seq.num_computed, num_valid)


class HybridLlama(SlidingLlama):
    """Sliding-window attention + a per-channel linear recurrence in every layer (module docstring).
    `rec` holds per layer (a [D], w_in [D], g [D]), float32."""

    cache_class = HybridCache

    def __init__(self, config, tok_embeddings, layers, norm, backend="default", n_layers=None, name="hybrid-llama",
                 head=None, *, window: int, ring_len: int | None = None, rec=None):
        super().__init__(config, tok_embeddings, layers, norm, backend, n_layers, name, head, window=window,
                         ring_len=ring_len)
        if rec is None or len(rec) < self.n_layers:
            raise InputError("a hybrid model needs the recurrence's weights (a, w_in, g) for every layer")
        self.rec = rec

    def _like(self, m: Llama) -> "HybridLlama":
        return type(self)(m.config, m.tok_embeddings, m.layers, m.norm, m.backend, m.n_layers, m.name, m.head,
                          window=self.window, ring_len=self.ring_len, rec=self.rec)

    def make_cache(self, num_blocks: int, block_size: int = 16, prefix_caching: bool = True) -> HybridCache:
        c = self.config
        return self.cache_class(self.n_layers, c.n_kv_heads, c.head_dim, num_blocks, self.ring_len, c.dim)

    def _recur(self, i: int, x: torch.Tensor, batch: StepBatch, cache: HybridCache) -> torch.Tensor:
        """Layer i's recurrence over the step's rows x [T, D], each request's positions in order; writes
        the checkpoints and the state."""
        a, w_in, g = self.rec[i]
        u = self.backend.rms_norm(x, w_in, self.config.norm_eps)               # [T, D]
        cu = batch.cu_seqlens_q.numpy().astype(np.int64)
        n_q = np.diff(cu)                                                      # [B]
        rings = batch.block_tables.numpy()[:, 0].astype(np.int64)              # [B]
        pos = batch.positions.numpy()
        if i == 0:
            cache.first[rings] = pos[cu[:-1]]
        out = torch.empty_like(x)
        h = cache.state[i, torch.from_numpy(rings)]                            # [B, D]
        for k in range(int(n_q.max())):                                        # chunk offset k of every request
            live = np.flatnonzero(n_q > k)
            rows = torch.from_numpy(cu[:-1][live] + k)
            hk = a * h[live] + (1.0 - a) * u[rows]                             # [b, D] elementwise
            h[live] = hk
            out[rows] = g * hk
            cache.ckpt[i, torch.from_numpy(rings[live]), torch.from_numpy(pos[rows.numpy()] % MAX_CHUNK)] = hk
        cache.state[i, torch.from_numpy(rings)] = h
        return x + out

    @torch.inference_mode()
    def forward(self, batch: StepBatch, cache: HybridCache) -> torch.Tensor:
        return self._forward(batch, cache, before_attention=self._recur)


def random_hybrid(seed: int = 0, *, vocab_size: int = 96, window: int = 8, backend="default", cls=HybridLlama,
                  ring_len: int | None = None) -> HybridLlama:
    """A tiny seeded random hybrid model: `random_llama(seed)`'s weights, every layer's attention limited
    to `window` positions, and a seeded recurrence per layer (a in DECAY_RANGE, w_in ~ 1, g ~ STATE_GAIN)."""
    m = random_llama(seed, vocab_size=vocab_size, backend=backend)
    gen = torch.Generator().manual_seed(seed + 7919)
    lo, hi = DECAY_RANGE
    D = m.config.dim
    rec = [(lo + (hi - lo) * torch.rand(D, generator=gen), 1.0 + 0.1 * torch.randn(D, generator=gen),
            STATE_GAIN * torch.randn(D, generator=gen)) for _ in range(m.n_layers)]
    return cls(m.config, m.tok_embeddings, m.layers, m.norm, m.backend, name=f"random-hybrid-s{seed}", head=m.head,
               window=window, ring_len=ring_len, rec=rec)
