"""Coin endpoints and zero-probability tokens, checked exactly (no statistics).

Every coin of a batch is set to one value: 0.0, the smallest positive double (5e-324), 1 - 2**-53 (the
largest double below 1), 1 - 2**-24 (the largest float32 below 1) -- all inside the protocol's [0, 1)
-- and 1.0, outside it (reported as `warn`, never a failure). The rows are built so that each endpoint
meets its bug class:

    target rows at draft positions  p = [0, .3, .2, .4, .1, 0]   (probability 0 at both ends)
    draft rows                      q = [.4, .1, .1, .1, .1, .2] (mass on both p = 0 tokens)
    residual max(0, p - q)            = [0, .2, .1, .3, 0, 0]     (ends in zeros)
    bonus row                         = [0, .5, .5, 0, 0, 0]

drafts 0 and 5 (p = 0) must be rejected by any coin, 0.0 included (`coin * q < p` is strict; vLLM's
`p / q >= coin` is not); a draw with a coin near 1 must not walk past the last positive weight into the
zeros (SGLang's float32 coins round 1 - 2**-53 up to 1.0). Requests: 1 and 2 drafts over {0, 5, 1, 3},
deterministic drafts (q one-hot), zero-draft requests, padded drafts; the same with draft_probs None.

Rows: `<rule>.zero_prob[coin=...]` -- no emitted token has target probability 0 at its position;
`chain.structure` -- on these batches and on random ones, every row is a run of accepted drafts
followed by one token: at most k + 1 tokens, no -1 between tokens, every token but the last equal to
the draft at its position (catches keeping the tail after a rejection and accepting padded drafts).

`chain.q_precision[...]` -- acceptance must be min(1, p(x) / q(x)) for the q given, at the scales where
precision bites: q(x) in 1e-9 .. 1e-6 with p(x) = r q(x) for r in {0.25, 0.5, 0.9, 0.999, 1} and with
p(x) = 0.3 >> q(x) (`tiny q`); and q(x) a bf16-rounded draft probability (the draft drew in float32,
the verifier is given bf16) with p(x) the unrounded value, so p / q is within 2^-8 of 1 (`bf16 q`).
Each request has one draft and one coin, placed a relative 1e-3 (`tiny q`) or 1e-5 (`bf16 q`) below and
above the threshold min(1, p/q) (and at 0 and 1 - 2^-53): the decision is exact, and only arithmetic
that changes p/q by more than that margin flips it -- q flushed to zero in float16, q clamped to a
floor (`max(q, eps)`), an epsilon added to q, p and q rounded to bf16 by the sampler. An adapter with
`row_dtype = "float32"` is judged on its rows rounded to float32.

Budget (`--samples`): exact rows on fixed batches (every coin endpoint); --samples unused.
"""

from __future__ import annotations

import numpy as np

from specverify.reference import rules
from specverify.reference.batch import PAD, Coins, VerifyBatch
from specverify.reference.tree_batch import TreeBatch, TreeCoins, shape_of

from ..battery import harness
from ..errors import AdapterError
from ..battery.base import FAIL, PASS, WARN, CheckResult, Timer
from ..battery.problems import drafted_request

IN_CONTRACT = {"0.0": 0.0, "5e-324": 5e-324, "1-2^-53": 1.0 - 2.0**-53, "1-2^-24": 1.0 - 2.0**-24}
OUT_OF_CONTRACT = {"1.0": 1.0}

P_DRAFT = np.array([0.0, 0.3, 0.2, 0.4, 0.1, 0.0])
Q_DRAFT = np.array([0.4, 0.1, 0.1, 0.1, 0.1, 0.2])
P_BONUS = np.array([0.0, 0.5, 0.5, 0.0, 0.0, 0.0])
V = P_DRAFT.size


def _onehot(x):
    q = np.zeros(V)
    q[x] = 1.0
    return q


def endpoint_requests(stochastic: bool):
    """(drafts, target rows, draft rows or None, greedy) of every endpoint request."""
    reqs = []
    tokens = (0, 5, 1, 3) if stochastic else (0, 5, 3)
    for k in (1, 2):
        for combo in np.array(np.meshgrid(*[tokens] * k)).T.reshape(-1, k):
            target = np.vstack([P_DRAFT] * k + [P_BONUS])
            reqs.append((combo, target, np.vstack([Q_DRAFT] * k) if stochastic else None, False))
            if stochastic:   # the same drafts as a deterministic draft in a stochastic batch: q one-hot
                reqs.append((combo, target, np.vstack([_onehot(x) for x in combo]), False))
    reqs.append((np.zeros(0, np.int64), P_BONUS[None], np.zeros((0, V)) if stochastic else None, False))
    reqs.append((np.array([1, -1]), np.vstack([P_DRAFT, P_DRAFT, P_BONUS]),
                 np.vstack([Q_DRAFT] * 2) if stochastic else None, False))
    reqs.append((np.array([-1]), np.vstack([P_DRAFT, P_BONUS]), Q_DRAFT[None] if stochastic else None, False))
    return reqs


def endpoint_batches():
    return [VerifyBatch.from_requests(endpoint_requests(True)), VerifyBatch.from_requests(endpoint_requests(False))]


def zero_prob_violations(batch: VerifyBatch, out: np.ndarray) -> list[str]:
    """Emitted tokens of target probability 0 at their position (row target_row_start + position)."""
    found = []
    t0 = batch.target_row_start
    k = batch.num_draft_tokens
    for b in range(batch.batch_size):
        for i, tok in enumerate(out[b]):
            if tok == PAD or i > k[b]:
                continue
            if batch.target_probs[t0[b] + i, tok] <= 0:
                found.append(f"request {b} (drafts {batch.request(b)[0].tolist()}) emitted token {tok} of "
                             f"probability 0 at position {i}")
    return found


def structure_violations(batch: VerifyBatch, out: np.ndarray) -> list[str]:
    """Rows that are not 'accepted drafts, then one token' (see the module docstring)."""
    found = []
    k = batch.num_draft_tokens
    for b in range(batch.batch_size):
        row = out[b]
        drafts = batch.request(b)[0]
        n = int((row != PAD).sum())
        if n == 0:
            found.append(f"request {b} emitted nothing")
        elif (row[:n] == PAD).any():
            found.append(f"request {b} emitted -1 between tokens: {row.tolist()}")
        elif n > k[b] + 1:
            found.append(f"request {b} emitted {n} tokens with {k[b]} drafts")
        elif (row[:n - 1] != drafts[:n - 1]).any() or (drafts[:n - 1] == PAD).any():
            found.append(f"request {b} emitted {row[:n].tolist()} for drafts {drafts.tolist()}: a token before "
                         f"the last is not the accepted draft at its position")
    return found


def random_batch(rng: np.random.Generator, n: int = 400, vocab: int = 6) -> VerifyBatch:
    """A mixed random batch: 0..3 drafts, padded positions, greedy requests, zeros in the rows."""
    reqs = []
    for _ in range(n):
        k = int(rng.integers(0, 4))
        x, p, q = drafted_request(rng, k, vocab, 0.5)
        if k and rng.random() < 0.2:
            x[int(rng.integers(0, k))] = PAD
        reqs.append((x, p, q, bool(rng.random() < 0.2)))
    return VerifyBatch.from_requests(reqs)


def _row(name, bad, n, seconds, warn=False, what=""):
    if not bad:
        return CheckResult(name, PASS, n=n, exact=True, seconds=seconds, detail=f"{n} requests: {what}")
    return CheckResult(name, WARN if warn else FAIL, n=n, exact=True, seconds=seconds,
                       detail=f"{len(bad)} violation(s); first: {bad[0]}" + (" (coin 1.0 is outside [0, 1): reported, not failed)" if warn else ""),
                       data={"violations": bad[:20], "count": len(bad)})


def _zero_prob_row(rule, label, bad, n, seconds):
    """`<rule>.zero_prob[coin=<label>]`; a violation under the out-of-contract coin only warns."""
    out_of_contract = label in OUT_OF_CONTRACT
    return _row(f"{rule}.zero_prob[coin={label}{', out of contract' if out_of_contract else ''}]",
                bad, n, seconds, warn=out_of_contract, what="no token of probability 0 emitted")


def _tree_batch(stochastic: bool) -> TreeBatch:
    parents = shape_of((2, 2))
    depth = np.array([0, 1, 1, 2, 2, 2, 2])                     # row depth (row 0: the root)
    rows = np.where(depth[:, None] < 2, P_DRAFT[None], P_BONUS[None])
    tokens = np.array([[a, b, c, d, e, f] for a in (0, 3) for b in (5, 1) for c in (0, 1) for d in (5, 2)
                       for e in (3,) for f in (0,)])
    m = tokens.shape[0]
    target = np.broadcast_to(rows, (m,) + rows.shape).copy()
    draft = np.broadcast_to(np.vstack([Q_DRAFT] * rows.shape[0]), target.shape).copy() if stochastic else None
    return TreeBatch(parents, tokens, target, draft)


def _tree_zero_violations(batch: TreeBatch, out) -> list[str]:
    depth_row = {0: P_DRAFT, 1: P_DRAFT, 2: P_BONUS}
    bad = []
    for b in range(batch.batch_size):
        for d, tok in enumerate(out[b]):
            if tok != PAD and depth_row[d][tok] <= 0:
                bad.append(f"request {b} (tree tokens {batch.tokens[b].tolist()}) emitted token {tok} of probability 0 at depth {d}")
    return bad


TINY_Q = (1e-9, 3e-9, 1e-8, 1e-7, 1e-6)
TINY_RATIOS = (0.25, 0.5, 0.9, 0.999, 1.0)
P_LARGE = 0.3                                   # p >> q: always accepted
BF16_Q = (1.2345e-9, 7.77e-9, 3.14159e-8, 2.71828e-7, 9.87654e-7, 1.6180339e-6)
MARGINS = {"tiny q": 1e-3, "bf16 q": 1e-5}
Q_VOCAB = 4


def bf16(x: np.ndarray) -> np.ndarray:
    """Round float64 values to bfloat16 (round to nearest even on the float32 bit pattern), as float64."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def _rows_with(first: float) -> np.ndarray:
    """A distribution over Q_VOCAB tokens with token 0 at `first`, the rest spread evenly."""
    return np.array([first] + [(1.0 - first) / (Q_VOCAB - 1)] * (Q_VOCAB - 1))


def q_precision_requests(kind: str):
    """[(p(x), q(x))] of the row `kind` ("tiny q" or "bf16 q"); the draft is token 0."""
    if kind == "tiny q":
        return [(r * q, q) for q in TINY_Q for r in TINY_RATIOS] + [(P_LARGE, q) for q in TINY_Q]
    qs = np.array(BF16_Q)
    return list(zip(qs.tolist(), bf16(qs).tolist()))


def q_precision_batch(kind: str, row_dtype: str = "float64"):
    """(batch, coins, expected accept [B]) of one row: each (p, q) pair with coins at 0, 1 - 2^-53 and
    the threshold min(1, p/q) times (1 -+ margin); expected from the rows as the adapter holds them."""
    margin = MARGINS[kind]
    reqs, coins, want = [], [], []
    for px, qx in q_precision_requests(kind):
        p, q = _rows_with(px), _rows_with(qx)
        if row_dtype == "float32":
            p, q = p.astype(np.float32).astype(np.float64), q.astype(np.float32).astype(np.float64)
        threshold = min(1.0, p[0] / q[0])
        for c in (0.0, 1.0 - 2.0**-53, threshold * (1.0 - margin), threshold * (1.0 + margin)):
            if c >= 1.0:
                continue
            reqs.append((np.array([0]), np.vstack([p, _rows_with(0.25)]), q[None], False))
            coins.append(c)
            want.append(c * q[0] < p[0])
    batch = VerifyBatch.from_requests(reqs)
    n = batch.batch_size
    return batch, Coins(np.array(coins), np.full(n, 0.5)), np.array(want)


def q_precision_rows(engine, ctx) -> list[CheckResult]:
    """The `chain.q_precision[...]` rows (module docstring)."""
    rows = []
    for kind in MARGINS:
        name = f"chain.q_precision[{kind}]"
        with Timer() as t:
            batch, coins, want = q_precision_batch(kind, getattr(engine, "row_dtype", "float64"))
            raised = None
            try:
                out = harness.verified(engine, "verify", batch, coins, ctx, name)
            except AdapterError as exc:
                if harness.adapter_lost(exc):
                    raise
                raised = exc                        # it raised on valid rows: no decision was made
        if raised is not None:
            rows.append(_row(name, [f"the adapter raised on these valid rows instead of deciding: {raised}"],
                             batch.batch_size, t.seconds, what=""))
            continue
        got = (out != PAD).sum(axis=1) >= 2           # the draft was accepted: a bonus token follows it
        bad = []
        for b in np.flatnonzero(got != want):
            _, p, q, _ = batch.request(int(b))
            bad.append(f"p(x) = {p[0, 0]:.6g}, q(x) = {q[0, 0]:.6g}, coin {coins.accept[b]:.9g}: "
                       f"{'accepted' if got[b] else 'rejected'}, min(1, p/q) = {min(1.0, p[0, 0] / q[0, 0]):.9g} "
                       f"says {'accept' if want[b] else 'reject'}")
        rows.append(_row(name, bad, batch.batch_size, t.seconds,
                         what=f"every decision is coin < min(1, p/q) for the q given (margin {MARGINS[kind]:g})"))
    return rows


def run(engine, ctx) -> list[CheckResult]:
    caps = set(getattr(engine, "capabilities", ()))
    rows = []
    coins_all = {**IN_CONTRACT, **OUT_OF_CONTRACT}
    coined = [r for r in rules.claimed(caps) if not r.greedy and not r.tree]   # the endpoint requests are not greedy
    structure_bad, structure_n = [], 0
    for rule in coined:
        for label, c in coins_all.items():
            with Timer() as t:
                bad, n = [], 0
                for batch in endpoint_batches():
                    coins = Coins(np.full(int(batch.num_draft_tokens.sum()), c), np.full(batch.batch_size, c))
                    out = harness.verified(engine, rule.method, batch, coins, ctx, f"{rule.name} endpoint coin {label}")
                    bad += zero_prob_violations(batch, out)
                    n += batch.batch_size
                    if rule is rules.CHAIN and label in IN_CONTRACT:
                        structure_bad += structure_violations(batch, out)
                        structure_n += batch.batch_size
            rows.append(_zero_prob_row(rule.name, label, bad, n, t.seconds))
    if "chain" in caps:
        with Timer() as t:
            rng = ctx.rng("structure")
            for _ in range(3):
                batch = random_batch(rng)
                out = harness.verified(engine, "verify", batch, Coins.random(batch, rng), ctx, "structure")
                structure_bad += structure_violations(batch, out) + zero_prob_violations(batch, out)
                structure_n += batch.batch_size
        rows.append(_row("chain.structure", structure_bad, structure_n, t.seconds,
                         what="every row is accepted drafts followed by one token"))
        rows.extend(q_precision_rows(engine, ctx))
    if harness.verifies_trees(engine):
        for label, c in coins_all.items():
            with Timer() as t:
                bad, n = [], 0
                for stochastic in (True, False):
                    batch = _tree_batch(stochastic)
                    coins = TreeCoins(np.full(batch.tokens.shape, c), np.full(batch.batch_size, c))
                    out = harness.verified_trees(engine, batch, coins, ctx, f"tree endpoint coin {label}")
                    bad += _tree_zero_violations(batch, out)
                    n += batch.batch_size
            rows.append(_zero_prob_row("tree", label, bad, n, t.seconds))
    return rows
