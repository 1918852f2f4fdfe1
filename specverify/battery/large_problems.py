"""Verify problems at real vocabulary sizes, and the batch sizes that keep them within memory.

Every problem in `problems` has V <= 8: no vocabulary tiles, no tails. Real engines run V = 32k-262k
and tile the vocabulary in their kernels (vLLM's recovered-token kernel: tiles of 8192), so the bugs
of that scale (an id >= V from an all-zero last partial tile, a far tail never drawn because of
float32 noise or cumulative sums) need problems of that size. Each problem here is one step with
kappa = 1 (target rows p_0 at the draft position and p_1 for the bonus, draft row q_0) or kappa = 0
(the bonus draw alone), its exact per-position law known in closed form -- no enumeration over V:

    sparse         p_0 and q_0 supported on tens of ids at tile edges (multiples of 1024, 4096, 8192
                   and +-1, 0 and V - 1), the supports partially overlapping so that the residual
                   max(0, p_0 - q_0) lands on p-only ids; for V > 8192 not a multiple of 8192 the last
                   partial tile [8192 * floor(V / 8192), V) is all zero in p_0 and p_1 while q_0 puts
                   mass there (V - 1 included): those drafts are always rejected.
                   Law: position 0 ~ p_0, position 1 (reached when the draft is accepted) ~ p_1.
    zero-residual  q_0 on tens of edge ids; p_0 = q_0 except at the drafted id x, where p_0(x) =
                   q_0(x) / 2 (q_0(x) = 1e-6, so p_0 sums to 1 - 5e-7, within the protocol's 1e-6):
                   the residual is all zero, yet the draft is rejected with probability exactly 1/2
                   (coin < 1/2 accepts), and the recovered token is drawn from p_0 itself.
                   Law: position 0 ~ (delta_x + p_0 / sum p_0) / 2, position 1 ~ p_1.
    dense          p_0, p_1 and q_0 softmaxes of real-looking logits (a Zipf-like slope plus Gumbel
                   noise, temperature 1): every entry > 0. Law: position 0 ~ p_0, position 1 ~ p_1.
    far-tail       kappa = 0, V = 262,144: HEAD_TOKENS head ids (0..7) share 1 - m, the other 262,136
                   ids each have probability TAIL_PROB = 1.2e-8 (m = 3.15e-3; log-gap ~16.2 between a
                   head token and a tail token). Law: the bonus token ~ p_0; the tail-hit rate is m.

Memory and time (`requests_per_batch`, `samples_for`): a verify batch holds at most BATCH_BYTES of
rows (64 MiB: 32 rows at V = 262,144), so that with the audit's copy, the adapter process's copy and
an adapter's temporaries an audit stays within MEMORY_BUDGET (2 GB resident; measured 1.45-1.5 GB for a
default `specverify audit reference`, 1.25-1.4 GB without these rows). A problem passes at most
PROBLEM_BYTES of rows through the adapter in all (samples = bytes / (rows per request * V * 8), at
most MAX_SAMPLES; DENSE_BYTES for a dense problem, SECOND_BYTES for a second rule on the same
problems), which bounds its time: the audit moves and the reference verifies ~1 GB of rows a second on
these cores. Identical rows are built once per batch size and reused (only draft ids and coins change).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

VOCABS = (1000, 8191, 8192, 8193, 32000, 50257, 128256, 151936, 262144)
TILE = 8192                         # vLLM's recovered-token tile
EDGE_TILES = (1024, 4096, 8192)     # tile sizes whose edges the sparse supports sit on
SMALL_TILE = 128                    # and, for V <= 2048 (too few edges of the above), multiples of 128
DENSE_VOCABS = (32000, 151936)
FAR_TAIL_VOCAB = 262144
HEAD_TOKENS = 8
TAIL_PROB = 1.2e-8
ZERO_RESIDUAL_Q = 1e-6              # q_0 at the drafted id of the zero-residual problem

MEMORY_BUDGET = 2 * 10**9           # bytes resident, the stated ceiling of a default audit
BATCH_BYTES = 64 << 20              # rows of one verify batch
PROBLEM_BYTES = 256 << 20           # rows one problem passes through the adapter in all (first rule)
DENSE_BYTES = 512 << 20             # the same for a dense problem (pooled cells need more samples)
SECOND_BYTES = 64 << 20             # the same for a second rule's pass over the same problems
MAX_SAMPLES = 20_000
FAR_TAIL_SAMPLES = 6400             # 200 batches of 32 rows: expected tail hits n * m = 20.1
MIN_SCALED = 8                      # the fewest samples a scaled-down problem gets (`scaled`)


@dataclass(frozen=True, eq=False)
class LargeProblem:
    """One verify step at vocabulary size V with closed-form per-position laws.

    target [kappa + 1, V], draft [kappa, V] (float64 rows); `drafted` the fixed draft id (None: drafts
    are drawn from q_0 restricted to its support); `laws[i]` the exact law [V] of the token emitted at
    position i among the steps that reach it."""

    name: str
    target: np.ndarray
    draft: np.ndarray
    laws: tuple
    drafted: int | None = None

    @property
    def vocab_size(self) -> int:
        return self.target.shape[1]

    @property
    def kappa(self) -> int:
        return self.target.shape[0] - 1

    @property
    def rows_per_request(self) -> int:
        return 2 * self.kappa + 1

    def sample_drafts(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draft ids [n, kappa]: the fixed id, or i.i.d. from q_0 (drawn on its support)."""
        if self.kappa == 0:
            return np.zeros((n, 0), np.int64)
        if self.drafted is not None:
            return np.full((n, 1), self.drafted, np.int64)
        q = self.draft[0]
        support = np.flatnonzero(q > 0)
        return rng.choice(support, size=(n, 1), p=q[support] / q[support].sum()).astype(np.int64)


# ------------------------------------------------------------------------------------------ sizing

def requests_per_batch(problem: LargeProblem) -> int:
    """Requests of one verify batch: at most BATCH_BYTES of float64 rows."""
    return max(1, BATCH_BYTES // (problem.rows_per_request * problem.vocab_size * 8))


def samples_for(problem: LargeProblem, budget: int = PROBLEM_BYTES, cap: int = MAX_SAMPLES) -> int:
    """Samples of one problem: at most `budget` bytes of rows in all, at most `cap`."""
    return int(min(cap, budget // (problem.rows_per_request * problem.vocab_size * 8)))


def not_run(name: str, vocab: int, limit: int) -> "CheckResult":
    """The SKIP row of a problem above an audit's `large_max_vocab`: listed under `not_covered`."""
    from .base import SKIP, CheckResult
    return CheckResult(name, SKIP, detail=f"not run: V = {vocab} is above this audit's large_max_vocab {limit}",
                       data={"not_covered": [name]})


def too_large(vocab: int, ctx) -> bool:
    """Whether a problem at V = vocab is above the audit's `large_max_vocab` (None: no limit)."""
    return ctx.large_max_vocab is not None and vocab > ctx.large_max_vocab


def scaled(samples: int, scale: float) -> int:
    """A sample size times an audit's `large_scale` (an engine that cannot afford the default sizes,
    such as a Triton kernel under the interpreter), never below MIN_SCALED (the exact rows still see
    every problem); scale 1 gives `samples` unchanged."""
    if scale >= 1.0:
        return int(samples)
    return int(min(samples, max(MIN_SCALED, round(samples * scale))))


# ------------------------------------------------------------------------------------------ supports

def zero_tail_start(vocab: int) -> int:
    """The first id of the all-zero last partial tile (V when there is none: V <= TILE or a multiple)."""
    if vocab > TILE and vocab % TILE:
        return (vocab // TILE) * TILE
    return vocab


def edge_ids(vocab: int, lo: int = 0, hi: int | None = None) -> np.ndarray:
    """Every id in [lo, hi) at a tile edge: multiples of 1024, 4096, 8192 (and of 128 for V <= 2048)
    and +-1, and 0 and V - 1."""
    hi = vocab if hi is None else hi
    ids = {0, vocab - 1}
    for t in EDGE_TILES + ((SMALL_TILE,) if vocab <= 2048 else ()):
        for m in range(t, vocab + 1, t):
            ids.update((m - 1, m, m + 1))
    return np.array(sorted(i for i in ids if lo <= i < hi), np.int64)


def _pick(rng, ids: np.ndarray, k: int, must=()) -> np.ndarray:
    must = np.array([m for m in must if m in set(ids.tolist())], np.int64)
    rest = np.setdiff1d(ids, must)
    extra = rng.choice(rest, size=min(k - must.size, rest.size), replace=False) if k > must.size else []
    return np.union1d(must, extra).astype(np.int64)


def _row(vocab: int, ids: np.ndarray, weights: np.ndarray) -> np.ndarray:
    row = np.zeros(vocab)
    row[ids] = weights / weights.sum()
    return row


# ------------------------------------------------------------------------------------------ problems

def sparse(rng: np.random.Generator, vocab: int) -> LargeProblem:
    """Tile-edge supports, partially overlapping, an all-zero last partial tile (module docstring)."""
    end = zero_tail_start(vocab)
    inside = edge_ids(vocab, 0, end)
    must = (0, vocab - 1) if end == vocab else (0,)
    p_ids = _pick(rng, inside, 20, must)
    shared = rng.choice(p_ids, size=p_ids.size // 2, replace=False)
    q_only = np.setdiff1d(edge_ids(vocab), p_ids)
    q_only = _pick(rng, q_only, 8, (vocab - 1,) + ((end, end + 1) if end < vocab else ()))
    q_ids = np.union1d(shared, q_only)
    p0 = _row(vocab, p_ids, rng.dirichlet(np.full(p_ids.size, 0.8)))
    # q puts 60% of its mass where p is 0, so rejections are frequent and the residual sits on p-only ids
    w = rng.dirichlet(np.full(q_ids.size, 0.8))
    w = np.where(np.isin(q_ids, q_only), 0.6 * w / w[np.isin(q_ids, q_only)].sum(),
                 0.4 * w / w[~np.isin(q_ids, q_only)].sum())
    q0 = _row(vocab, q_ids, w)
    b_ids = _pick(rng, inside, 12, must)
    p1 = _row(vocab, b_ids, rng.dirichlet(np.full(b_ids.size, 0.8)))
    return LargeProblem(f"sparse,V={vocab}", np.vstack([p0, p1]), q0[None], (p0, p1))


def zero_residual(rng: np.random.Generator, vocab: int) -> LargeProblem:
    """max(0, p_0 - q_0) = 0 everywhere, draft rejected with probability 1/2 (module docstring)."""
    end = zero_tail_start(vocab)
    inside = edge_ids(vocab, 0, min(end, vocab - 1))      # V - 1 outside the support: a fallback to it is seen
    ids = _pick(rng, inside, 16, (0,))
    x = int(ids[-1])
    w = rng.dirichlet(np.full(ids.size, 0.8))
    w[-1] = 0.0
    q0 = _row(vocab, ids, w) * (1.0 - ZERO_RESIDUAL_Q)
    q0[x] = ZERO_RESIDUAL_Q
    p0 = q0.copy()
    p0[x] = q0[x] / 2
    b_ids = _pick(rng, inside, 12, (0,))
    p1 = _row(vocab, b_ids, rng.dirichlet(np.full(b_ids.size, 0.8)))
    law0 = 0.5 * p0 / p0.sum()
    law0[x] += 0.5
    return LargeProblem(f"zero-residual,V={vocab}", np.vstack([p0, p1]), q0[None], (law0, p1), drafted=x)


def _softmax_logits(rng, vocab: int, noise: float) -> np.ndarray:
    logits = -1.1 * np.log1p(rng.permutation(vocab)) + noise * rng.gumbel(size=vocab)
    w = np.exp(logits - logits.max())
    return w / w.sum()


def dense(rng: np.random.Generator, vocab: int) -> LargeProblem:
    """Every entry > 0: softmaxes of Zipf-like logits with Gumbel noise; q_0 a perturbed p_0."""
    p0 = _softmax_logits(rng, vocab, 1.0)
    q0 = p0 * np.exp(0.7 * rng.standard_normal(vocab))
    q0 /= q0.sum()
    p1 = _softmax_logits(rng, vocab, 1.0)
    return LargeProblem(f"dense,V={vocab}", np.vstack([p0, p1]), q0[None], (p0, p1))


def far_tail(vocab: int = FAR_TAIL_VOCAB) -> LargeProblem:
    """HEAD_TOKENS head ids first, then V - HEAD_TOKENS tail ids of TAIL_PROB each (kappa = 0)."""
    p = np.full(vocab, TAIL_PROB)
    p[:HEAD_TOKENS] = (1.0 - TAIL_PROB * (vocab - HEAD_TOKENS)) / HEAD_TOKENS
    return LargeProblem(f"far-tail,V={vocab}", p[None], np.zeros((0, vocab)), (p,))


def tail_mass(problem: LargeProblem) -> float:
    """The exact probability that the far-tail problem's bonus token is a tail id."""
    return float(problem.target[0, HEAD_TOKENS:].sum())
