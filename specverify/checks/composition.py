"""Batch composition: a request's output must not depend on the batch it shares (exact).

Each probe request is verified alone (a batch of one) and inside mixed ragged batches -- with
zero-draft, padded (-1), greedy, deterministic-draft and random neighbours, in two different orders --
under the same coins (its own acceptance coins and final coin, wherever the layout puts them). The
outputs must be identical token for token.

Catches cross-request leakage through the ragged index arithmetic (a bonus row off by one lands in
the neighbour's rows, a coin read from the neighbour's slice) and anything that makes a request's
result depend on max_spec_len, on its position or on the other requests' kinds.

Budget (`--samples`): exact rows on fixed probe batches; --samples unused.
"""

from __future__ import annotations

import numpy as np

from specverify.reference import rules
from specverify.reference.batch import PAD, Coins, VerifyBatch
from specverify.reference.tree_batch import TreeBatch, TreeCoins

from ..battery import harness
from ..battery.base import FAIL, PASS, CheckResult, Timer
from ..battery.problems import drafted_request

VOCAB = 8
N_PROBES = 96


def probes(rng: np.random.Generator, stochastic: bool = True):
    """Probe requests (drafts, target rows, draft rows or None, greedy) and their coins."""
    reqs, acc, fin = [], [], []
    for j in range(N_PROBES):
        kind = j % 6            # 0..2 random k = 1..3, 3 zero-draft, 4 padded, 5 greedy
        k = {0: 1, 1: 2, 2: 3, 3: 0, 4: 3, 5: 2}[kind]
        x, p, q = drafted_request(rng, k, VOCAB, 0.6)
        if kind == 4:
            x[1:] = PAD
        if not stochastic:
            q = None
        elif j % 12 == 7:     # a deterministic draft inside a stochastic batch: q one-hot
            q = np.zeros((k, VOCAB))
            q[np.arange(k), np.maximum(x, 0)] = 1.0
        reqs.append((x, p, q, kind == 5))
        acc.append(rng.random(k))
        fin.append(float(rng.random()))
    return reqs, acc, fin


def _batch(reqs, acc, fin, order):
    batch = VerifyBatch.from_requests([reqs[i] for i in order])
    return batch, Coins(np.concatenate([acc[i] for i in order]) if order else np.zeros(0), np.array([fin[i] for i in order]))


def compare_alone_vs_mixed(engine, method: str, reqs, acc, fin, rng, ctx, what: str):
    """(differences, number of comparisons) of each probe alone vs in two mixed orders."""
    alone = {}
    for i in range(len(reqs)):
        batch, coins = _batch(reqs, acc, fin, [i])
        alone[i] = harness.verified(engine, method, batch, coins, ctx, f"{what} alone")[0]
    diffs, n = [], 0
    for trial in range(2):
        order = list(rng.permutation(len(reqs)))
        batch, coins = _batch(reqs, acc, fin, order)
        out = harness.verified(engine, method, batch, coins, ctx, f"{what} mixed")
        for pos, i in enumerate(order):
            a = alone[i][alone[i] >= 0]
            m = out[pos][out[pos] != PAD]
            n += 1
            if a.shape != m.shape or (a != m).any():
                diffs.append(f"request with drafts {reqs[i][0].tolist()} (greedy={reqs[i][3]}): alone {a.tolist()}, "
                             f"at position {pos} of a mixed batch of {len(order)} {m.tolist()}")
    return diffs, n


def _row(name, diffs, n, seconds):
    if diffs:
        return CheckResult(name, FAIL, n=n, exact=True, seconds=seconds,
                           detail=f"{len(diffs)} of {n} outputs changed with the batch; first: {diffs[0]}",
                           data={"differences": diffs[:20], "count": len(diffs)})
    return CheckResult(name, PASS, n=n, exact=True, seconds=seconds,
                       detail=f"{n} outputs identical alone and in mixed batches")


def _tree_probe_batch(rng, m=48, vocab=VOCAB):
    parents = np.array([-1, -1, 0, 0, 1, 1])
    target = rng.dirichlet(np.full(vocab, 0.6), (m, 7))
    draft = rng.dirichlet(np.full(vocab, 0.6), (m, 7))
    rows = parents + 1
    u = rng.random((m, 6))
    tokens = np.empty((m, 6), np.int64)
    for k in range(6):
        cdf = np.cumsum(draft[:, rows[k]], axis=1)
        tokens[:, k] = np.minimum((cdf <= (u[:, k] * cdf[:, -1])[:, None]).sum(axis=1), vocab - 1)
    draft[np.arange(m)[:, None], rows[None, :], tokens] += 0.05
    draft /= draft.sum(axis=2, keepdims=True)
    return TreeBatch(parents, tokens, target, draft)


def run(engine, ctx) -> list[CheckResult]:
    caps = set(getattr(engine, "capabilities", ()))
    rows = []
    rng = ctx.rng("composition")
    # one row per adapter method of the claimed batch rules, named by its first rule; a probe request
    # is kept if a claimed rule of that method verifies requests with its greedy flag
    claimed = [r for r in rules.claimed(caps) if not r.tree]
    for method in dict.fromkeys(r.method for r in claimed):
        greedy_flags = {r.greedy for r in claimed if r.method == method}
        rule = rules.of_method(method).name
        with Timer() as t:
            diffs, n = [], 0
            for stochastic in (True, False):
                reqs, acc, fin = probes(rng, stochastic)
                keep = [i for i, r in enumerate(reqs) if r[3] in greedy_flags]
                if not keep:
                    continue
                reqs, acc, fin = [reqs[i] for i in keep], [acc[i] for i in keep], [fin[i] for i in keep]
                d, m = compare_alone_vs_mixed(engine, method, reqs, acc, fin, rng, ctx, f"{rule} composition")
                diffs += d
                n += m
        rows.append(_row(f"{rule}.composition", diffs, n, t.seconds))
    if harness.verifies_trees(engine):
        with Timer() as t:
            batch = _tree_probe_batch(rng)
            coins = TreeCoins.random(batch, rng)
            mixed = harness.verified_trees(engine, batch, coins, ctx, "tree composition mixed")
            diffs = []
            for b in range(batch.batch_size):
                one = TreeBatch(batch.parents, batch.tokens[b:b + 1], batch.target_probs[b:b + 1], batch.draft_probs[b:b + 1])
                alone = harness.verified_trees(engine, one, TreeCoins(coins.accept[b:b + 1], coins.final[b:b + 1]), ctx,
                                               "tree composition alone")[0]
                if (alone != mixed[b]).any():
                    diffs.append(f"tree request {b}: alone {alone.tolist()}, in the batch {mixed[b].tolist()}")
        rows.append(_row("tree.composition", diffs, batch.batch_size, t.seconds))
    return rows
