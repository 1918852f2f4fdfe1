"""Block verification (Sun et al., arXiv 2403.10444, Algorithm 2): the draft block is verified
jointly. Exact like the chain rule, and its expected accepted length is never smaller.

One request, kappa drafts, target rows P_0..P_kappa, draft rows Q_0..Q_{kappa-1} (one-hot at the
draft when deterministic; an all-zero row at a padded position, whose weight then drops to 0):

    w_0 = 1; tau = 0
    for i in 1..kappa:
        x = drafts[i-1]
        w_i = min(w_{i-1} * P_{i-1}[x] / Q_{i-1}[x], 1)          (0 at a padded position)
        if i < kappa:
            Z_i = sum_v max(w_i * P_i[v] - Q_i[v], 0)             (sequential sum)
            h_i = Z_i / (Z_i + (1 - w_i))                         (1 when the denominator is 0)
        else:
            h_i = w_i
        if accept_coins[i-1] < h_i:  tau = i                      (the last i that passes wins)
    emit drafts[:tau]
    if tau == kappa:  emit draw(P_kappa, final_coin)              (bonus)
    else:             emit draw(max(w_tau * P_tau - Q_tau, 0), final_coin)
                      (an all-zero residual falls back to P_tau, as in `sampling.residual`)

As with the chain rule, the token at position i, given the emitted prefix and that the step reached
position i, is distributed as p(. | prefix); what block verification changes is the law of the
accepted length (never smaller in expectation), not the law of the tokens.
"""

from __future__ import annotations

import numpy as np

from .chain import _check_drafted, _validated
from .sampling import draw
from .batch import PAD


def _q_row(draft, drafts, i: int, vocab: int) -> np.ndarray:
    if draft is not None:
        return draft[i]
    q = np.zeros(vocab)
    if drafts[i] != PAD:
        q[int(drafts[i])] = 1.0
    return q


def block_rule(drafts, target, draft, coins, final) -> np.ndarray:
    """Block verification of one request (arguments validated as in `chain.verify_batch`)."""
    kappa = len(drafts)
    vocab = target.shape[1]
    w = 1.0
    tau, w_tau = 0, 1.0
    for i in range(1, kappa + 1):
        x = int(drafts[i - 1])
        if x == PAD:
            w = 0.0
        else:
            q = None if draft is None else draft[i - 1]
            _check_drafted(q, x, i - 1)
            qx = 1.0 if q is None else q[x]
            with np.errstate(over="ignore"):     # p/q overflowing to inf is clamped to 1
                w = min(w * target[i - 1][x] / qx, 1.0)
        if i < kappa:
            z = float(np.cumsum(np.maximum(w * target[i] - _q_row(draft, drafts, i, vocab), 0.0))[-1])
            den = z + (1.0 - w)
            h = z / den if den > 0 else 1.0
        else:
            h = w
        if coins[i - 1] < h:
            tau, w_tau = i, w
    out = [int(t) for t in drafts[:tau]]
    if tau == kappa:
        out.append(draw(target[kappa], final))
    else:
        res = np.maximum(w_tau * target[tau] - _q_row(draft, drafts, tau, vocab), 0.0)
        if not (res > 0).any():
            res = target[tau].copy()
        out.append(draw(res, final))
    return np.array(out, np.int64)


def block_verify(draft_token_ids, target_probs, draft_probs=None, accept_coins=None, final_coin=None) -> np.ndarray:
    """Block-verify one request; validated entry point mirroring `chain.chain_verify`."""
    drafts, target, draft, coins, final = _validated(draft_token_ids, target_probs, draft_probs, accept_coins, final_coin)
    return block_rule(drafts, target, draft, coins, final)
