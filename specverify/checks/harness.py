"""Drive an engine under audit: pack many replicas of a problem into ragged verify batches, inject
the coins, call the adapter (with a timeout), and check the shape of what comes back.

The adapter's sampler-level methods (see `specverify.adapters.protocol`):
    verify(batch: VerifyBatch, coins: Coins) -> int [B, max_spec_len + 1], -1 padded   (chain, greedy)
    verify_block(batch, coins) -> same                                                 (block)
    verify_tree(tree, target_probs, draft_probs, coins, final_coin) -> emitted ids      (tree)
"""

from __future__ import annotations

import threading

import numpy as np

from specverify.errors import AdapterError
from specverify.reference.batch import Coins, VerifyBatch
from specverify.reference.tree import DraftTree

from .problems import Problem, sample_rows

CHUNK = 32_768  # requests per verify batch


def call_with_timeout(fn, *args, timeout: float, what: str):
    """Call fn(*args); raise AdapterError if it raises or does not return within `timeout` s."""
    box: dict = {}

    def target():
        try:
            box["value"] = fn(*args)
        except BaseException as exc:  # noqa: BLE001 - an adapter may raise anything
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        raise AdapterError(f"{what}: no answer within {timeout:g} s (hung?)")
    if "error" in box:
        exc = box["error"]
        raise AdapterError(f"{what}: raised {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    return box["value"]


def check_output(out, batch: VerifyBatch, what: str) -> np.ndarray:
    """The adapter's output as int64 [B, max_spec_len+1]; malformed output is an AdapterError."""
    try:
        a = np.asarray(out)
    except Exception as exc:  # noqa: BLE001
        raise AdapterError(f"{what}: output is not an array ({exc})") from exc
    want = (batch.batch_size, batch.max_spec_len + 1)
    if a.shape != want:
        raise AdapterError(f"{what}: output shape {a.shape}, expected {want}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise AdapterError(f"{what}: output dtype {a.dtype} is not an integer type")
    return a.astype(np.int64)


def replicate(problem: Problem, drafts: np.ndarray, greedy: bool = False) -> VerifyBatch:
    """One request per row of `drafts` [B, kappa], all with the problem's rows."""
    b, k = drafts.shape
    return VerifyBatch(
        draft_token_ids=drafts.reshape(-1),
        num_draft_tokens=np.full(b, k, np.int64),
        target_probs=np.tile(problem.target[None], (b, 1, 1)).reshape(-1, problem.vocab_size),
        draft_probs=None if problem.deterministic else np.tile(problem.draft[None], (b, 1, 1)).reshape(-1, problem.vocab_size),
        greedy=np.full(b, greedy),
    )


def run_chain(engine, problem: Problem, n: int, rng: np.random.Generator, ctx, *, greedy: bool = False,
              method: str = "verify", what: str = "") -> np.ndarray:
    """n one-step samples of `problem` through engine.<method>; returns int64 [n, kappa + 1]."""
    fn = getattr(engine, method)
    out = np.empty((n, problem.kappa + 1), np.int64)
    for s in range(0, n, CHUNK):
        m = min(CHUNK, n - s)
        batch = replicate(problem, problem.sample_drafts(m, rng), greedy)
        coins = Coins(rng.random(m * problem.kappa), rng.random(m))
        res = call_with_timeout(fn, batch, coins, timeout=ctx.timeout, what=f"{engine.name}.{method} ({what})")
        out[s:s + m] = check_output(res, batch, f"{engine.name}.{method}")
    return out


def tree_for(problem: Problem, branching, rng: np.random.Generator):
    """A draft tree with branching[d] children per node at depth d, tokens drawn i.i.d. from the
    depth's draft row (or its top-k tokens when deterministic). Rows of target/draft per node."""
    tokens, parents, depth_of = [], [], []
    frontier = [(-1, 0)]
    for d, k in enumerate(branching):
        nxt = []
        row = problem.draft[min(d, problem.kappa - 1)]
        for parent, _ in frontier:
            if problem.deterministic:
                kids = np.argsort(-row, kind="stable")[:k]
            else:
                kids = sample_rows(row[None], rng.random((k, 1)))[:, 0]
            for tok in kids:
                tokens.append(int(tok))
                parents.append(parent)
                depth_of.append(d + 1)
                nxt.append((len(tokens) - 1, d + 1))
        frontier = nxt
    tree = DraftTree(np.array(tokens, np.int64), np.array(parents, np.int64))
    node_depth = np.array([0] + depth_of)
    target = problem.target[np.minimum(node_depth, problem.kappa)]
    draft = problem.draft[np.minimum(node_depth, problem.kappa - 1)]
    return tree, target, draft


def run_tree(engine, problem: Problem, n: int, rng: np.random.Generator, ctx, branching=(2, 2),
             what: str = "") -> np.ndarray:
    """n samples of one tree-verify step; returns int64 [n, depth + 1], -1 padded."""
    width = len(branching) + 1
    out = np.full((n, width), -1, np.int64)
    fn = engine.verify_tree
    for s in range(n):
        tree, target, draft = tree_for(problem, branching, rng)
        coins = rng.random(tree.size)
        res = call_with_timeout(fn, tree, target, None if problem.deterministic else draft, coins, float(rng.random()),
                                timeout=ctx.timeout, what=f"{engine.name}.verify_tree ({what})")
        tok = np.asarray(res[0] if isinstance(res, tuple) else res, np.int64).reshape(-1)
        if not 1 <= tok.size <= width:
            raise AdapterError(f"{engine.name}.verify_tree: emitted {tok.size} tokens, expected 1..{width}")
        out[s, :tok.size] = tok
    return out
