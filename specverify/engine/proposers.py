"""Draft proposers: n-gram (prompt lookup), a draft model, seeded random proposers for tests, and
external drafts from a caller's function (the bitwise level's oracle and adversarial drafters).

Interface (the engine calls these; `reqs` are engine Requests):

    propose(reqs, ks) -> [(drafts list[int] of length <= k_b, q_rows float64 [len, V] or None)]
                         None = deterministic drafts (q one-hot at the drafted token)
    accepted(req, n_valid)  the request's first n_valid tokens are final and were seen by the target
    release(req)            the request is done

A proposer may return fewer than k_b drafts (0 included): that request then verifies fewer
positions, or decodes plainly, in the same launch.
"""

from __future__ import annotations

import numpy as np
import torch

from . import processors
from .kv_cache import SeqKV
from .layout import build_step
from .sampler import draw, probs_many


class NgramProposer:
    """Prompt-lookup decoding: find the most recent earlier occurrence of the last n tokens
    (n = n_max .. n_min) in the request's own tokens (prompt + output) and propose what followed."""

    name = "ngram"

    def __init__(self, n_max: int = 3, n_min: int = 1):
        self.n_max, self.n_min = n_max, n_min

    def lookup(self, tokens, k: int) -> list:
        seq = np.asarray(tokens, dtype=np.int64)
        L = seq.shape[0]
        for n in range(min(self.n_max, L - 1), self.n_min - 1, -1):
            pattern = seq[L - n:]
            windows = np.lib.stride_tricks.sliding_window_view(seq[:L - 1], n)   # [L-n, n], start j
            hits = np.flatnonzero((windows == pattern).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + n                                     # token after the match
                return seq[start:start + k].tolist()
        return []

    def propose(self, reqs, ks):
        return [(self.lookup(r.tokens, k), None) for r, k in zip(reqs, ks)]

    def accepted(self, req, n_valid):
        pass

    def release(self, req):
        pass


class DraftModelProposer:
    """A draft model (any object with the model protocol), run for k_b sequential single-token steps
    over the ragged layout, with its own paged KV cache. Requests catch up on the tokens the draft
    has not seen (the prompt, the last accepted run) in the first of those steps. Drafts are drawn
    from q = the same processors and transform (temperature, top-k, top-p, min_p) as the target's, row i
    processed with the output + drafts 0..i-1, with the request's own draft generator; a greedy request
    drafts the draft's processed argmax (deterministic, q one-hot)."""

    name = "draft"

    def __init__(self, model, num_blocks: int, block_size: int = 16, prefix_caching: bool = True):
        self.model = model
        self.cache = model.make_cache(num_blocks, block_size, prefix_caching=prefix_caching)
        self.seqs: dict = {}

    def propose(self, reqs, ks):
        seqs = []
        for r in reqs:
            if r.id not in self.seqs:
                self.seqs[r.id] = SeqKV()
                self.cache.match_prefix(self.seqs[r.id], r.tokens)
            seqs.append(self.seqs[r.id])
        drafts = [[] for _ in reqs]
        qrows = [[] for _ in reqs]
        live = list(range(len(reqs)))
        while live:
            new = []
            for b in live:
                toks = reqs[b].tokens + drafts[b]
                new.append(toks[seqs[b].num_computed:])
            batch = build_step(self.cache, [seqs[b] for b in live], new, [1] * len(live))
            logits = self.model.forward(batch, self.cache)                  # [len(live), V]
            rows = []
            for row, b in enumerate(live):
                p = reqs[b].params
                r = logits[row:row + 1]
                if processors.active(p):              # the draft's row sees output + drafts so far too
                    r = torch.from_numpy(processors.process_row(r[0].numpy(), reqs[b].prompt,
                                                                reqs[b].output + drafts[b], p, reqs[b].stop_ids)[None])
                rows.append(r)
            sampled = [j for j, b in enumerate(live) if reqs[b].params.temperature != 0]
            probs = dict(zip(sampled, probs_many([rows[j] for j in sampled], [reqs[live[j]].params for j in sampled])))
            for j, b in enumerate(live):
                if j in probs:
                    q = probs[j][0]
                    drafts[b].append(draw(q, reqs[b].draft_rng.random()))
                    qrows[b].append(q)
                else:
                    drafts[b].append(int(torch.argmax(rows[j][0])))
            live = [b for b in live if len(drafts[b]) < ks[b]]
        out = []
        for b, r in enumerate(reqs):
            q = np.stack(qrows[b]) if qrows[b] else None
            out.append((drafts[b], q))
        return out

    def accepted(self, req, n_valid):
        seq = self.seqs.get(req.id)
        if seq is not None:
            self.cache.rollback(seq, n_valid)
            self.cache.commit(seq, req.tokens, min(n_valid, len(req.tokens)))

    def release(self, req):
        seq = self.seqs.pop(req.id, None)
        if seq is not None:
            self.cache.release(seq)


class RandomProposer:
    """Context-free drafts from a fixed seeded distribution q (for tests and adversarial audits):
    kind "uniform" (q uniform over the vocabulary) or "skewed" (q ~ Dirichlet(0.1), far from any
    sensible target). Drafts are drawn with the request's draft generator, so runs are seeded."""

    def __init__(self, vocab_size: int, kind: str = "uniform", seed: int = 0):
        from specverify.errors import InputError
        if kind == "uniform":
            q = np.full(vocab_size, 1.0 / vocab_size)
        elif kind == "skewed":
            q = np.random.default_rng(seed).dirichlet(np.full(vocab_size, 0.1))
            q = np.maximum(q, 1e-12)
            q = q / q.sum()
        else:
            raise InputError(f"random proposer kind {kind!r}: choose uniform or skewed")
        self.name = f"random-{kind}"
        self.q = q

    def propose(self, reqs, ks):
        out = []
        for r, k in zip(reqs, ks):
            drafts = [draw(self.q, r.draft_rng.random()) for _ in range(k)]
            out.append((drafts, np.tile(self.q, (k, 1)) if k else None))
        return out

    def accepted(self, req, n_valid):
        pass

    def release(self, req):
        pass


class ExternalProposer:
    """Drafts from the caller: `drafts_of(request_id, n_output, k)` returns at most k token ids for the
    request after its n_output emitted tokens (deterministic: q one-hot). The bitwise level's oracle and
    adversarial drafters (`adapters.bitwise_level.drafted_tokens`) come through here, so that a verify
    chunk of any width and a rejection at any chunk position can be forced."""

    name = "external"

    def __init__(self, drafts_of):
        self.drafts_of = drafts_of

    def propose(self, reqs, ks):
        return [([int(t) for t in self.drafts_of(r.id, len(r.output), k)][:k], None) for r, k in zip(reqs, ks)]

    def accepted(self, req, n_valid):
        pass

    def release(self, req):
        pass
