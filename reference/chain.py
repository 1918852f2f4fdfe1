"""The exact chain rule (Leviathan et al. 2211.17192, Chen et al. 2302.01318) and the greedy rule,
as pure functions of explicit randomness. Primitives and their bit-level definition: `sampling`.

Chain, one request with kappa drafts x_0..x_{kappa-1}, target rows p_0..p_kappa, draft rows
q_0..q_{kappa-1} (or none: deterministic draft, q_i one-hot at x_i):

    for i in 0..kappa-1:
        if x_i == PAD (padded):          emit draw(p_i, final_coin); stop   # nothing was proposed
        if accept_coins[i] * q_i[x_i] < p_i[x_i]:  emit x_i; continue
        emit draw(max(0, p_i - q_i), final_coin); stop                    # discard the tail
    emit draw(p_kappa, final_coin)                                         # bonus

Greedy (temperature 0): accept while x_i == argmax p_i (lowest index on ties); at the first mismatch
emit argmax p_i and stop; if all accepted emit argmax p_kappa. No coins are used.
"""

from __future__ import annotations

import numpy as np

from specverify.errors import InputError

from . import validate
from .batch import PAD, Coins, VerifyBatch
from .sampling import accepts, argmax_lowest, draw, residual


def _validated(draft_token_ids, target_probs, draft_probs, accept_coins, final_coin, *, need_coins=True):
    """Validate one request's arguments; return (drafts, target, draft, coins, final)."""
    target = validate.prob_rows(target_probs, "target_probs")
    kappa = target.shape[0] - 1
    vocab = target.shape[1]
    drafts = validate.token_ids(draft_token_ids, "draft_token_ids", vocab, allow_padding=True).reshape(-1)
    if drafts.size != kappa:
        raise InputError(f"draft_token_ids: {drafts.size} drafts need {drafts.size + 1} target rows, got {kappa + 1}")
    draft = None
    if draft_probs is not None:
        draft = validate.prob_rows(draft_probs, "draft_probs", vocab_size=vocab, n_rows=kappa)
    if not need_coins:
        return drafts, target, draft, None, None
    if accept_coins is None or final_coin is None:
        raise InputError("a non-greedy verify needs accept_coins and final_coin")
    coins = validate.coins(accept_coins, "accept_coins", kappa)
    final = float(validate.coins([final_coin], "final_coin", 1)[0])
    return drafts, target, draft, coins, final


def chain_verify(draft_token_ids, target_probs, draft_probs=None, accept_coins=None, final_coin=None,
                 *, greedy: bool = False) -> np.ndarray:
    """Verify one request's drafts; return the emitted token ids (1 to kappa+1 of them)."""
    drafts, target, draft, coins, final = _validated(
        draft_token_ids, target_probs, draft_probs, accept_coins, final_coin, need_coins=not greedy)
    if greedy:
        return greedy_rule(drafts, target)
    return chain_rule(drafts, target, draft, coins, final)


def _check_drafted(q_row, x: int, i: int) -> None:
    if q_row is not None and not q_row[x] > 0:
        raise InputError(f"draft_token_ids: token {x} at position {i} was drafted but its draft probability is 0")


def chain_rule(drafts, target, draft, coins, final) -> np.ndarray:
    out = []
    for i, x in enumerate(drafts):
        x = int(x)
        p = target[i]
        if x == PAD:
            out.append(draw(p, final))
            return np.array(out, np.int64)
        q = None if draft is None else draft[i]
        _check_drafted(q, x, i)
        if accepts(p, q, x, coins[i]):
            out.append(x)
            continue
        out.append(draw(residual(p, q, x), final))
        return np.array(out, np.int64)
    out.append(draw(target[-1], final))
    return np.array(out, np.int64)


def greedy_rule(drafts, target) -> np.ndarray:
    out = []
    for i, x in enumerate(drafts):
        a = argmax_lowest(target[i])
        out.append(a)
        if int(x) != a:
            return np.array(out, np.int64)
    out.append(argmax_lowest(target[-1]))
    return np.array(out, np.int64)


def verify_batch(batch: VerifyBatch, coins: Coins | None = None, *, rule=None) -> np.ndarray:
    """Verify a ragged batch request by request; return int64 [B, max_spec_len + 1], -1 padded.

    `rule(drafts, target_rows, draft_rows, accept_coins, final_coin)` replaces the chain rule for
    non-greedy requests (block verification and the lossy rules share this batch walker)."""
    rule = chain_rule if rule is None else rule
    if coins is None and not batch.greedy.all():
        raise InputError("a batch with non-greedy requests needs coins")
    if coins is not None:
        coins.check_for(batch)
    out = np.full((batch.batch_size, batch.max_spec_len + 1), PAD, np.int64)
    starts = batch.draft_start
    for b in range(batch.batch_size):
        drafts, target, draft, greedy = batch.request(b)
        if greedy:
            tokens = greedy_rule(drafts, target)
        else:
            s, k = int(starts[b]), drafts.size
            tokens = rule(drafts, target, draft, coins.accept[s:s + k], float(coins.final[b]))
        out[b, :tokens.size] = tokens
    return out
