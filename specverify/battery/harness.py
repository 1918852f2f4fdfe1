"""Drive an engine under audit: pack many replicas of a problem into ragged verify batches, inject
the coins, call the adapter (with a timeout), and check the shape of what comes back.

The adapter's methods, their parameters and the capabilities they provide: the protocol's one table,
`specverify.adapters.protocol.PROTOCOL` (each method described in that module's docstring).

Every call goes through `invoke`, always through a handle (`specverify.isolation`): the handle
`audit.prepare` opens (its adapter in a worker process, or in-process), or for a plain adapter object
one made on the spot (`isolation.plain_handle`: called directly on the shared timed thread).
An adapter that raises, hangs, dies or returns something that is not an integer array of the right
shape with ids in [-1, V) is an AdapterError (one line; exit 2).
"""

from __future__ import annotations

import json
import threading

import numpy as np

from specverify.errors import AdapterError, InputError
from specverify.isolation import AdapterHandle, plain_handle
from specverify.isolation import call_with_timeout  # noqa: F401 - checks call harness.call_with_timeout
from specverify.reference.batch import PAD, Coins, VerifyBatch
from specverify.reference.tree_batch import TreeBatch, TreeCoins, shape_of

from .problems import Problem, sample_rows

CHUNK = 32_768  # requests per verify batch


def handle_of(engine, ctx) -> AdapterHandle:
    """`engine` itself if it is a handle, else a plain handle on the adapter object (`isolation.plain_handle`)."""
    return engine if isinstance(engine, AdapterHandle) else plain_handle(engine, timeout=ctx.timeout)


def check_output(out, shape: tuple, vocab: int | None, what: str) -> np.ndarray:
    """The adapter's output as int64 of `shape` with ids in [-1, vocab); else an AdapterError
    (vocab None: ids not range-checked, for a check that judges them itself)."""
    try:
        a = np.asarray(out)
    except Exception as exc:  # noqa: BLE001
        raise AdapterError(f"{what}: output is not an array ({exc})") from exc
    if a.shape != tuple(shape):
        raise AdapterError(f"{what}: output shape {a.shape}, expected {tuple(shape)}")
    if a.size and not np.issubdtype(a.dtype, np.integer):
        raise AdapterError(f"{what}: output dtype {a.dtype} is not an integer type")
    a = a.astype(np.int64)
    if vocab is None:
        return a
    bad = (a < -1) | (a >= vocab)
    if bad.any():
        raise AdapterError(f"{what}: output holds token id {int(a[bad][0])}, outside [-1, {vocab})")
    return a


def invoke(engine, method: str, *args, ctx, what: str, **kwargs):
    """engine.<method>(*args, **kwargs) under the audit's timeout. An adapter behind a handle
    (`specverify.isolation`) runs in its own process, times itself and reports the input arrays the call
    changed: each change is noted on ctx (the `contract.inputs_unchanged` row); the harness keeps
    judging with its own arrays, which the adapter never saw. A plain adapter object is called directly
    on the shared timed thread, through a plain handle (`handle_of`)."""
    if ctx.check:
        what = f"{what}, check {ctx.check}"
    handle = handle_of(engine, ctx)
    value = handle.call(method, *args, what=what, **kwargs)
    if handle is engine:
        ctx.note_call(what, engine.last_mutated)
    return value


def verified(engine, method: str, batch: VerifyBatch, coins, ctx, what: str) -> np.ndarray:
    """engine.<method>(batch, coins) under the timeout, output checked (`coins`: the seeds for
    verify_seeded)."""
    res = invoke(engine, method, batch, coins, ctx=ctx, what=f"{engine.name}.{method} ({what})")
    return check_output(res, (batch.batch_size, batch.max_spec_len + 1), batch.vocab_size, f"{engine.name}.{method}")


def returned_ids(engine, method: str, batch: VerifyBatch, coins, ctx, what: str) -> np.ndarray:
    """Like `verified`, but ids outside [-1, V) come back as they are instead of an AdapterError: for the
    checks whose exact rows fail on them (`large_vocab`, `hostile`)."""
    res = invoke(engine, method, batch, coins, ctx=ctx, what=f"{engine.name}.{method} ({what})")
    return check_output(res, (batch.batch_size, batch.max_spec_len + 1), None, f"{engine.name}.{method}")


def adapter_lost(exc: AdapterError) -> bool:
    """The adapter hung or its process died (an AdapterError that is not a raise inside the adapter)."""
    msg = str(exc)
    return "no answer within" in msg or "the adapter process" in msg


def row_buffer(engine, size: int, dtype=np.float64) -> np.ndarray:
    """An empty array of `size` for rows the harness fills once and hands to `engine` in many calls:
    shared with the adapter's process where `engine` is an isolated handle (`AdapterHandle.buffer`:
    arrays in it cross without a copy), a plain array otherwise."""
    if isinstance(engine, AdapterHandle):
        return engine.buffer(size, dtype)
    return np.empty(size, dtype)


def replicated_rows(engine, target: np.ndarray, draft: np.ndarray | None, m: int, ctx, key: str,
                    min_size: int = 0):
    """(target [m * (kappa + 1), V], draft [m * kappa, V] or None): m requests' copies of one problem's
    rows, for every batch of that problem (only draft ids and coins change between its batches). They
    live in one buffer kept in the audit's state under `key` (each job of a parallel audit has its own; at
    least `min_size` floats) and reused by every problem, shared with `engine`'s adapter process
    (`row_buffer`): a batch of these rows crosses the process boundary without a copy, and a fresh
    tile of 20-64 MB per batch is not made. Valid until the next call with the same context and key.

    An adapter that writes its inputs is caught through a handle (the worker's pages, or the
    in-process handle's copies: `contract.inputs_unchanged`) and never changes these rows; one called
    directly, without a handle, is trusted not to."""
    v = target.shape[1]
    n_target, n_draft = m * target.shape[0] * v, 0 if draft is None else m * draft.shape[0] * v
    size = n_target + n_draft
    owner = id(engine.backend if isinstance(engine, AdapterHandle) else engine)   # one buffer per adapter process
    buf, buf_owner = ctx.state.buffers.get(key, (None, None))
    if buf is None or buf.size < size or buf_owner != owner:
        buf = None                                        # the old one's memory goes first
        buf = row_buffer(engine, max(size, min_size))
        ctx.state.buffers[key] = (buf, owner)
    rows_t = buf[:n_target].reshape(m, target.shape[0], v)
    rows_t[:] = target
    rows_d = None
    if draft is not None:
        rows_d = buf[n_target:size].reshape(m, draft.shape[0], v)
        rows_d[:] = draft
    return rows_t.reshape(-1, v), None if rows_d is None else rows_d.reshape(-1, v)


def trusted_batch(draft_token_ids, num_draft_tokens, target_probs, draft_probs=None, greedy=None) -> VerifyBatch:
    """A VerifyBatch the harness built and knows to be valid (rows of a validated problem), made
    without re-validating millions of rows; `VerifyBatch(...)` validates everything it is given."""
    batch = object.__new__(VerifyBatch)
    num = np.asarray(num_draft_tokens, np.int64)
    for name, value in (("draft_token_ids", np.asarray(draft_token_ids, np.int64)),
                        ("num_draft_tokens", num),
                        ("target_probs", np.ascontiguousarray(target_probs, np.float64)),
                        ("draft_probs", None if draft_probs is None else np.ascontiguousarray(draft_probs, np.float64)),
                        ("greedy", np.zeros(num.size, bool) if greedy is None else np.asarray(greedy, bool))):
        object.__setattr__(batch, name, value)
    return batch


def replicate(problem: Problem, drafts: np.ndarray, greedy: bool = False) -> VerifyBatch:
    """One request per row of `drafts` [B, kappa], all with the problem's rows."""
    b, k = drafts.shape
    return trusted_batch(
        draft_token_ids=drafts.reshape(-1),
        num_draft_tokens=np.full(b, k, np.int64),
        target_probs=np.tile(problem.target[None], (b, 1, 1)).reshape(-1, problem.vocab_size),
        draft_probs=None if problem.deterministic else np.tile(problem.draft[None], (b, 1, 1)).reshape(-1, problem.vocab_size),
        greedy=np.full(b, greedy),
    )


def _problem_rows(engine, problem: Problem, m: int, ctx):
    """The battery's replicated rows of `problem` for batches of up to m requests (`replicated_rows`)."""
    return replicated_rows(engine, problem.target, None if problem.deterministic else problem.draft, m, ctx,
                           "_battery_rows")


def run_chain(engine, problem: Problem, n: int, rng: np.random.Generator, ctx, *, greedy: bool = False,
              method: str = "verify", what: str = ""):
    """n one-step samples of `problem` through engine.<method>; returns (emitted int64 [n, kappa + 1],
    drafts int64 [n, kappa])."""
    k = problem.kappa
    out = np.empty((n, k + 1), np.int64)
    drafts = np.empty((n, k), np.int64)
    target, draft = _problem_rows(engine, problem, min(CHUNK, n), ctx)
    for s in range(0, n, CHUNK):
        m = min(CHUNK, n - s)
        d = problem.sample_drafts(m, rng)
        batch = trusted_batch(d.reshape(-1), np.full(m, k, np.int64), target[:m * (k + 1)],
                              None if draft is None else draft[:m * k], greedy=np.full(m, greedy))
        coins = Coins(rng.random(m * problem.kappa), rng.random(m))
        out[s:s + m] = verified(engine, method, batch, coins, ctx, what)
        drafts[s:s + m] = d
    return out, drafts


def run_seeded(engine, problem: Problem, n: int, rng: np.random.Generator, ctx, first_seed: int, what: str = ""):
    """n one-step samples through engine.verify_seeded, request i seeded first_seed + i."""
    k = problem.kappa
    out = np.empty((n, k + 1), np.int64)
    target, draft = _problem_rows(engine, problem, min(CHUNK, n), ctx)
    for s in range(0, n, CHUNK):
        m = min(CHUNK, n - s)
        batch = trusted_batch(problem.sample_drafts(m, rng).reshape(-1), np.full(m, k, np.int64),
                              target[:m * (k + 1)], None if draft is None else draft[:m * k])
        seeds = first_seed + s + np.arange(m, dtype=np.int64)
        out[s:s + m] = verified(engine, "verify_seeded", batch, seeds, ctx, what)
    return out


# ------------------------------------------------------------------------------------------ trees

def tree_batch(problem: Problem, branching, m: int, rng: np.random.Generator) -> TreeBatch:
    """m requests of one tree shape (branching[d] children per node at depth d); node tokens drawn
    i.i.d. from the depth's draft row (or its top-k tokens when deterministic)."""
    parents = shape_of(branching)
    depth = np.zeros(parents.size + 1, np.int64)          # depth[k + 1] of node k; row 0 the root
    for k, par in enumerate(parents):
        depth[k + 1] = depth[par + 1] + 1
    node_depth = depth[1:] - 1                             # the depth of the row each node was drafted from
    tokens = np.empty((m, parents.size), np.int64)
    for d in range(len(branching)):
        nodes = np.flatnonzero(node_depth == d)
        row = problem.draft[min(d, problem.kappa - 1)]
        if problem.deterministic:
            top = np.argsort(-row, kind="stable")[:branching[d]]
            tokens[:, nodes] = np.tile(top, nodes.size // branching[d])[None, :]
        else:
            tokens[:, nodes] = sample_rows(np.repeat(row[None], nodes.size, axis=0), rng.random((m, nodes.size)))
    target_rows = problem.target[np.minimum(depth, problem.kappa)]        # [N + 1, V]
    draft_rows = problem.draft[np.minimum(depth, problem.kappa - 1)]
    batch = object.__new__(TreeBatch)
    object.__setattr__(batch, "parents", parents)
    object.__setattr__(batch, "tokens", tokens)
    object.__setattr__(batch, "target_probs", np.ascontiguousarray(np.broadcast_to(target_rows, (m,) + target_rows.shape)))
    object.__setattr__(batch, "draft_probs", None if problem.deterministic else
                       np.ascontiguousarray(np.broadcast_to(draft_rows, (m,) + draft_rows.shape)))
    return batch


def verifies_trees(engine) -> bool:
    """Capability "tree" and one of the two tree forms (verify_trees, or verify_tree per request)."""
    return "tree" in set(getattr(engine, "capabilities", ())) and (hasattr(engine, "verify_trees")
                                                                   or hasattr(engine, "verify_tree"))


def verified_trees(engine, batch: TreeBatch, coins: TreeCoins, ctx, what: str) -> np.ndarray:
    """engine.verify_trees(batch, coins), or engine.verify_tree request by request (one timeout for
    the whole batch) when only the one-request form exists."""
    shape = (batch.batch_size, batch.depth + 1)
    if hasattr(engine, "verify_trees"):
        res = invoke(engine, "verify_trees", batch, coins, ctx=ctx, what=f"{engine.name}.verify_trees ({what})")
        return check_output(res, shape, batch.vocab_size, f"{engine.name}.verify_trees")
    what = f"{engine.name}.verify_tree ({what})"
    handle = handle_of(engine, ctx)
    res = handle.run(verify_tree_each, batch, coins, what=what)          # the loop runs where the adapter lives
    if handle is engine:
        ctx.note_call(what, engine.last_mutated)
    return check_output(res, shape, batch.vocab_size, f"{engine.name}.verify_tree")


def verify_tree_each(adapter, batch: TreeBatch, coins: TreeCoins) -> np.ndarray:
    """The one-request tree form over a batch: adapter.verify_tree request by request."""
    shape = (batch.batch_size, batch.depth + 1)
    out = np.full(shape, PAD, np.int64)
    for b in range(batch.batch_size):
        tree, target, draft = batch.request(b)
        res = adapter.verify_tree(tree, target, draft, coins.accept[b], float(coins.final[b]))
        tok = np.asarray(res[0] if isinstance(res, tuple) else res).reshape(-1)
        if not 1 <= tok.size <= shape[1]:
            raise AdapterError(f"{adapter.name}.verify_tree: emitted {tok.size} tokens, expected 1..{shape[1]}")
        out[b, :tok.size] = tok
    return out


def run_tree(engine, problem: Problem, n: int, rng: np.random.Generator, ctx, branching=(2, 2),
             what: str = "") -> np.ndarray:
    """n samples of one tree-verify step; returns int64 [n, depth + 1], -1 padded."""
    out = np.full((n, len(branching) + 1), -1, np.int64)
    for s in range(0, n, CHUNK):
        m = min(CHUNK, n - s)
        batch = tree_batch(problem, branching, m, rng)
        out[s:s + m] = verified_trees(engine, batch, TreeCoins.random(batch, rng), ctx, what)
    return out


# ------------------------------------------------------------------------------------------ engines

def generated(engine, ctx, what: str, **kw):
    """engine.generate(**kw) under the timeout: (tokens int64 [n, length], info dict)."""
    res = invoke(engine, "generate", ctx=ctx, what=f"{engine.name}.generate ({what})", **kw)
    info = {}
    if isinstance(res, tuple) and len(res) == 2:
        res, info = res
    elif isinstance(res, dict):
        res, info = res.get("tokens"), res
    elif hasattr(res, "tokens"):
        info = {k: getattr(res, k) for k in ("num_steps", "num_drafted", "num_accepted") if hasattr(res, k)}
        res = res.tokens
    tokens = check_output(res, (kw["n"], kw["length"]), kw["target"].vocab_size, f"{engine.name}.generate")
    if (tokens < 0).any():
        # runs may end early only at a stop token (processors with stop_tokens), PAD to the end after
        # it; whether a stop token ended them is the processor checks' business (an exact row)
        stops = getattr(kw.get("processors"), "stop_tokens", ())
        pad = tokens == PAD
        if not stops or (pad[:, :-1] & ~pad[:, 1:]).any():
            raise AdapterError(f"{engine.name}.generate: returned fewer than {kw['length']} tokens for some run")
    return tokens, counters(info, f"{engine.name}.generate")


COUNTERS = ("num_steps", "num_drafted", "num_accepted")     # the counters a generate info may report


def counters(info, what: str) -> dict:
    """generate()'s info as a dict, its counters checked: AdapterError unless info is a dict (or None)
    whose COUNTERS, where present, are non-negative integers (an integral float too) with
    num_accepted <= num_drafted. A negative, fractional, NaN or non-numeric counter is the adapter's
    error, never a FAIL of the engine's law or a PASS."""
    if info is None:
        return {}
    if not isinstance(info, dict):
        raise AdapterError(f"{what}: info must be a dict of counters ({', '.join(COUNTERS)}), got "
                           f"{type(info).__name__} {info!r:.80}")
    out = dict(info)
    for key in COUNTERS:
        if key not in out:
            continue
        value = out[key]
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
        if ok:
            ok = bool(np.isfinite(value)) and float(value) == int(value) and value >= 0
        if not ok:
            raise AdapterError(f"{what}: info[{key!r}] must be a non-negative integer count, got {value!r:.80}")
        out[key] = int(value)
    if "num_drafted" in out and "num_accepted" in out and out["num_accepted"] > out["num_drafted"]:
        raise AdapterError(f"{what}: info reports {out['num_accepted']} drafts accepted of {out['num_drafted']} "
                           "drafted (accepted cannot exceed drafted)")
    return out


def law_key(model) -> tuple:
    """What identifies a target model for the laws' memo: a toy model by its parameters, a tabulated
    (real) model by its own `law_key`."""
    key = getattr(model, "law_key", None)
    if key is not None:
        return key
    return ("toy", model.seed, model.vocab_size, model.scale, model.zero_frac)



def models(engine, setup, ctx):
    """(target, draft) for a run check: the setup's toy models, or, for an adapter with
    `models = "own"`, its own two tiny Llamas over `setup.vocab` tokens (built from a seed drawn from
    the audit's seed; every law from their float64 forward, `reference.tabulated`), built once an audit
    (kept in `ctx.state.shared.models`: (engine name, vocab, seed) -> (target, draft))."""
    if getattr(engine, "models", "toy") != "own":
        return setup.models(ctx)
    seed = int(ctx.rng("own-models", setup.vocab).integers(1, 2**31))
    key = (engine.name, setup.vocab, seed)
    shared = ctx.state.shared
    with shared.lock:                     # checks side by side ask for the same models once
        if key not in shared.models:
            target, draft = own_models(engine, setup.vocab, seed, ctx)
            target.prefetch(setup.prompt, setup.length)       # every row the run laws enumerate
            shared.models[key] = (target, draft)
    return shared.models[key]


def own_models(engine, vocab: int, seed: int, ctx):
    """The adapter's own_models(vocab, seed) -> two tiny_llama folders (or TabulatedModels holding them),
    checked and loaded in float64 here."""
    from pathlib import Path

    from specverify.models import tiny as tiny_llama
    from specverify.reference.tabulated import TabulatedModel

    what = f"{engine.name}.own_models"
    res = invoke(engine, "own_models", vocab, seed, ctx=ctx, what=f"{what}(vocab={vocab}, seed={seed})")
    if not isinstance(res, (tuple, list)) or len(res) != 2:
        raise AdapterError(f"{what}: must return (target, draft), got {type(res).__name__}")
    out = []
    for role, m in zip(("target", "draft"), res):
        folder = m.handle if isinstance(m, TabulatedModel) else m
        if not isinstance(folder, (str, Path)) or not (Path(folder) / tiny_llama.STAMP).exists():
            raise AdapterError(f"{what}: the {role} must be a folder written by tiny_llama.build, got {folder!r:.200}")
        try:
            stamp = json.loads((Path(folder) / tiny_llama.STAMP).read_text())
        except (OSError, ValueError) as exc:
            raise AdapterError(f"{what}: the {role} folder {folder} has an unreadable stamp "
                               f"{tiny_llama.STAMP} ({type(exc).__name__}: {str(exc)[:120]})") from None
        if not isinstance(stamp, dict) or not isinstance(stamp.get("vocab"), int):
            raise AdapterError(f"{what}: the {role} folder {folder} has a corrupt stamp {tiny_llama.STAMP} "
                               "(no integer vocab): rebuild it with tiny_llama.build")
        try:
            model = tiny_llama.tabulated(folder)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - truncated or corrupt weights: whatever the loader raises
            first = (str(exc).strip().splitlines() or [""])[0][:160]
            raise AdapterError(f"{what}: the {role} folder {folder} cannot be loaded (truncated or corrupt "
                               f"weights?): {type(exc).__name__}: {first}") from None
        if model.vocab_size != vocab:
            raise AdapterError(f"{what}: the {role} has {model.vocab_size} tokens, asked for {vocab}")
        out.append(model)
    return tuple(out)
