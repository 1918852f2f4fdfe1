"""The engine's rejection sampler: transforms, then the exact chain rule, one request at a time.

Rules (bit for bit those of `specverify.reference.sampling`/`.chain`/`.transforms`; this is an
independent implementation, tested against the reference on random rows and coins):

    transform   logits -> float64; / temperature; top-k keeps logits >= the k-th largest; softmax
                exp(l - max) / sequential sum; top-p keeps the shortest stable-sorted prefix whose
                sequential cumulative sum reaches P, renormalised by a sequential sum
    accept      coin * q[x] < p[x]            (q[x] = 1 for a deterministic draft: n-gram, greedy)
    residual    max(0, p - q), or p with p[x] = 0 for a deterministic draft; p if all zero
    padding     a draft id of -1 (never produced by the engine's proposers) is rejected and the
                token drawn from p itself
    draw        C = cumsum(w); t = coin * C[-1]; token = #{k: C[k] <= t}; past the end -> last w > 0
    greedy      temperature 0: accept while draft == argmax (lowest index on ties); emit the argmax

Randomness, per request and per step, from the request's own generator: one acceptance coin per
draft position, then one final coin (recovered or bonus token). A step with 0 drafts -- plain
decode -- draws exactly one coin; a greedy request draws none.
"""

from __future__ import annotations

import numpy as np
import torch

from specverify.errors import InputError

from .processors import min_p_filter


def transform_probs(logits, temperature: float, top_k: int = 0, top_p: float = 1.0) -> np.ndarray:
    """Probabilities float64 [R, V] from logits [R, V] (torch or numpy); temperature > 0."""
    if isinstance(logits, torch.Tensor):
        logits = logits.detach().to(torch.float64).numpy()
    a = np.array(logits, dtype=np.float64, ndmin=2)
    if temperature != 1.0:
        a = a / temperature
    V = a.shape[1]
    if top_k and top_k < V:
        kth = np.partition(a, V - top_k, axis=1)[:, V - top_k:V - top_k + 1]   # k-th largest
        a = np.where(a >= kth, a, -np.inf)
    e = np.exp(a - a.max(axis=1, keepdims=True))
    p = e / np.cumsum(e, axis=1)[:, -1:]
    if top_p < 1.0:
        order = np.argsort(-p, axis=1, kind="stable")
        sp = np.take_along_axis(p, order, axis=1)
        keep_sorted = np.ones(sp.shape, dtype=bool)
        keep_sorted[:, 1:] = np.cumsum(sp, axis=1)[:, :-1] < top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=1)
        p = np.where(keep, p, 0.0)
        p = p / np.cumsum(p, axis=1)[:, -1:]
    return p


def draw(weights: np.ndarray, coin: float) -> int:
    cdf = np.cumsum(weights)
    token = int(np.count_nonzero(cdf <= coin * cdf[-1]))
    if token == cdf.shape[0]:
        token = int(np.flatnonzero(weights > 0)[-1])
    return token


def residual(p: np.ndarray, q: np.ndarray | None, x: int) -> np.ndarray:
    if q is None:
        w = p.copy()
        w[x] = 0.0
    else:
        w = np.maximum(p - q, 0.0)
    return w if (w > 0).any() else p.copy()


def greedy_verify(logits_rows: torch.Tensor, drafts) -> tuple[list, int]:
    """Greedy rule on raw logits [k+1, V]: (emitted tokens, accepted draft count)."""
    argmax = torch.argmax(logits_rows, dim=-1).tolist()      # lowest index among ties
    out = []
    for i, x in enumerate(drafts):
        out.append(argmax[i])
        if x != argmax[i]:
            return out, i
    out.append(argmax[len(drafts)])
    return out, len(drafts)


def chain_verify(p_rows: np.ndarray, drafts, q_rows: np.ndarray | None, accept_coins, final_coin) -> tuple[list, int]:
    """Chain rule on probabilities p [k+1, V], q [k, V] or None: (emitted tokens, accepted count)."""
    out = []
    for i, x in enumerate(drafts):
        p = p_rows[i]
        if x < 0:                      # a padded draft proposes nothing: emit from p itself
            out.append(draw(p, final_coin))
            return out, i
        q = None if q_rows is None else q_rows[i]
        qx = 1.0 if q is None else q[x]
        if accept_coins[i] * qx < p[x]:
            out.append(x)
            continue
        out.append(draw(residual(p, q, x), final_coin))
        return out, i
    out.append(draw(p_rows[len(drafts)], final_coin))
    return out, len(drafts)


def check_finite(logits_rows) -> None:
    """InputError unless every row [R, V] is usable: each row's max is NaN if the row holds a NaN, +inf
    if it holds +inf, -inf if every entry is -inf (-inf alone is a masked token): one pass over the rows."""
    if not bool(torch.isfinite(logits_rows.amax(dim=-1)).all()):
        raise InputError("the model produced NaN, +inf or all -inf logits: its weights or its inputs are broken")


def probs_of(logits_rows, params) -> np.ndarray:
    """The probabilities [R, V] of one request's logits rows under its transform and min_p."""
    return min_p_filter(transform_probs(logits_rows, params.temperature, params.top_k, params.top_p),
                        getattr(params, "min_p", 0.0))


def probs_many(rows_list: list, params_list: list) -> list:
    """probs_of for many requests, in one call per distinct (temperature, top_k, top_p, min_p): every
    step of the transform is row-wise (a division, max, exp, sequential sums along the row, partition,
    a stable argsort per row), so a row's probabilities are bit for bit those of one call per request,
    whatever rows it is stacked with."""
    groups: dict = {}
    for i, params in enumerate(params_list):
        key = (params.temperature, params.top_k, params.top_p, getattr(params, "min_p", 0.0))
        groups.setdefault(key, []).append(i)
    out = [None] * len(rows_list)
    for idx in groups.values():
        rows = [rows_list[i] for i in idx]
        stacked = probs_of(torch.cat(rows) if isinstance(rows[0], torch.Tensor) else np.concatenate(rows),
                           params_list[idx[0]])
        start = 0
        for i, r in zip(idx, rows):
            out[i] = stacked[start:start + r.shape[0]]
            start += r.shape[0]
    return out


def sample_probs(p_rows: np.ndarray, drafts, q_rows, rng) -> tuple[list, int]:
    """The chain rule on one request's transformed rows p [k+1, V], its coins from its generator: one
    acceptance coin per draft, then the final coin."""
    k = len(drafts)
    accept_coins = rng.random(k) if k else ()
    final_coin = rng.random()
    return chain_verify(p_rows, drafts, q_rows, accept_coins, final_coin)


def sample_request(logits_rows, drafts, q_rows, params, rng) -> tuple[list, int]:
    """Verify one request's drafts (0..kappa) against its target logits rows [k+1, V]."""
    check_finite(logits_rows)
    if params.temperature == 0:
        return greedy_verify(logits_rows, drafts)
    return sample_probs(probs_of(logits_rows, params), drafts, q_rows, rng)
