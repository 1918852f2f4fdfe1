"""Hostile rows: what an engine does with rows a broken model hands it (a robustness row class).

A model that overflows or divides by zero gives the sampler rows with NaN, +-inf or nothing but zeros.
No law applies to such rows; the one requirement is safety: every id the call returns is in [-1, V)
(a real id or padding), or the call raises. An id >= V or < -1 is a FAIL: it indexes past the
embedding table downstream (vLLM #53029: a NaN row gave an out-of-range id; GHSA-8wr5-jm2h-8r4f: an
all-zero last tile gave id V). A call that raises is safe (the row says what it raised); a call that
hangs or kills the adapter process is an adapter error as everywhere else.

Kinds (`KINDS`), each in its own call so that one raise hides nothing else, at V in HOSTILE_VOCABS (a
last partial tile of one id, and 151,936): the hostile row as the bonus row of a request without
drafts, as the target row at a draft position, as the bonus row after a draft that is always accepted,
and in the middle of two drafts; draft-row kinds put it in the draft rows instead. Rules: chain
(`verify`) and block (`verify_block`) as claimed, and greedy requests (`verify`, greedy == True) when
the engine claims greedy.

Rows: `<rule>.hostile[<kind>,V=<V>]`, exact (a V above `ctx.large_max_vocab`: one SKIP row, not covered).

Budget (`--samples`): exact rows on fixed hostile rows; --samples unused.
"""

from __future__ import annotations

import numpy as np

from specverify.errors import AdapterError
from specverify.reference import rules
from specverify.reference.batch import Coins

from ..battery import harness, large_problems as lp
from ..battery.base import FAIL, PASS, CheckResult, Timer

HOSTILE_VOCABS = (8193, 151936)
TARGET_KINDS = ("nan-entry", "nan-row", "+inf-entry", "-inf-entry", "zero-row")
DRAFT_KINDS = ("nan-draft-row", "zero-draft-row")
KINDS = TARGET_KINDS + DRAFT_KINDS
SUPPORT = 16


def hostile_row(kind: str, valid: np.ndarray, rng) -> np.ndarray:
    """A row of the given kind, made from the valid row `valid`."""
    row = valid.copy()
    if kind in ("nan-row", "nan-draft-row"):
        row[:] = np.nan
    elif kind in ("zero-row", "zero-draft-row"):
        row[:] = 0.0
    elif kind == "nan-entry":
        row[int(rng.integers(row.size))] = np.nan
    elif kind == "+inf-entry":
        row[int(np.argmax(row))] = np.inf
    elif kind == "-inf-entry":
        row[int(rng.integers(row.size))] = -np.inf
    return row


def requests(kind: str, vocab: int, rng) -> list:
    """(drafts, target rows, draft rows) of the kind's requests (see the module docstring)."""
    def valid():
        row = np.zeros(vocab)
        ids = rng.choice(vocab, SUPPORT, replace=False)
        row[ids] = rng.dirichlet(np.ones(SUPPORT))
        return row

    p, q = valid(), valid()
    x = int(np.flatnonzero(q)[0])
    h = hostile_row(kind, p if kind in TARGET_KINDS else q, rng)
    if kind in TARGET_KINDS:
        return [(np.zeros(0, np.int64), h[None], np.zeros((0, vocab))),
                (np.array([x]), np.vstack([h, p]), q[None]),
                (np.array([x]), np.vstack([q, h]), q[None]),                 # q = p0: always accepted
                (np.array([x, x]), np.vstack([q, h, p]), np.vstack([q, q]))]
    return [(np.array([x]), np.vstack([p, p]), h[None]),
            (np.array([x, x]), np.vstack([p, p, p]), np.vstack([q, h]))]


def batch_of(reqs, greedy: bool):
    drafts = np.concatenate([r[0] for r in reqs]).astype(np.int64)
    return harness.trusted_batch(drafts, [r[0].size for r in reqs], np.vstack([r[1] for r in reqs]),
                                 np.vstack([r[2] for r in reqs]), greedy=np.full(len(reqs), greedy))


def judge(name: str, engine, method: str, batch, rng, ctx, vocab: int) -> CheckResult:
    coins = Coins(rng.random(int(batch.num_draft_tokens.sum())), rng.random(batch.batch_size))
    raised = None
    with Timer() as t:
        try:
            out = harness.returned_ids(engine, method, batch, coins, ctx, f"hostile rows {name}")
        except AdapterError as exc:
            if harness.adapter_lost(exc):
                raise
            raised = str(exc).split(": raised ", 1)[-1]
    n = batch.batch_size
    if raised is not None:
        return CheckResult(name, PASS, n=n, exact=True, seconds=t.seconds,
                           detail=f"the call raised (safe): {raised[:160]}")
    bad = (out < -1) | (out >= vocab)
    if bad.any():
        return CheckResult(name, FAIL, n=n, exact=True, seconds=t.seconds,
                           detail=f"{int(bad.sum())} id(s) outside [-1, {vocab}) returned, e.g. {int(out[bad][0])}",
                           data={"returned": out.tolist()})
    return CheckResult(name, PASS, n=n, exact=True, seconds=t.seconds,
                       detail=f"returned ids in [-1, {vocab}) for {n} requests")


def run(engine, ctx) -> list[CheckResult]:
    caps = set(getattr(engine, "capabilities", ()))
    plans = [(r.name, r.method, False) for r in rules.claimed(caps) if r.name in ("chain", "block")]
    if "greedy" in caps:
        plans.append(("greedy", "verify", True))
    rows = []
    for rule, method, greedy in plans:
        for vocab in HOSTILE_VOCABS:
            if lp.too_large(vocab, ctx):
                rows.append(lp.not_run(f"{rule}.hostile[*,V={vocab}]", vocab, ctx.large_max_vocab))
                continue
            for kind in KINDS:
                rng = ctx.rng("hostile", rule, kind, vocab)
                batch = batch_of(requests(kind, vocab, rng), greedy)
                rows.append(judge(f"{rule}.hostile[{kind},V={vocab}]", engine, method, batch, rng, ctx, vocab))
    return rows
