"""A reference toy model (`specverify.reference.toy.ToyModel`: `vocab_size`, `logits(prefix)`)
behind the engine's model protocol.

The adapter has no K/V: its "cache" is the paged cache's token store, and the logits of a query
row at position t are toy.logits(tokens at positions 1..t), read through the request's block table.
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
        out = np.empty((rows.size, self.vocab_size), dtype=np.float64)
        for i, (b, t) in enumerate(zip(req, positions)):
            pos = np.arange(1, t + 1)
            prefix = store[tables[b, pos // bs] * bs + pos % bs]
            out[i] = self.toy.logits(prefix)
        return torch.from_numpy(out)                    # float64 [R, V]
