"""Paged KV cache with logical rollback and a prefix cache of finalized blocks.

Storage (preallocated once, never re-allocated per step):

    k, v       float32 [n_layers, num_blocks, block_size, n_kv_heads, head_dim]
    token_ids  int64   [num_blocks * block_size]   the token whose K/V a slot holds (-1: never written)

A request owns a `SeqKV` per cache: its block ids in position order and `num_computed`, the number of
its positions whose K/V are valid. Position t lives in slot block_ids[t // block_size] * block_size
+ t % block_size.

Rollback. A verify step writes K/V for the last emitted token and all kappa drafts. When only m
drafts are accepted, `rollback(seq, n)` sets num_computed back to n (the finalized tokens fed so
far); the slots beyond are not freed or cleared: the next step writes its tokens over them, and
attention never reads past context_lens, so a rejected draft's K/V is overwritten, never read.

Prefix cache (vLLM-style, block granularity). A full block whose positions all hold *finalized*
tokens (positions < min(num_computed, number of finalized tokens)) gets a key chained from its
parent's key and its token ids, and is registered under it (`commit`). A new request's prompt
reuses the longest chain of registered blocks (`match_prefix`), at most up to its last prompt token
(which must be computed to get logits). Blocks are reference counted; a cached block with no user
stays in an LRU pool and is evicted only when a fresh block is needed. A draft token is never
committed: drafts sit at positions >= the number of finalized tokens.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field

import torch

from specverify.errors import InputError


class OutOfBlocks(InputError):
    """The KV cache has no free block left (raise num_blocks or lower the batch size)."""


@dataclass
class SeqKV:
    block_ids: list = field(default_factory=list)
    num_computed: int = 0          # positions 0..num_computed-1 hold valid K/V
    num_committed_blocks: int = 0  # leading blocks registered in (or taken from) the prefix cache
    last_key: int | None = None    # unique id of the last committed block's prefix-cache key


class PagedKVCache:
    def __init__(self, n_layers: int, n_kv_heads: int, head_dim: int, num_blocks: int,
                 block_size: int = 16, dtype=torch.float32, prefix_caching: bool = True):
        self.block_size = block_size
        self.num_blocks = num_blocks
        shape = (n_layers, num_blocks, block_size, n_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype)
        self.v = torch.zeros(shape, dtype=dtype)
        self.token_ids = torch.full((num_blocks * block_size,), -1, dtype=torch.int64)
        self.prefix_caching = prefix_caching
        self.ref_count = [0] * num_blocks
        self.block_key: list = [None] * num_blocks
        self.free = deque(range(num_blocks))
        self.evictable: OrderedDict = OrderedDict()   # block id -> None, least recently used first
        self.cached: dict = {}                        # key -> block id
        self.key_uid: dict = {}                       # key -> unique id (the chain link of its children)
        self.next_uid = 0
        self.hits = 0                                 # prompt tokens served from the prefix cache

    # -- blocks ------------------------------------------------------------------------------------
    def _take_block(self) -> int:
        if self.free:
            b = self.free.popleft()
        elif self.evictable:
            b, _ = self.evictable.popitem(last=False)
            del self.cached[self.block_key[b]]
            self.key_uid.pop(self.block_key[b], None)
            self.block_key[b] = None
        else:
            raise OutOfBlocks(f"KV cache full: all {self.num_blocks} blocks of {self.block_size} slots in use")
        self.ref_count[b] = 1
        return b

    def num_available(self) -> int:
        return len(self.free) + len(self.evictable)

    def blocks_needed(self, n_positions: int) -> int:
        """Blocks a request of n_positions positions takes (what the scheduler reserves to admit it)."""
        return -(-n_positions // self.block_size)

    def slots(self, seq: SeqKV, positions):
        """The slots (int64 array) of `seq`'s positions: block_ids[t // block_size] * block_size + t % block_size."""
        import numpy as np
        bs = self.block_size
        blocks = np.asarray(seq.block_ids, dtype=np.int64)
        return blocks[positions // bs] * bs + positions % bs

    def ensure_capacity(self, seq: SeqKV, n_positions: int) -> None:
        while len(seq.block_ids) * self.block_size < n_positions:
            seq.block_ids.append(self._take_block())

    def release(self, seq: SeqKV) -> None:
        for b in seq.block_ids:
            self.ref_count[b] -= 1
            if self.ref_count[b] == 0:
                if self.block_key[b] is not None:
                    self.evictable[b] = None
                else:
                    self.free.append(b)
        seq.block_ids = []
        seq.num_computed = 0

    # -- rollback ----------------------------------------------------------------------------------
    @staticmethod
    def rollback(seq: SeqKV, num_valid: int) -> None:
        """Only positions < num_valid hold K/V of finalized tokens; later slots will be overwritten."""
        seq.num_computed = min(seq.num_computed, num_valid)

    # -- prefix cache ------------------------------------------------------------------------------
    def _key(self, parent_uid, tokens) -> tuple:
        # exact key (no hash collisions): the parent's unique id and this block's token ids
        return (parent_uid, tuple(int(t) for t in tokens))

    def _uid(self, key) -> int:
        uid = self.key_uid.get(key)
        if uid is None:
            self.next_uid += 1
            uid = self.key_uid[key] = self.next_uid
        return uid

    def commit(self, seq: SeqKV, tokens, num_finalized: int) -> None:
        """Register the full blocks of `seq` that hold only finalized tokens (tokens[:num_finalized])."""
        if not self.prefix_caching:
            return
        bs = self.block_size
        n_full = min(seq.num_computed, num_finalized) // bs
        for j in range(seq.num_committed_blocks, n_full):
            key = self._key(seq.last_key, tokens[j * bs:(j + 1) * bs])
            b = seq.block_ids[j]
            if key not in self.cached and self.block_key[b] is None:
                self.cached[key] = b
                self.block_key[b] = key
            seq.last_key = self._uid(key)
            seq.num_committed_blocks = j + 1

    def match_prefix(self, seq: SeqKV, prompt) -> int:
        """Attach the cached blocks of the longest cached prefix of `prompt` to an empty `seq`;
        return the number of positions whose K/V are now valid (a multiple of block_size)."""
        if not self.prefix_caching or seq.block_ids:
            return 0
        bs = self.block_size
        parent = None
        for j in range((len(prompt) - 1) // bs):
            key = self._key(parent, prompt[j * bs:(j + 1) * bs])
            b = self.cached.get(key)
            if b is None:
                break
            if self.ref_count[b] == 0:
                del self.evictable[b]
            self.ref_count[b] += 1
            seq.block_ids.append(b)
            parent = seq.last_key = self._uid(key)
            seq.num_committed_blocks = j + 1
        seq.num_computed = len(seq.block_ids) * bs
        self.hits += seq.num_computed
        return seq.num_computed
