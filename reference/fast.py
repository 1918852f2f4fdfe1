"""The reference rules compiled with numba, for sampling millions of verify steps.

Bit for bit the same rules as `sampling`, `chain` and `block` (same float64 operations in the same
order; tests compare them token for token under the same coins). Two layouts:

- one-step problems, `sample_one_step`: the same rows for all N samples (a `FixedRows` problem);
  drafts are drawn here from the draft rows by the inverse-CDF draw with their own coins.
- ragged batches, `verify_batch`: the `VerifyBatch` layout of `reference.batch`, rows per request.

Randomness comes from a seeded numpy Generator in fixed-size chunks, so a (seed, n) pair gives the
same samples whatever the chunking of the numba threads. A rule is named as registered in
`reference.rules`; its `code` selects its branch in the kernels.
"""

from __future__ import annotations

import numba
import numpy as np

from specverify.errors import InputError

from . import rules
from .batch import PAD, Coins, VerifyBatch
from .sampling import residual

# the kernels' rule kinds
CHAIN, GREEDY, BLOCK, THRESHOLD, TYPICAL = (rules.CHAIN.code, rules.GREEDY.code, rules.BLOCK.code,
                                            rules.THRESHOLD.code, rules.TYPICAL.code)
CHUNK = 1 << 18  # samples per generator call


@numba.njit(cache=True, inline="always")
def _draw(w, coin):
    # inverse CDF: count of cumulative sums <= coin * total; clamp to the last positive weight
    n = w.shape[0]
    total = 0.0
    for k in range(n):
        total += w[k]
    t = coin * total
    c = 0.0
    token = 0
    for k in range(n):
        c += w[k]
        if c <= t:
            token += 1
    if token == n:
        for k in range(n - 1, -1, -1):
            if w[k] > 0:
                return k
        return n - 1        # no positive weight (not a distribution): still an id < V, never V
    return token


@numba.njit(cache=True, inline="always")
def _res_weight(p, q, det, x, w_scale, k):
    # the residual weight of token k: max(0, w_scale * p - q), q one-hot at x when det
    if det:
        qk = 1.0 if k == x else 0.0
    else:
        qk = q[k]
    v = w_scale * p[k] - qk
    return v if v > 0.0 else 0.0


@numba.njit(cache=True)
def _residual_draw(p, q, det, x, w_scale, coin):
    # _draw over the residual weights, computed on the fly (no scratch buffer); all-zero -> p
    n = p.shape[0]
    total = 0.0
    for k in range(n):
        total += _res_weight(p, q, det, x, w_scale, k)
    if not total > 0:
        return _draw(p, coin)
    t = coin * total
    c = 0.0
    token = 0
    for k in range(n):
        c += _res_weight(p, q, det, x, w_scale, k)
        if c <= t:
            token += 1
    if token == n:
        for k in range(n - 1, -1, -1):
            if _res_weight(p, q, det, x, w_scale, k) > 0:
                return k
    return token


@numba.njit(cache=True)
def _argmax(row):
    best = 0
    for k in range(1, row.shape[0]):
        if row[k] > row[best]:
            best = k
    return best


@numba.njit(cache=True)
def _typical_cutoff(p, epsilon, delta):
    h = 0.0
    for k in range(p.shape[0]):
        if p[k] > 0:
            h -= p[k] * np.log(p[k])
    return min(epsilon, delta * np.exp(-h))


@numba.njit(cache=True)
def _chain_one(rule, params, drafts, target, draft, det, acc, final, out):
    # rule CHAIN (exact), THRESHOLD (params: threshold_single, threshold_acc) or TYPICAL
    # (params: epsilon, delta; lossy, see reference.lossy)
    kappa = drafts.shape[0]
    for i in range(kappa):
        x = drafts[i]
        p = target[i]
        if x == PAD:
            out[i] = _draw(p, final)
            return i + 1
        qx = 1.0 if det else draft[i, x]
        if rule == TYPICAL:
            if p[x] > _typical_cutoff(p, params[0], params[1]):
                out[i] = x
                continue
            out[i] = _draw(p, final)
            return i + 1
        if rule == THRESHOLD:
            if p[x] >= params[0] or acc[i] * qx * params[1] < p[x]:
                out[i] = x
                continue
        elif acc[i] * qx < p[x]:
            out[i] = x
            continue
        out[i] = _residual_draw(p, draft[i] if not det else p, det, x, 1.0, final)
        return i + 1
    out[kappa] = _draw(target[kappa], final)
    return kappa + 1


@numba.njit(cache=True)
def _greedy_one(drafts, target, out):
    kappa = drafts.shape[0]
    for i in range(kappa):
        a = _argmax(target[i])
        out[i] = a
        if drafts[i] != a:
            return i + 1
    out[kappa] = _argmax(target[kappa])
    return kappa + 1


@numba.njit(cache=True)
def _block_one(drafts, target, draft, det, acc, final, out):
    kappa = drafts.shape[0]
    vocab = target.shape[1]
    w = 1.0
    tau = 0
    w_tau = 1.0
    for i in range(1, kappa + 1):
        x = drafts[i - 1]
        if x == PAD:
            w = 0.0
        else:
            qx = 1.0 if det else draft[i - 1, x]
            w = min(w * target[i - 1, x] / qx, 1.0)
        if i < kappa:
            z = 0.0
            q_row = target[i] if det else draft[i]
            for v in range(vocab):
                z += _res_weight(target[i], q_row, det, drafts[i], w, v)
            den = z + (1.0 - w)
            h = z / den if den > 0 else 1.0
        else:
            h = w
        if acc[i - 1] < h:
            tau = i
            w_tau = w
    for i in range(tau):
        out[i] = drafts[i]
    if tau == kappa:
        out[kappa] = _draw(target[kappa], final)
        return kappa + 1
    q_row = target[tau] if det else draft[tau]
    out[tau] = _residual_draw(target[tau], q_row, det, drafts[tau], w_tau, final)
    return tau + 1


@numba.njit(cache=True)
def _one(rule, params, drafts, target, draft, det, acc, final, out):
    if rule == GREEDY:
        return _greedy_one(drafts, target, out)
    if rule == BLOCK:
        return _block_one(drafts, target, draft, det, acc, final, out)
    return _chain_one(rule, params, drafts, target, draft, det, acc, final, out)


@numba.njit(cache=True, inline="always")
def _draw_cdf(cdf, last_pos, coin):
    # _draw from a precomputed sequential cumsum (cdf[-1] is the same sequential total)
    n = cdf.shape[0]
    t = coin * cdf[n - 1]
    token = 0
    for k in range(n):
        if cdf[k] <= t:
            token += 1
    return last_pos if token == n else token


def _chain_tables(target, draft, det):
    """CDFs of every draw the exact chain rule can make on a one-step problem, computed exactly as
    `_residual_draw` / `_draw` would (sequential sums): residual[i, x] (x = the drafted token; the
    residual does not depend on x for a stochastic draft), bonus row, and each row's last positive
    token."""
    kappa, vocab = target.shape[0] - 1, target.shape[1]
    res_cdf = np.empty((kappa, vocab, vocab))
    res_last = np.empty((kappa, vocab), np.int64)
    for i in range(kappa):
        for x in range(vocab):
            w = residual(target[i], None if det else draft[i], x)
            res_cdf[i, x] = np.cumsum(w)
            res_last[i, x] = np.flatnonzero(w > 0)[-1]
    bonus_cdf = np.cumsum(target[kappa])
    bonus_last = int(np.flatnonzero(target[kappa] > 0)[-1])
    return res_cdf, res_last, bonus_cdf, bonus_last


@numba.njit(cache=True)
def _chain_tabled(drafts, target, draft, det, acc, final, out, res_cdf, res_last, bonus_cdf, bonus_last):
    kappa = drafts.shape[0]
    for i in range(kappa):
        x = drafts[i]
        qx = 1.0 if det else draft[i, x]
        if acc[i] * qx < target[i, x]:
            out[i] = x
            continue
        out[i] = _draw_cdf(res_cdf[i, x], res_last[i, x], final)
        return i + 1
    out[kappa] = _draw_cdf(bonus_cdf, bonus_last, final)
    return kappa + 1


@numba.njit(cache=True, parallel=True)
def _problem_kernel(rule, params, target, draft, det, draft_cdf, draft_last, draft_coins, drafts, acc, final, out,
                    res_cdf, res_last, bonus_cdf, bonus_last):
    # one-step problem: shared rows; drafts drawn from the draft rows (or their argmax if det)
    n = out.shape[0]
    kappa = target.shape[0] - 1
    for s in numba.prange(n):
        for i in range(kappa):
            if det:
                drafts[s, i] = _argmax(draft[i])
            else:
                drafts[s, i] = _draw_cdf(draft_cdf[i], draft_last[i], draft_coins[s, i])
        if rule == CHAIN:
            _chain_tabled(drafts[s], target, draft, det, acc[s], final[s], out[s], res_cdf, res_last, bonus_cdf, bonus_last)
        else:
            _one(rule, params, drafts[s], target, draft, det, acc[s], final[s], out[s])


@numba.njit(cache=True, parallel=True)
def _batch_kernel(rule_per_req, params, drafts, num, draft_start, target, draft, det, acc, final, out):
    for b in numba.prange(num.shape[0]):
        k = num[b]
        d0 = draft_start[b]
        t0 = d0 + b
        d_rows = draft[d0:d0 + k] if not det else target[t0:t0 + k + 1]
        _one(rule_per_req[b], params, drafts[d0:d0 + k], target[t0:t0 + k + 1], d_rows, det,
             acc[d0:d0 + k], final[b], out[b])


def _code(rule: str) -> int:
    """The kernels' kind of the registered rule named `rule`."""
    code = rules.RULES[rule].code
    if code is None:
        raise InputError(f"rule {rule!r} has no compiled code")
    return code


def sample_one_step(target_rows, draft_rows=None, n: int = 100_000, seed: int = 0, rule: str = "chain",
                    deterministic: bool = False, params=(1.0, 1.0)) -> np.ndarray:
    """N verify steps of a one-step problem; returns int64 [n, kappa + 1], -1 padded.

    Draft tokens are drawn from `draft_rows` (inverse-CDF draw with their own coins) unless
    `deterministic`, where the draft proposes each row's argmax (q one-hot)."""
    target = np.ascontiguousarray(target_rows, np.float64)
    kappa = target.shape[0] - 1
    det = deterministic or draft_rows is None
    draft = np.ascontiguousarray(draft_rows if draft_rows is not None else target[:kappa], np.float64)
    cdf = np.cumsum(draft, axis=1)
    last = np.array([np.flatnonzero(row > 0)[-1] for row in draft], np.int64)
    tables = _chain_tables(target, draft, det)
    rng = np.random.default_rng(seed)
    out = np.full((n, kappa + 1), PAD, np.int64)
    drafts = np.empty((min(n, CHUNK), kappa), np.int64)
    for s in range(0, n, CHUNK):
        m = min(CHUNK, n - s)
        draft_coins = rng.random((m, kappa))
        acc = rng.random((m, kappa))
        final = rng.random(m)
        _problem_kernel(_code(rule), np.asarray(params, np.float64), target, draft, det, cdf, last, draft_coins,
                        drafts[:m], acc, final, out[s:s + m], *tables)
    return out


def verify_batch(batch: VerifyBatch, coins: Coins | None = None, rule: str = "chain", params=(1.0, 1.0)) -> np.ndarray:
    """Same contract as `reference.chain.verify_batch`, compiled. `rule`: a registered rule with compiled
    code: "chain" or "block" (exact), "threshold" (params = threshold_single, threshold_acc) or
    "typical" (params = epsilon, delta)."""
    if coins is None:
        if not batch.greedy.all():
            raise InputError("a batch with non-greedy requests needs coins")
        coins = Coins(np.zeros(int(batch.num_draft_tokens.sum())), np.zeros(batch.batch_size))
    coins.check_for(batch)
    det = batch.draft_probs is None
    draft = batch.draft_probs if not det else np.zeros((0, batch.vocab_size))
    kinds = np.where(batch.greedy, GREEDY, _code(rule)).astype(np.int64)
    out = np.full((batch.batch_size, batch.max_spec_len + 1), PAD, np.int64)
    _batch_kernel(kinds, np.asarray(params, np.float64), batch.draft_token_ids, batch.num_draft_tokens, batch.draft_start,
                  batch.target_probs, draft, det, coins.accept, coins.final, out)
    return out
