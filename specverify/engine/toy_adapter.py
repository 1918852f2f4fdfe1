"""A reference toy model (`specverify.reference.toy.ToyModel`: `vocab_size`, `logits(prefix)`)
behind the engine's model protocol.

The adapter has no K/V: its "cache" is the paged cache's token store, and the logits of a query
row at position t are toy.logits(tokens at positions 1..t), read through the request's block table.
(A first-order model, with `logits_after(last_tokens)`, is handed only the token at position t.)
So the toy sees exactly the context a real model's attention would see: if a rejected draft were
left in the context (a broken rollback), the toy's distributions would change too.

Position 0 holds a sentinel (id = vocab_size, never emitted or drafted): the engine needs one fed
token to produce the first row, and a toy prompt may be empty. `api.generate` prepends it.
"""

from __future__ import annotations

import numpy as np
import torch

from .kv_cache import PagedKVCache


class ToyAdapter:
    def __init__(self, toy):
        self.toy = toy
        self.vocab_size = int(toy.vocab_size)
        self.sentinel = self.vocab_size
        self.name = f"toy(V={self.vocab_size})"

    def make_cache(self, num_blocks: int, block_size: int = 16, prefix_caching: bool = True) -> PagedKVCache:
        return PagedKVCache(0, 1, 1, num_blocks, block_size, prefix_caching=prefix_caching)

    def forward(self, batch, cache) -> torch.Tensor:
        bs = cache.block_size
        store = cache.token_ids.numpy()
        cu = batch.cu_seqlens_q.numpy()
        rows = batch.logits_indices.numpy()
        req = np.searchsorted(cu, rows, side="right") - 1
        positions = batch.positions.numpy()[rows]
        tables = batch.block_tables.numpy().astype(np.int64)
        if hasattr(self.toy, "logits_after"):          # a first-order model: the last token is its whole context
            last = store[tables[req, positions // bs] * bs + positions % bs]          # [R]: the token at position t
            last = np.where(positions >= 1, last, -1)                                 # -1: the empty prefix
            if ((last < -1) | (last >= self.vocab_size)).any():
                raise ValueError("toy adapter: a prefix holds a token outside the vocabulary")
            return torch.from_numpy(np.asarray(self.toy.logits_after(last), dtype=np.float64))
        prefixes = []
        for b, t in zip(req, positions):
            pos = np.arange(1, t + 1)
            prefixes.append(store[tables[b, pos // bs] * bs + pos % bs])
        if hasattr(self.toy, "logits_at"):             # one vectorised call for all rows
            from specverify.reference.toy import prefix_index
            V = self.vocab_size
            if any(((p < 0) | (p >= V)).any() for p in prefixes):
                raise ValueError("toy adapter: a prefix holds a token outside the vocabulary")
            index = np.array([prefix_index(p.tolist(), V) for p in prefixes], dtype=np.int64)
            out = np.asarray(self.toy.logits_at(index), dtype=np.float64)
        else:
            out = np.stack([np.asarray(self.toy.logits(p), dtype=np.float64) for p in prefixes])
        return torch.from_numpy(out)                    # float64 [R, V]
