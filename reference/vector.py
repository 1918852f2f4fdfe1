"""The exact chain, greedy and tree rules over a whole batch at once (NumPy, vectorised over requests).

`VectorSampler` walks draft positions left to right and handles every request still verifying at
that position in one array operation; requests are never looped over in Python. It is bit for bit
the reference (`specverify.reference.chain`, `.tree`: same float64 operations in the same order;
tests/test_battery_vector.py compares them token for token under the same coins), and it is built
from named primitives, one line each:

    accept(p_x, q_x, coin)        coin * q[x] < p[x]
    residual(p, q)                max(0, p - q), or p itself where that is all zero
    draw(w, coin)                 inverse CDF: #{k : cumsum(w)[k] <= coin * sum(w)}, clamped to the
                                  last positive weight
    argmax(rows)                  lowest index among ties
    bonus_rows(batch)             row target_row_start[b] + num_draft_tokens[b]
    residual_coin(accept, final)  the final coin
    draw_residual(w, coin)        draw(w, coin)
    accept_rows(p, q, x, coin)    accept(p[x], q[x], coin)
    keep_tail                     False: stop at the first rejection

The bug zoo (`specverify.zoo`) overrides one of them per mutant (the sampler-match rule
three; the seeded-mode mutants `seeded_coins`, which lays each request's stream out as coins), so each
bug is a few readable lines away from the exact rule.

Seeded mode (`verify_seeded(batch, seeds)`, protocol in `adapters.protocol`): request b draws its
coins from its own counter-based stream, u(seed, n) = splitmix64(splitmix64(seed) + n) >> 11 times
2^-53, continued across calls: a non-greedy request with k drafts takes its k acceptance coins and
then its final coin (k + 1 values); a greedy request takes none.
"""

from __future__ import annotations

import numba
import numpy as np

from specverify import __version__

from .batch import PAD, Coins, VerifyBatch
from .tree_batch import TreeBatch, TreeCoins


def splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        z = np.asarray(x, np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def stream_uniforms(seeds: np.ndarray, counters: np.ndarray) -> np.ndarray:
    """u(seed, n) in [0, 1) for paired arrays of seeds and stream positions."""
    with np.errstate(over="ignore"):
        key = splitmix64(np.asarray(seeds).astype(np.int64).view(np.uint64))
        h = splitmix64(key + np.asarray(counters, np.int64).view(np.uint64))
    return (h >> np.uint64(11)).astype(np.float64) * 2.0**-53


class Streams:
    """Per-request counter-based streams keyed by seed, continued across calls."""

    def __init__(self):
        self.position: dict[int, int] = {}

    def take(self, seeds: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """counts[b] uniforms from seed b's stream (in order), advancing it; flat, request by request."""
        seeds = np.asarray(seeds, np.int64).reshape(-1)
        counts = np.asarray(counts, np.int64).reshape(-1)
        # request by request, so a seed that appears twice in one batch reads consecutive slices
        start = np.empty(seeds.size, np.int64)
        for b, (s, c) in enumerate(zip(seeds.tolist(), counts.tolist())):
            start[b] = self.position.get(s, 0)
            self.position[s] = int(start[b]) + c
        flat_seed = np.repeat(seeds, counts)
        flat_pos = np.repeat(start, counts) + _ranks(counts)
        return stream_uniforms(flat_seed, flat_pos)


def _ranks(counts: np.ndarray) -> np.ndarray:
    """[0..c0-1, 0..c1-1, ...] for counts c."""
    total = int(counts.sum())
    return np.arange(total) - np.repeat(np.cumsum(counts) - counts, counts)


def inverse_cdf(w: np.ndarray, coin: np.ndarray) -> np.ndarray:
    """One token per row of the weights w [n, V]: #{k : cumsum(w)[k] <= coin * sum(w)}, clamped to
    the last positive weight (a token of weight 0 is never drawn). The cumulative sum is the
    sequential float64 one of np.cumsum, compiled (`_inverse_cdf`): 262,144-wide rows cost a tenth."""
    w = np.ascontiguousarray(w, np.float64)
    coin = np.ascontiguousarray(np.broadcast_to(coin, (w.shape[0],)), np.float64)
    token = np.empty(w.shape[0], np.int64)
    _inverse_cdf(w, coin, token)
    return token


@numba.njit(cache=True)
def _inverse_cdf(w, coin, out):
    n, v = w.shape
    for i in range(n):
        total = 0.0
        for k in range(v):
            total += w[i, k]
        t = coin[i] * total
        c = 0.0
        token = 0
        for k in range(v):
            c += w[i, k]
            if c <= t:
                token += 1
        if token == v:                      # past the end: the last positive weight (V - 1 if none)
            token = last_positive(w, i)
        out[i] = token


@numba.njit(cache=True)
def last_positive(w, i):
    """The last id of row i of w with a positive weight, V - 1 if none (where a draw past the end lands)."""
    v = w.shape[1]
    for k in range(v - 1, -1, -1):
        if w[i, k] > 0:
            return k
    return v - 1


def warm() -> None:
    """Load the compiled kernels of this module now (from numba's cache, or compiled once), so that a
    process forked afterwards (`specverify.ranks`) does not pay for it on its first call."""
    inverse_cdf(np.ones((1, 2)), np.zeros(1))


def onehot(x: np.ndarray, vocab: int) -> np.ndarray:
    q = np.zeros((x.size, vocab))
    q[np.arange(x.size), np.maximum(x, 0)] = 1.0
    return q


class VectorSampler:
    """The exact rules, vectorised over a batch (see the module docstring)."""

    name = "vector"
    version = __version__
    capabilities = {"chain", "greedy", "tree", "seeded"}
    keep_tail = False

    def __init__(self):
        self.streams = Streams()

    # ------------------------------------------------------------------ primitives (one line each)

    def accept(self, p_x, q_x, coin):
        return coin * q_x < p_x

    def residual(self, p, q):
        w = np.maximum(p - q, 0.0)
        return np.where((w > 0).any(axis=1, keepdims=True), w, p)

    def draw(self, w, coin):
        return inverse_cdf(w, coin)

    def argmax(self, rows):
        return np.argmax(rows, axis=1)

    def bonus_rows(self, batch: VerifyBatch):
        return batch.target_row_start + batch.num_draft_tokens

    def residual_coin(self, accept_coin, final_coin):
        return final_coin

    def draw_residual(self, w, coin):
        """The recovered token's draw (the same inverse CDF as every other draw)."""
        return self.draw(w, coin)

    def accept_rows(self, p, q, x, coin):
        """The acceptance decision from whole rows: accept(p[x], q[x], coin)."""
        return self.accept(self.drafted_prob(p, x), self.drafted_prob(q, x), coin)

    def drafted_prob(self, rows, x):
        """rows[n, x[n]]; a padded draft (x = -1) reads 0 (it is rejected before any use)."""
        return np.where(x != PAD, rows[np.arange(x.size), np.maximum(x, 0)], 0.0)

    def is_padded(self, x):
        return x == PAD

    # ------------------------------------------------------------------ chain and greedy

    def verify(self, batch: VerifyBatch, coins: Coins | None) -> np.ndarray:
        out = np.full((batch.batch_size, batch.max_spec_len + 1), PAD, np.int64)
        self._greedy(batch, out)
        if (~batch.greedy).any():
            self._chain(batch, coins, out)
        return out

    def _greedy(self, batch, out):
        k = batch.num_draft_tokens
        live = batch.greedy.copy()
        t0, d0 = batch.target_row_start, batch.draft_start
        for i in range(batch.max_spec_len):
            r = np.flatnonzero(live & (i < k))
            if r.size == 0:
                continue
            a = self.argmax(batch.target_probs[t0[r] + i])
            out[r, i] = a
            live[r[batch.draft_token_ids[d0[r] + i] != a]] = False
        r = np.flatnonzero(live)
        out[r, k[r]] = self.argmax(batch.target_probs[t0[r] + k[r]])

    def _chain(self, batch, coins, out):
        k = batch.num_draft_tokens
        vocab = batch.vocab_size
        t0, d0 = batch.target_row_start, batch.draft_start
        live = ~batch.greedy                       # still verifying
        pos = np.zeros(batch.batch_size, np.int64)   # next output slot
        tail = np.zeros(batch.batch_size, bool)      # keep_tail: already rejected once
        for i in range(batch.max_spec_len):
            r = np.flatnonzero(live & (i < k))
            if r.size == 0:
                continue
            di = d0[r] + i
            x = batch.draft_token_ids[di]
            p = batch.target_probs[t0[r] + i]
            q = onehot(x, vocab) if batch.draft_probs is None else batch.draft_probs[di]
            padded = self.is_padded(x)
            acc = ~padded & self.accept_rows(p, q, x, coins.accept[di])
            out[r[acc], pos[r[acc]]] = x[acc]
            pos[r[acc]] += 1
            rej = ~acc
            rr = r[rej]
            w = np.where(padded[rej][:, None], p[rej], self.residual(p[rej], q[rej]))
            out[rr, pos[rr]] = self.draw_residual(w, self.residual_coin(coins.accept[di][rej], coins.final[rr]))
            pos[rr] += 1
            if self.keep_tail:
                stop = rr[tail[rr]]               # a second rejection ends the step
                tail[rr] = True
                live[stop] = False
            else:
                live[rr] = False
        r = np.flatnonzero(live)
        out[r, pos[r]] = self.draw(batch.target_probs[self.bonus_rows(batch)[r]], coins.final[r])

    # ------------------------------------------------------------------ seeded

    def seeded_coins(self, batch: VerifyBatch, seeds) -> Coins:
        """Coins of one seeded call: request b takes k_b acceptance coins then its final coin from
        its own stream (greedy requests take nothing)."""
        k = batch.num_draft_tokens
        counts = np.where(batch.greedy, 0, k + 1)
        u = self.streams.take(seeds, counts)
        last = np.cumsum(counts) - 1                       # each request's final coin in u
        final = np.where(counts > 0, u[np.maximum(last, 0)] if u.size else 0.0, 0.0)
        accept = np.zeros(int(k.sum()))
        random = np.repeat(~batch.greedy, k)                # accept slots of non-greedy requests
        is_final = np.zeros(u.size, bool)
        is_final[last[counts > 0]] = True
        accept[random] = u[~is_final]
        return Coins(accept, final)

    def verify_seeded(self, batch: VerifyBatch, seeds) -> np.ndarray:
        return self.verify(batch, self.seeded_coins(batch, seeds))

    # ------------------------------------------------------------------ trees

    def verify_trees(self, batch: TreeBatch, coins: TreeCoins) -> np.ndarray:
        """Recursive rejection (`reference.tree`) for every request of a TreeBatch at once."""
        n, vocab = batch.batch_size, batch.vocab_size
        kids = {u: batch.children(u) for u in range(-1, batch.num_nodes)}
        out = np.full((n, batch.depth + 1), PAD, np.int64)
        node = np.full(n, PAD, np.int64)
        done = np.zeros(n, bool)
        r_row = batch.target_probs[:, 0, :].copy()            # current row r of each request
        for depth in range(batch.depth + 1):
            for u in np.unique(node[~done]):
                sel = np.flatnonzero(~done & (node == u))
                row = u + 1
                if kids[u].size == 0:                           # a leaf: bonus from its own row
                    out[sel, depth] = self.draw(batch.target_probs[sel, row], coins.final[sel])
                    done[sel] = True
                    continue
                undecided = sel
                for c in kids[u]:
                    if undecided.size == 0:
                        break
                    x = batch.tokens[undecided, c]
                    r = r_row[undecided]
                    q = onehot(x, vocab) if batch.draft_probs is None else batch.draft_probs[undecided, row]
                    acc = self.accept_rows(r, q, x, coins.accept[undecided, c])
                    a = undecided[acc]
                    out[a, depth] = x[acc]
                    node[a] = c
                    r_row[a] = batch.target_probs[a, c + 1]
                    rej = ~acc
                    w = self.residual(r[rej], q[rej])
                    z = np.cumsum(w, axis=1)[:, -1]
                    moved = (np.maximum(r[rej] - q[rej], 0.0) > 0).any(axis=1)   # reference: r unchanged if Z == 0
                    r_row[undecided[rej]] = np.where(moved[:, None], w / z[:, None], r[rej])
                    undecided = undecided[rej]
                out[undecided, depth] = self.draw_residual(r_row[undecided], coins.final[undecided])
                done[undecided] = True
        return out
