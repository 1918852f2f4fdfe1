"""Sliding-window attention with a ring-buffer KV cache and exact rollback (docs/sliding-window.md has
the layout and a worked example).

A sliding-window model attends, at position i, to the keys of positions i - W + 1 .. i only. Its KV
cache needs the last positions of a request, not all of them: a ring of R slots per request, position
t in slot t mod R. `RingKVCache` is that cache, with the paged cache's interface (the scheduler and
`layout.build_step` ask it for slots, `blocks_needed`, rollback):

    k, v       float32 [n_layers, num_rings, R, n_kv_heads, head_dim]
    a request  one ring (SeqKV.block_ids == [ring id]); num_computed as in the paged cache

Order of a step (`SlidingLlama.forward`): every query reads the keys it needs -- positions before the
step from the ring, positions of the step from the step's own fresh K/V -- and only then are the step's
K/V written into the ring (the last R of each request's new positions). Query t at position p attends
to W' = min(W, p + 1) keys, gathered in position order into a block of its own, through the op
backend's attention as a one-query sequence: the same call in a decode step and at any position of a
verify or prefill chunk, so a batch-invariant backend gives the same bits.

Rollback is logical (`rollback` sets num_computed back), exact when R >= W + c - 2 for verify chunks of
at most c = kappa + 1 tokens: a step at start s writing c positions overwrites the slots of positions
< s + c - R, and the earliest position the next step can still read is s + 1 - W + 1 (after a rejection
of every draft), so nothing the next window reads was overwritten by a rejected draft. The ring holds
R = W + MAX_CHUNK - 2 slots (kappa <= MAX_CHUNK - 1); a launch with a wider verify chunk is an error.
A ring sized for plain decode (R = W - 1) passes every run whose drafts
are all accepted and is wrong after a rejection: the rejected drafts overwrote keys the window reads
(`zoo.our_engine.PlainDecodeRing`).
"""

from __future__ import annotations

import numpy as np
import torch

from specverify.errors import InputError
from specverify.kernels.quant import embedding_rows

from .kv_cache import SeqKV
from .layout import StepBatch
from .model import Llama, LlamaConfig, LayerWeights

MAX_CHUNK = 16           # widest verify chunk (kappa + 1) the ring is sized for


def ring_length(window: int, max_chunk: int = MAX_CHUNK) -> int:
    """Slots per request for exact rollback of verify chunks of up to max_chunk tokens: W + c - 2."""
    return window + max_chunk - 2


class RingKVCache:
    """One ring of `ring_len` slots per request (module docstring); `num_rings` requests at once. No
    prefix caching: a ring holds the last positions, not a prefix."""

    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, num_rings: int, ring_len: int,
                 dtype=torch.float32):
        if ring_len < 1 or num_rings < 1:
            raise InputError(f"ring cache: {num_rings} rings of {ring_len} slots")
        self.ring_len = self.block_size = ring_len
        self.num_blocks = num_rings
        shape = (n_layers, num_rings, ring_len, n_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)
        self.token_ids = torch.full((num_rings * ring_len,), -1, dtype=torch.int64)
        self.free = list(range(num_rings))[::-1]
        self.hits = 0

    def num_available(self) -> int:
        return len(self.free)

    def blocks_needed(self, n_positions: int) -> int:
        return 1                                   # one ring, whatever the length

    def ensure_capacity(self, seq: SeqKV, n_positions: int) -> None:
        if not seq.block_ids:
            if not self.free:
                from .kv_cache import OutOfBlocks
                raise OutOfBlocks(f"ring cache full: all {self.num_blocks} rings in use")
            seq.block_ids.append(self.free.pop())

    def slots(self, seq: SeqKV, positions):
        return seq.block_ids[0] * self.ring_len + np.asarray(positions, np.int64) % self.ring_len

    def release(self, seq: SeqKV) -> None:
        self.free.extend(seq.block_ids)
        seq.block_ids = []
        seq.num_computed = 0

    @staticmethod
    def rollback(seq: SeqKV, num_valid: int) -> None:
        """Positions >= num_valid are forgotten; their slots are written again before any window reads them."""
        seq.num_computed = min(seq.num_computed, num_valid)

    def commit(self, seq: SeqKV, tokens, num_finalized: int) -> None:
        pass

    def match_prefix(self, seq: SeqKV, prompt) -> int:
        return 0


class SlidingLlama(Llama):
    """A Llama whose every layer attends to the last `window` positions, over a `RingKVCache` of
    `ring_len` slots per request (default `ring_length(window)`)."""

    check_chunks = True      # refuse verify chunks wider than the ring rolls back exactly

    def __init__(self, config: LlamaConfig, tok_embeddings, layers, norm, backend="default", n_layers=None,
                 name="sliding-llama", head=None, *, window: int, ring_len: int | None = None):
        super().__init__(config, tok_embeddings, layers, norm, backend, n_layers, name, head)
        if window < 1:
            raise InputError(f"sliding window {window} must be >= 1")
        self.window = int(window)
        self.ring_len = ring_length(self.window) if ring_len is None else int(ring_len)

    def _like(self, m: Llama) -> "SlidingLlama":
        return type(self)(m.config, m.tok_embeddings, m.layers, m.norm, m.backend, m.n_layers, m.name, m.head,
                          window=self.window, ring_len=self.ring_len)

    def with_backend(self, backend) -> "SlidingLlama":
        return self._like(super().with_backend(backend))

    def draft_view(self, n_layers=None, *, skip=None) -> "SlidingLlama":
        return self._like(super().draft_view(n_layers, skip=skip))

    def make_cache(self, num_blocks: int, block_size: int = 16, prefix_caching: bool = True) -> RingKVCache:
        """`num_blocks` rings (one per request at once; block_size and prefix_caching do not apply)."""
        c = self.config
        return RingKVCache(self.n_layers, c.n_kv_heads, c.head_dim, num_blocks, self.ring_len)

    def _plan(self, batch: StepBatch, cache: RingKVCache):
        """Where each query's keys come from: index [T, W] into (ring slots ++ the step's rows), the
        key counts [T], and the rows whose K/V are stored (each request's last ring_len positions)."""
        W, R = self.window, self.ring_len
        pos = batch.positions.numpy()                                           # [T]
        cu = batch.cu_seqlens_q.numpy().astype(np.int64)
        n_q = np.diff(cu)                                                       # [B] tokens per request
        if self.check_chunks and max(batch.n_logits) > R - W + 2:
            raise InputError(f"a verify chunk of {max(batch.n_logits)} tokens: the ring of {R} slots "
                             f"(window {W}) rolls back exactly up to {R - W + 2} (kappa <= {R - W + 1})")
        req = np.repeat(np.arange(batch.batch_size), n_q)                       # [T] request of each token
        r0 = cu[:-1][req]                                                       # [T] its first row
        start = pos[r0]                                                         # [T] its first new position
        ring = batch.block_tables.numpy()[req, 0].astype(np.int64)              # [T]
        n_keys = np.minimum(W, pos + 1).astype(np.int32)                        # [T]
        keys = pos[:, None] - n_keys[:, None] + 1 + np.arange(W)[None, :]      # [T, W] key positions, in order
        valid = np.arange(W)[None, :] < n_keys[:, None]
        keys = np.where(valid, keys, pos[:, None])                              # padding: never read
        index = np.where(self._from_step(keys, pos, start), cache.num_blocks * R + r0[:, None] + (keys - start[:, None]),
                         ring[:, None] * R + keys % R)
        last = (cu[1:] - 1)[req]                                                # [T] the request's last row
        store = np.arange(pos.shape[0]) > last - R                              # its last R new positions
        return torch.from_numpy(index), torch.from_numpy(n_keys), torch.from_numpy(np.flatnonzero(store))

    @staticmethod
    def _from_step(keys: np.ndarray, pos: np.ndarray, start: np.ndarray) -> np.ndarray:
        """Which keys [T, W] a query reads from the step's fresh K/V (the others from the ring): the
        positions of the step, its own and the chunk's earlier ones (pos [T], start [T] its request's first)."""
        return keys >= start[:, None]

    @torch.inference_mode()
    def forward(self, batch: StepBatch, cache: RingKVCache) -> torch.Tensor:
        return self._forward(batch, cache)

    def _forward(self, batch: StepBatch, cache: RingKVCache, before_attention=None) -> torch.Tensor:
        """The step's logits rows [R, V]; `before_attention(i, x, batch, cache)` -> x, when given, runs at
        the start of layer i (a hybrid model's recurrence, `engine.hybrid`)."""
        c, be = self.config, self.backend
        T, Hq, Hkv, Dh, W = batch.num_tokens, c.n_heads, c.n_kv_heads, c.head_dim, self.window
        scale = Dh ** -0.5
        index, n_keys, store = self._plan(batch, cache)
        one_block = torch.arange(T, dtype=torch.int32)[:, None]                 # query t reads block t
        cu_one = torch.arange(T + 1, dtype=torch.int32)                         # one query per sequence
        slots = batch.slot_mapping[store]
        x = embedding_rows(self.tok_embeddings, batch.token_ids)                  # [T, D]
        for i in range(self.n_layers):
            w = self.layers[i]
            if before_attention is not None:
                x = before_attention(i, x, batch, cache)
            h = be.rms_norm(x, w.attn_norm, c.norm_eps)
            qkv = be.linear(h, w.wqkv)                                            # [T, (Hq+2Hkv)*Dh]
            qk = be.rotary(qkv[:, :(Hq + Hkv) * Dh].reshape(T, Hq + Hkv, Dh), batch.positions, c.rope_theta)
            q = qk[:, :Hq].contiguous()                                           # [T, Hq, Dh]
            k = qk[:, Hq:]                                                        # [T, Hkv, Dh]
            v = qkv[:, (Hq + Hkv) * Dh:].reshape(T, Hkv, Dh)                      # [T, Hkv, Dh]
            k_ring, v_ring = cache.k[i].view(-1, Hkv, Dh), cache.v[i].view(-1, Hkv, Dh)   # [rings * R, Hkv, Dh]
            k_win = torch.cat([k_ring, k])[index].contiguous()                    # [T, W, Hkv, Dh]
            v_win = torch.cat([v_ring, v])[index].contiguous()
            a = be.attention(q, k_win, v_win, one_block, n_keys, cu_one, scale)   # [T, Hq, Dh]
            k_ring.index_copy_(0, slots, k[store].contiguous())                   # after every read
            v_ring.index_copy_(0, slots, v[store].contiguous())
            x = x + be.linear(a.reshape(T, Hq * Dh), w.wo)
            h = be.rms_norm(x, w.ffn_norm, c.norm_eps)
            gate_up = be.linear(h, w.w_gate_up)
            gate, up = gate_up[:, :c.ffn_dim], gate_up[:, c.ffn_dim:]
            x = x + be.linear(be.silu_mul(gate, up), w.w_down)
        x = x[batch.logits_indices]                                               # [R, D]
        return be.linear(be.rms_norm(x, self.norm, c.norm_eps), self.head)        # [R, V]


def load_sliding(folder, backend="default", *, ring_len: int | None = None, cls=SlidingLlama) -> SlidingLlama:
    """Our engine's model of a tiny sliding-window folder (`models.sliding.build`): float32 weights,
    q/k rows in the adjacent-pair rotary layout, the untied head; `ring_len` None: `ring_length(window)`."""
    from specverify.models import sliding as family

    cfg, tensors = family.engine_tensors(folder)
    t = {k: torch.from_numpy(v) for k, v in tensors.items()}
    n_heads = int(cfg["num_attention_heads"])
    config = LlamaConfig(vocab_size=int(cfg["vocab_size"]), dim=int(cfg["hidden_size"]),
                         n_layers=int(cfg["num_hidden_layers"]), n_heads=n_heads,
                         n_kv_heads=int(cfg["num_key_value_heads"]), ffn_dim=int(cfg["intermediate_size"]),
                         rope_theta=float((cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))),
                         norm_eps=float(cfg["rms_norm_eps"]), max_seq_len=1 << 20)    # a ring: no length limit

    def lin(w):
        return w.T.contiguous().T                  # [out, in] over [in, out] storage, as build_llama does
    layers = []
    for i in range(config.n_layers):
        p = f"blk.{i}."
        layers.append(LayerWeights(
            attn_norm=t[p + "attn_norm.weight"].contiguous(),
            wqkv=lin(torch.cat([t[p + "attn_q.weight"], t[p + "attn_k.weight"], t[p + "attn_v.weight"]])),
            wo=lin(t[p + "attn_output.weight"]),
            ffn_norm=t[p + "ffn_norm.weight"].contiguous(),
            w_gate_up=lin(torch.cat([t[p + "ffn_gate.weight"], t[p + "ffn_up.weight"]])),
            w_down=lin(t[p + "ffn_down.weight"])))
    from pathlib import Path
    return cls(config, t["token_embd.weight"].contiguous(), layers, t["output_norm.weight"].contiguous(), backend,
               name=Path(folder).name, head=lin(t["output.weight"]), window=int(cfg["sliding_window"]),
               ring_len=ring_len)
