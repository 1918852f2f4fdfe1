"""The flattened ragged step layout every model forward takes (the same for target and draft).

One step runs B requests in one launch. Request b feeds n_b new tokens (a prefill: its prompt; a
decode: its last emitted token; a verify: its last emitted token and kappa_b drafts) that sit at
absolute positions start_b .. start_b + n_b - 1, where start_b is the number of its tokens whose KV
is already in the cache. The tokens are concatenated request after request:

    token_ids      int64 [T]        T = sum n_b
    positions      int64 [T]        absolute position of each token (RoPE angle, causal mask)
    slot_mapping   int64 [T]        where its K/V go: block_id * block_size + position % block_size
    cu_seqlens_q   int32 [B + 1]    request b owns token rows cu_seqlens_q[b] .. cu_seqlens_q[b+1]-1
    context_lens   int32 [B]        start_b + n_b: KV positions request b's last query attends to
    block_tables   int32 [B, M]     request b's KV blocks in order (padded with 0)
    logits_indices int64 [R]        the token rows whose next-token logits are wanted, in order

Worked example: block_size 4; request 0 verifies 2 drafts after 5 cached tokens, request 1 is a
6-token prefill, request 2 decodes after 9 cached tokens.

    n_b            = [3, 6, 1]                       T = 10
    token_ids      = [x5 d0 d1 | p0 p1 p2 p3 p4 p5 | y9]
    positions      = [5 6 7 | 0 1 2 3 4 5 | 9]
    cu_seqlens_q   = [0, 3, 9, 10]
    context_lens   = [8, 6, 10]
    logits_indices = [0, 1, 2, 8, 9]                 all verify rows; the prefill's last row; the decode
                                                     -> 5 rows: r0.d0 r0.d1 r0.bonus r1.bonus r2.bonus

The logits rows come back in that order: request b's n_logits_b rows are contiguous, its kappa_b
draft-position rows then its bonus row, exactly the row order of `reference.batch.VerifyBatch`.
`build_step` also writes each token id into the cache's token store at its slot: a model without
K/V of its own (the toy-model adapter) reads its prefixes from there, so it sees exactly what a
real model's attention would see -- stale slots included, if rollback were broken.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class StepBatch:
    token_ids: torch.Tensor       # int64 [T]
    positions: torch.Tensor       # int64 [T]
    slot_mapping: torch.Tensor    # int64 [T]
    cu_seqlens_q: torch.Tensor    # int32 [B + 1]
    context_lens: torch.Tensor    # int32 [B]
    block_tables: torch.Tensor    # int32 [B, M]
    logits_indices: torch.Tensor  # int64 [R]
    n_logits: list                # [B] rows of logits per request

    @property
    def num_tokens(self) -> int:
        return int(self.token_ids.shape[0])

    @property
    def batch_size(self) -> int:
        return int(self.context_lens.shape[0])


def build_step(cache, seqs, new_tokens, n_logits) -> StepBatch:
    """Lay out one step for `cache` (a PagedKVCache): request b appends new_tokens[b] to seqs[b]
    (a SeqKV; its blocks are grown here) and wants logits for its last n_logits[b] new tokens."""
    toks, pos, slots, cu, ctx, logit_rows = [], [], [], [0], [], []
    for seq, new, nl in zip(seqs, new_tokens, n_logits):
        n = len(new)
        start = seq.num_computed
        cache.ensure_capacity(seq, start + n)
        p = np.arange(start, start + n, dtype=np.int64)
        toks.append(np.asarray(new, dtype=np.int64))
        pos.append(p)
        slots.append(cache.slots(seq, p))         # the cache's layout: paged blocks, or a ring
        logit_rows.append(np.arange(cu[-1] + n - nl, cu[-1] + n, dtype=np.int64))
        cu.append(cu[-1] + n)
        ctx.append(start + n)
    max_blocks = max(len(s.block_ids) for s in seqs)
    table = np.zeros((len(seqs), max_blocks), dtype=np.int32)
    for b, s in enumerate(seqs):
        table[b, :len(s.block_ids)] = s.block_ids
    batch = StepBatch(
        token_ids=torch.from_numpy(np.concatenate(toks)),
        positions=torch.from_numpy(np.concatenate(pos)),
        slot_mapping=torch.from_numpy(np.concatenate(slots)),
        cu_seqlens_q=torch.tensor(cu, dtype=torch.int32),
        context_lens=torch.tensor(ctx, dtype=torch.int32),
        block_tables=torch.from_numpy(table),
        logits_indices=torch.from_numpy(np.concatenate(logit_rows)),
        n_logits=list(n_logits),
    )
    cache.token_ids[batch.slot_mapping] = batch.token_ids
    for seq, new in zip(seqs, new_tokens):
        seq.num_computed += len(new)
    return batch
