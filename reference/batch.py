"""The ragged verify batch: one flattened verify problem for B requests with different draft counts.

Layout (the same as vLLM's SpecDecodeMetadata, probabilities instead of logits):

    draft_token_ids   int64   [num_draft_total]        request b's drafts are a contiguous slice;
                                                        PAD (-1) = padded (always rejected)
    num_draft_tokens  int64   [B]                      kappa_b >= 0
    cu_num_draft_tokens       [B]                      inclusive prefix sum of num_draft_tokens
    target_probs      float64 [num_draft_total + B, V] request b's kappa_b draft rows, then its bonus row
    draft_probs       float64 [num_draft_total, V]     or None: deterministic drafts (q one-hot)
    greedy            bool    [B]                      temperature 0: argmax rule, no coins used

The randomness (`Coins`) is injected: one acceptance coin per draft position, aligned with
draft_token_ids, and one final coin per request, used for the recovered token at the first rejection
or for the bonus token when every draft is accepted. A greedy request uses none of its coins.

Worked example: three requests with 2, 0 and 1 drafts, V = 4.

    num_draft_tokens    = [2, 0, 1]
    cu_num_draft_tokens = [2, 2, 3]
    draft_token_ids     = [3, 1,   2]              # request 0: 3, 1   request 2: 2
    target_probs rows   = [r0.d0, r0.d1, r0.bonus, r1.bonus, r2.d0, r2.bonus]   # 3 + 3 = 6 rows
    target_row_start    = [0, 3, 4]                # cu_num_draft_tokens - num_draft_tokens + b
    accept coins        = [u00, u01, u20]          # aligned with draft_token_ids
    final coins         = [f0, f1, f2]

The output is int64 [B, max_spec_len + 1], each row the emitted tokens left-aligned and padded with
PAD; request 1 (no drafts) emits exactly one token, drawn from its bonus row with f1.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.errors import InputError

from . import validate

PAD = -1        # a padded draft id (never accepted), and the filler of output rows after the emitted tokens


@dataclass(frozen=True)
class VerifyBatch:
    draft_token_ids: np.ndarray
    num_draft_tokens: np.ndarray
    target_probs: np.ndarray
    draft_probs: np.ndarray | None = None
    greedy: np.ndarray | None = None

    def __post_init__(self):
        num = validate.counts(self.num_draft_tokens, "num_draft_tokens")
        total = int(num.sum())
        target = validate.prob_rows(self.target_probs, "target_probs", n_rows=total + num.size)
        vocab = target.shape[1]
        drafts = validate.token_ids(self.draft_token_ids, "draft_token_ids", vocab, allow_padding=True)
        if drafts.ndim != 1 or drafts.size != total:
            raise InputError(f"draft_token_ids: expected {total} ids (sum of num_draft_tokens), got {drafts.size}")
        draft = None
        if self.draft_probs is not None:
            draft = validate.prob_rows(self.draft_probs, "draft_probs", vocab_size=vocab, n_rows=total)
            real = drafts != PAD
            zero = real & (draft[np.arange(total), np.where(real, drafts, 0)] <= 0)
            if zero.any():
                i = int(np.flatnonzero(zero)[0])
                raise InputError(f"draft_token_ids: token {drafts[i]} at index {i} was drafted but its draft probability is 0")
        greedy = np.zeros(num.size, bool) if self.greedy is None else np.asarray(self.greedy, bool).reshape(-1)
        if greedy.size != num.size:
            raise InputError(f"greedy: expected {num.size} flags, got {greedy.size}")
        object.__setattr__(self, "num_draft_tokens", num)
        object.__setattr__(self, "target_probs", target)
        object.__setattr__(self, "draft_token_ids", drafts)
        object.__setattr__(self, "draft_probs", draft)
        object.__setattr__(self, "greedy", greedy)

    @property
    def batch_size(self) -> int:
        return int(self.num_draft_tokens.size)

    @property
    def vocab_size(self) -> int:
        return int(self.target_probs.shape[1])

    @property
    def max_spec_len(self) -> int:
        return int(self.num_draft_tokens.max())

    @property
    def cu_num_draft_tokens(self) -> np.ndarray:
        return np.cumsum(self.num_draft_tokens)

    @property
    def draft_start(self) -> np.ndarray:
        """Index of request b's first draft in draft_token_ids (and in draft_probs, accept coins)."""
        return self.cu_num_draft_tokens - self.num_draft_tokens

    @property
    def target_row_start(self) -> np.ndarray:
        """Index of request b's first row in target_probs."""
        return self.draft_start + np.arange(self.batch_size)

    def request(self, b: int):
        """(draft ids [k], target rows [k+1, V], draft rows [k, V] or None, greedy) of request b."""
        k = int(self.num_draft_tokens[b])
        starts = self.__dict__.get("_request_starts")
        if starts is None:     # request()'s own copy (a batch is read one request at a time: computing
            # the offsets per call made reading a batch quadratic); the public properties stay fresh arrays
            starts = self.draft_start
            object.__setattr__(self, "_request_starts", starts)
        d0 = int(starts[b])
        t0 = d0 + b
        draft = None if self.draft_probs is None else self.draft_probs[d0:d0 + k]
        return self.draft_token_ids[d0:d0 + k], self.target_probs[t0:t0 + k + 1], draft, bool(self.greedy[b])

    @classmethod
    def from_requests(cls, requests) -> "VerifyBatch":
        """Build a batch from (draft_ids, target_rows [k+1,V], draft_rows [k,V] or None, greedy)."""
        requests = list(requests)
        if not requests:
            raise InputError("a verify batch needs at least one request")
        has_q = [r[2] is not None for r in requests]
        if any(has_q) and not all(has_q):
            raise InputError("draft_probs: give draft rows for every request or for none")
        ids = [np.asarray(r[0], np.int64).reshape(-1) for r in requests]
        target = [np.atleast_2d(np.asarray(r[1], np.float64)) for r in requests]
        for b, (i, t) in enumerate(zip(ids, target)):
            if t.shape[0] != i.size + 1:
                raise InputError(f"request {b}: {i.size} drafts need {i.size + 1} target rows, got {t.shape[0]}")
        draft = None
        if all(has_q):
            draft = np.concatenate([np.asarray(r[2], np.float64).reshape(-1, target[0].shape[1]) for r in requests])
        return cls(
            draft_token_ids=np.concatenate(ids),
            num_draft_tokens=np.array([i.size for i in ids], np.int64),
            target_probs=np.concatenate(target),
            draft_probs=draft,
            greedy=np.array([bool(r[3]) if len(r) > 3 else False for r in requests]),
        )


@dataclass(frozen=True)
class Coins:
    """Injected randomness for one VerifyBatch: accept [num_draft_total], final [B], float64 in
    [0, 1] (checked when built; `check_for(batch)` checks the lengths against a batch)."""

    accept: np.ndarray
    final: np.ndarray

    def __post_init__(self):
        object.__setattr__(self, "accept", validate.coins(self.accept, "accept coins"))
        object.__setattr__(self, "final", validate.coins(self.final, "final coins"))

    def check_for(self, batch: "VerifyBatch") -> "Coins":
        """self, or InputError if there is not one accept coin per draft and one final coin per request."""
        for name, have, need in (("accept", self.accept.size, int(batch.num_draft_tokens.sum())),
                                 ("final", self.final.size, batch.batch_size)):
            if have != need:
                raise InputError(f"{name} coins: expected {need} for this batch, got {have}")
        return self

    @classmethod
    def for_batch(cls, batch: VerifyBatch, accept, final) -> "Coins":
        return cls(
            accept=validate.coins(accept, "accept coins", int(batch.num_draft_tokens.sum())),
            final=validate.coins(final, "final coins", batch.batch_size),
        )

    @classmethod
    def random(cls, batch: VerifyBatch, rng: np.random.Generator) -> "Coins":
        """Uniform coins in [0, 1) for every draft position and request."""
        return cls(accept=rng.random(int(batch.num_draft_tokens.sum())), final=rng.random(batch.batch_size))
