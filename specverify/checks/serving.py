"""The serving path at the server level: what happens to a multi-token step after the sampler.

A speculative step emits up to kappa + 1 tokens at once; logprobs, stop strings, the length cap, usage,
streams and seeds were written for one (../shared/BUGCLASSES.md, "The serving path"). Each row holds a
server to `reference.serving`: what it returns must be those definitions applied to the tokens its
sampler drew, whatever the step boundaries were. Probed first (`server.client.ServerClient.probe`);
a row that needs what the server lacks is a SKIP listed under not covered.

    server.logprobs   RUNS_PROMPTS prompts x {greedy, seeded T=1} runs of RUN_TOKENS tokens with the top
                      entries; every position j teacher-forced (prompt + ids[:j], one greedy token, the
                      same top entries): the returned logprob of ids[j] and the top entries must equal
                      the teacher-forced ones -- bit for bit on a toy model (float64 table rows), within
                      LOGPROB_ATOL otherwise; on a tiny:V,SEED server also against the toy's own row
                      (`reference.serving.log_softmax`); on any other model whose top lists are whole
                      rows (V <= TOP), each list's log-sum-exp must be 0 within LOGPROB_ATOL (teacher
                      forcing compares the engine with itself: logits sent as logprobs would agree with
                      themselves). Exact. Catches logprobs read from the draft's
                      rows or another row of the verify batch (vLLM PRs #30846, #33391, #44727).
    server.stop       STOP_RUNS seeded runs of RUN_TOKENS tokens (no stop); for every offset j a stop
                      string ending at token j's text (its last STOP_WINDOW tokens' text, and the same
                      one character short); the stopped request (same seed, same max_tokens) must return
                      `reference.serving.finish` of the unstopped run: ids (the completing token kept,
                      nothing after), text cut at the earliest match, the logprobs of the kept ids,
                      finish_reason "stop"; then the STOP_RUNS unstopped requests sent again (after every
                      stopped copy): ids, text and logprobs equal the first unstopped runs -- a seeded run
                      continues past a stop as plain decode's (the stopped request's ids are its prefix,
                      the tokens past the stop the same). Exact. On a server that takes seeds but does not honour them
                      (server.seeds fails it) the runs are greedy, sent one at a time. Catches stop strings
                      matched per step (vLLM PR #47616, SGLang PR #23802, ArcticInference #161,
                      onnxruntime-genai PR #2528).
    server.length     every cap c in 1..RUN_TOKENS, on greedy and seeded runs: len(ids) <= c, finish_reason
                      "length" iff the cap ended it, usage.completion_tokens == len(ids) and
                      usage.prompt_tokens == len(prompt); greedy runs (prefix-consistent whatever the cap)
                      must equal `finish` of the longest greedy run. Exact. Catches a cap crossed by an
                      accepted run and usage charging the whole block (SGLang #31599 / PR #33758, #39826,
                      ik_llama.cpp PR #2358).
    server.stream     runs like server.logprobs' (and each stopped mid-text; on a real vocabulary also
                      STREAM_TEXT_PROMPTS: quotes, multi-byte characters, emoji) streamed: concatenated deltas
                      == non-streamed text == detokenised ids (where the audit can detokenise), streamed
                      ids, logprobs, finish_reason and usage == non-streamed. Exact. Catches a stream that
                      sends only the last token of a step (vLLM PR #26027, #52469, rtp-llm PR #1285).
    server.seeds      SEED_PROBES seeded requests alone, again after WARMUPS unseeded warm-up requests, and
                      again among SEED_FILLERS concurrent fillers: the same tokens (exact); and
                      INDEPENDENCE_REQUESTS requests with n = 2 (distinct seeds): the first tokens of the
                      two choices independent (chi-squared test of independence, Holm with the family).
                      Catches generators offset by the engine's step count (TensorRT-LLM PRs #17599,
                      #17172) and n choices drawn from one stream.
    server.prefix_cache
                      CACHE_PROBES never-seen prompts (a fresh nonce: cold also for a re-audit) of
                      CACHE_PROMPT_TOKENS tokens, greedy and seeded, sent cold then warm: ids and logprob
                      bytes identical; on a toy model, prompts sharing CACHE_SHARED_TOKENS leading tokens
                      with them against the toy's exact greedy path. The warm requests must be seen served
                      from the cache (usage.prompt_tokens_details.cached_tokens > 0), else a SKIP: a stress
                      that did not happen is not a pass. Exact.

    server.preemption
                      PREEMPT_PROMPTS prompts x {greedy, seeded T=1} runs of RUN_TOKENS tokens, each sent
                      alone (one at a time), then in two waves (greedy, seeded: one seed), each wave ONE
                      completions request with the prompts as a list (`_wave`: admitted together, so which
                      request is preempted at which step does not depend on arrival times); the server's
                      preemption counter (GET /metrics, a sample named *num_preemptions_total: ours, vLLM's)
                      read before and after the waves must have grown -- every request of a wave is
                      compared, so a preemption hit a compared request -- else a SKIP (a stress that did not
                      happen is not a pass: start our server with a small --kv-budget); where the server
                      counts preemptions while decoding (*num_decode_preemptions_total: ours) that one must
                      have grown too, else a SKIP (a stale draft state is only read by a request resumed
                      mid-decode); a server without it is said so in the detail. Then each request's ids, text,
                      finish_reason and logprobs at once == alone: logprob bytes on a toy model (float64
                      rows), within LOGPROB_ATOL otherwise (a recompute row is a prefill row). Exact.
                      Catches a request resumed with stale draft state or KV (vLLM #52071, PRs #40768,
                      #46066, #49620).
    server.preemption.law
                      the run law under preemption (unseeded requests: no exact comparison reaches them):
                      max(PREEMPT_LAW_MIN_RUNS, samples // PREEMPT_LAW_PER_SAMPLE) unseeded T=1 runs of
                      PREEMPT_LAW_TOKENS tokens after one prompt of PREEMPT_LAW_PROMPT_TOKENS tokens, in waves
                      of PREEMPT_LAW_IN_FLIGHT (one request with the prompt listed that often, as
                      server.preemption's waves: admitted together), against the exact law of the target (a
                      model whose law the audit knows, as server.law) by Pearson chi-squared over the V^L
                      runs, at the audit's alpha; its power stated as the smallest total-variation distance detected with
                      probability ctx.power (an impossible run fails exactly). The preemption counters must
                      have grown during the runs (decode preemptions too where counted), else a SKIP.
                      Catches a preemption that resamples or keeps stale draft state in a law-changing way
                      (vLLM #52071, PRs #40768, #46066).

Text: a tiny:V,SEED server's words are known ("t{i}", `server.models.ToyTokenizer`), and so are the
one-character pieces of a `specverify models write` GGUF (`models.pieces`, the client's codec); any other server's
text of ids[:j] is read from the run's logprobs text_offset (prefix-stable detokenisation assumed:
a tokenizer whose pieces merge across tokens is then compared only where the offsets are given).
Not covered here: the run law and acceptance under a warm cache, concurrent
unseeded requests' independence; on a toy model, multi-byte text (its words are ASCII).

Budget (`--samples`): fixed prompts, runs and offsets (about 500 requests); --samples unused.
"""

from __future__ import annotations

import math

import numpy as np

from ..battery.base import FAIL, PASS, SKIP, CheckResult, Timer
from ..reference import serving as ref

RUNS_PROMPTS = 4           # prompts of the logprobs / stream runs
RUN_TOKENS = 12            # tokens a run
PROMPT_TOKENS = 6
TOP = 5                    # top entries asked per token (a toy model with V <= 5: its whole row)
LOGPROB_ATOL = 1e-3        # a float32 model: a prefill row vs a decode / verify row (reduction order only)
STOP_RUNS = 4
STOP_WINDOW = 3            # tokens whose text makes a stop string
WARMUPS = 3
SEED_PROBES = 2
SEED_FILLERS = 16
INDEPENDENCE_REQUESTS = 400
INDEPENDENCE_CELLS = 8     # first tokens binned into the most frequent 7 and "other"
IN_FLIGHT = 16
STREAM_TEXT_PROMPTS = ('He said: "ça va?" and wrote 日本語 🙂 then', 'Repeat after me: «naïve» “quoted” 🎉🎉 —')
CACHE_PROBES = 3
CACHE_PROMPT_TOKENS = 20   # more than a block of 16 (our server's and vLLM's default) is cached
CACHE_SHARED_TOKENS = 17   # the shared-prefix prompts share this many leading tokens
CACHE_TOKENS = 6           # within a tiny:V model's context (30 tokens at V = 4)
PREEMPT_PROMPTS = 6        # a wave: one request with 6 prompts (our toy server at --kv-budget 96 fits 6 prompts but
                           # not their growth: the latest admitted is preempted while decoding)
PREEMPTIONS_METRIC = "num_preemptions_total"
DECODE_PREEMPTIONS_METRIC = "num_decode_preemptions_total"    # ours: preempted after its first output token
PREEMPT_LAW_PROMPT_TOKENS = 11   # our server (blocks of 16, kappa 3): a toy request (its sentinel + 11) is
                                 # admitted with one block (12 + 3 + 1 positions) and needs a second once it
                                 # has emitted a token
PREEMPT_LAW_TOKENS = 4     # runs of 4 tokens: V^4 sequences (V <= 8, as server.law)
PREEMPT_LAW_IN_FLIGHT = 16 # runs a wave (one request, a list of prompts): more than a --kv-budget 96 cache holds
                           # while they decode
PREEMPT_LAW_PER_SAMPLE = 400   # runs = samples // 400 (500 at the default 200,000), at least ...
PREEMPT_LAW_MIN_RUNS = 500
PREEMPT_LAW_PROBE_RUNS = 64    # runs sent first: no (decode) preemption among them and the row is a SKIP
SEED_BASE = 7000           # the rows' request seeds: SEED_BASE + run index (fixed: the audit is reproducible)


def skip(name: str, why: str) -> CheckResult:
    return CheckResult(name, SKIP, detail=why, data={"not_covered": True})


def _fail(name, detail, n, t, **data) -> CheckResult:
    return CheckResult(name, FAIL, n=n, exact=True, seconds=t.seconds, detail=detail, data=data)


def _pass(name, detail, n, t, **data) -> CheckResult:
    return CheckResult(name, PASS, n=n, exact=True, seconds=t.seconds, detail=detail, data=data)


def _prompts(engine, count, salt, ctx) -> list:
    from .server import _prompts as server_prompts
    return server_prompts(engine, count, PROMPT_TOKENS, salt, ctx)


def _toy(engine):
    """(V, target ToyModel) of a tiny:V,SEED server, else None."""
    from specverify.server.models import parse_tiny, tiny_models
    tiny = parse_tiny(engine.client.model)
    return None if tiny is None else (tiny[0], tiny_models(*tiny)[0])


def _float64_rows(engine) -> bool:
    """Whether a toy model's logprobs come from its float64 rows (compared bit for bit): a server's always;
    an engine-level adapter's unless it says its engine casts them (`serving_float64_logprobs = False`:
    transformers' generate keeps float32 logits; compared within LOGPROB_ATOL)."""
    return bool(getattr(engine, "float64_logprobs", True))


def _top_n(engine) -> int:
    return min(TOP, engine.vocab) if engine.vocab else TOP


def _same_value(a: float, b: float, exact: bool) -> bool:
    if exact:
        return float(a).hex() == float(b).hex()
    if math.isinf(a) or math.isinf(b):
        return a == b
    return abs(a - b) <= LOGPROB_ATOL


def _logsumexp(values) -> float:
    """log(sum(exp(v))) of finite-or--inf values, max-shifted (reduction order: the values' order)."""
    m = max(values)
    if not math.isfinite(m):
        return m
    return m + math.log(math.fsum(math.exp(v - m) for v in values))


def _tol_words(exact: bool) -> str:
    return "bit for bit" if exact else f"within {LOGPROB_ATOL:g}"


def _token_names(engine, ids) -> list:
    """The names a server gives tokens in its top entries: "token_id:N" when asked for ids, else pieces
    (only a toy's are known to the audit)."""
    if engine.support.ids_via == "token_id_strings":
        return [f"token_id:{t}" for t in ids]
    codec = _codec(engine)
    if codec is not None:                # a GGUF's one-character pieces (models.pieces)
        return [codec.piece(t) for t in ids]
    if engine.vocab is not None:
        return [f" t{t}" for t in ids]
    return [None] * len(ids)


def _codec(engine):
    """The text codec the client reads ids through (a `specverify models write` GGUF's pieces), or None."""
    client = getattr(engine, "client", None)
    return getattr(client, "codec", None) if engine.support.ids_via == "pieces" else None


def _decoder(engine):
    """ids -> text for the served model when the audit knows it exactly (a GGUF's pieces, a toy's words;
    an engine-level adapter's `decode`)."""
    own = getattr(engine, "decode", None)
    if own is not None:
        return own
    codec = _codec(engine)
    if codec is not None:
        return codec.encode
    if engine.vocab is not None:
        from specverify.server.models import ToyTokenizer
        return ToyTokenizer(engine.vocab).decode
    return None


def _full(prompt, ids):
    if isinstance(prompt, str):
        return None
    return list(prompt) + list(ids)


def _runs(engine, prompts, ctx, *, logprobs=None, max_tokens=RUN_TOKENS, **extra) -> list:
    """Per prompt a greedy and a seeded (T=1) run: [(request, its choices, or its Response with full=True)]."""
    reqs = []
    for i, p in enumerate(prompts):
        reqs.append(dict(prompt=p, max_tokens=max_tokens, temperature=0.0, logprobs=logprobs, **extra))
        if engine.support["seed"]:
            reqs.append(dict(prompt=p, max_tokens=max_tokens, temperature=1.0, seed=SEED_BASE + i,
                             logprobs=logprobs, **extra))
    return list(zip(reqs, engine.client.many(reqs, IN_FLIGHT)))


# ------------------------------------------------------------------------------ logprobs

def logprobs_row(engine, ctx) -> CheckResult:
    s = engine.support
    name = f"server.logprobs[{RUNS_PROMPTS} prompts x {RUN_TOKENS} tokens, teacher-forced]"
    if not s["logprobs"]:
        return skip(name, "the server returns no logprobs")
    if not s["token_ids"] or not s["token_id_prompts"]:
        return skip(name, "needs token-id prompts and returned token ids (to teacher-force each prefix)")
    toy = _toy(engine)
    exact = toy is not None and _float64_rows(engine)
    top = _top_n(engine)
    as_ids = _ids_as_names(engine)
    extra = {"extra": as_ids} if as_ids else {}
    worst = 0.0
    with Timer() as t:
        runs = [(r, g[0]) for r, g in _runs(engine, _prompts(engine, RUNS_PROMPTS, "logprobs", ctx), ctx,
                                            logprobs=top, **extra)]
        tf_reqs = [dict(prompt=_full(r["prompt"], c.ids[:j]), max_tokens=1, temperature=0.0, logprobs=top, **extra)
                   for r, c in runs for j in range(len(c.ids))]
        tf = iter(engine.client.many(tf_reqs, IN_FLIGHT))
    compared = tops = whole = 0
    for k, (r, c) in enumerate(runs):
        names = [f"token_id:{x}" for x in c.ids] if as_ids else _token_names(engine, c.ids)
        kind = "greedy" if r["temperature"] == 0 else f"seed {r.get('seed')}"
        if c.logprobs is None or len(c.logprobs) != len(c.ids):
            return _fail(name, f"run {k} ({kind}): {len(c.ids)} tokens but "
                               f"{None if c.logprobs is None else len(c.logprobs)} logprobs", len(runs), t)
        for j, tok in enumerate(c.ids):
            forced = next(tf)[0]
            want_top = forced.top[0] if forced.top else {}
            if toy is not None:          # the toy's own row: the definition itself
                own = ref.log_softmax(toy[1].logits(_full(r["prompt"], c.ids[:j])))[tok]
                if not _same_value(c.logprobs[j], own, exact):
                    return _fail(name, f"run {k} ({kind}), position {j}: returned logprob {c.logprobs[j]!r} of token "
                                       f"{tok}, the target's log-softmax at that prefix {float(own)!r}", len(runs), t,
                                 run=k, position=j, returned=c.logprobs[j], expected=float(own))
            if names[j] is not None and names[j] in want_top:
                compared += 1
                if math.isfinite(c.logprobs[j]) and math.isfinite(want_top[names[j]]):
                    worst = max(worst, abs(c.logprobs[j] - want_top[names[j]]))
                if not _same_value(c.logprobs[j], want_top[names[j]], exact):
                    return _fail(name, f"run {k} ({kind}), position {j}: returned logprob {c.logprobs[j]!r} of token "
                                       f"{tok}, teacher-forced {want_top[names[j]]!r} (not {_tol_words(exact)})",
                                 len(runs), t, run=k, position=j, returned=c.logprobs[j],
                                 teacher_forced=want_top[names[j]])
            got_top = c.top[j] if c.top and j < len(c.top) else None
            if got_top is not None and want_top:
                tops += 1
                if set(got_top) != set(want_top) or not all(_same_value(got_top[x], want_top[x], exact)
                                                             for x in got_top):
                    return _fail(name, f"run {k} ({kind}), position {j}: top entries {got_top!r} differ from the "
                                       f"teacher-forced {want_top!r}", len(runs), t, run=k, position=j)
            if toy is None and got_top is not None and engine.vocab and len(got_top) == engine.vocab:
                mass = _logsumexp(list(got_top.values()))     # the whole row: a log-softmax sums to 1
                whole += 1
                if not abs(mass) <= LOGPROB_ATOL:
                    return _fail(name, f"run {k} ({kind}), position {j}: the {engine.vocab} top entries (the whole row) "
                                       f"have log-sum-exp {mass:.6g}, not 0: not log-probabilities (logits?)",
                                 len(runs), t, run=k, position=j, logsumexp=mass)
    if compared == 0:
        return skip(name, "no returned token could be matched to a teacher-forced top entry "
                          "(the server names tokens by text: ask it for return_tokens_as_token_ids)")
    return _pass(name, f"{compared} returned logprobs and {tops} top lists equal the teacher-forced ones "
                       f"{_tol_words(exact)}" + (" and the toy target's log-softmax" if toy else
                                                 f" (largest difference {worst:.3g})")
                       + (f"; {whole} whole-row top lists sum to 1" if whole else ""),
                 len(runs), t, compared=compared, tops=tops, max_abs_diff=worst, whole_rows=whole)


def _ids_as_names(engine) -> dict | None:
    """The extra body fields that make the server name tokens "token_id:N" in its logprobs (and still
    return ids), when it takes them; None when it does not (or names them so already)."""
    from specverify.server.client import PROBE_PROMPT, Unsupported
    client = engine.client
    if engine.support.ids_via == "token_id_strings":
        return None
    extra = {**client.extra, "return_tokens_as_token_ids": True}
    try:
        got = client.complete(PROBE_PROMPT, max_tokens=1, temperature=0.0, logprobs=1, extra=extra)
    except Unsupported:
        return None
    top = got[0].top[0] if got and got[0].top else {}
    return extra if top and all(str(k).startswith("token_id:") for k in top) else None


# ------------------------------------------------------------------------------ detokenising

def _detokenizer(engine, choice):
    """ids[:j] -> text, for the ids of `choice` (a toy's words, or the run's text offsets), or None."""
    if _decoder(engine) is not None:
        return _decoder(engine)
    off = choice.offsets
    if off is None or choice.ids is None or len(off) != len(choice.ids) or (off and off[0] != 0):
        return None
    ends = list(off[1:]) + [len(choice.text)]
    ids = tuple(choice.ids)

    def detok(prefix):
        n = len(prefix)
        if tuple(prefix) != ids[:n]:
            raise ValueError("detokenizer asked for ids that are not a prefix of its run")
        return choice.text[:ends[n - 1]] if n else ""
    return detok


# ------------------------------------------------------------------------------ stop

def stop_row(engine, ctx) -> CheckResult:
    s = engine.support
    name = f"server.stop[{STOP_RUNS} runs x {RUN_TOKENS} offsets x 2 strings]"
    missing = [f for f in ("stop", "token_ids", "token_id_prompts") if not s[f]]
    if missing:
        return skip(name, f"needs {', '.join(missing)}")
    from specverify.server.client import SEED_DIFFERS
    if not s["seed"] and s.why.get("seed") != SEED_DIFFERS:
        return skip(name, "needs seed")
    # a seed taken but not honoured (server.seeds fails it): the runs greedy instead, one request in
    # flight at a time, so that the stopped request's tokens do not depend on what else was batched
    greedy = not s["seed"]
    in_flight = 1 if greedy else IN_FLIGHT
    lp = 1 if s["logprobs"] else None
    exact = engine.vocab is not None and _float64_rows(engine)
    prompts = _prompts(engine, STOP_RUNS, "stop", ctx)
    with Timer() as t:
        base = [dict(prompt=p, max_tokens=RUN_TOKENS, temperature=0.0, logprobs=lp) if greedy else
                dict(prompt=p, max_tokens=RUN_TOKENS, temperature=1.0, seed=SEED_BASE + 100 + i, logprobs=lp)
                for i, p in enumerate(prompts)]
        free = [g[0] for g in engine.client.many(base, in_flight)]
        cases, reqs = [], []
        for k, (b, c) in enumerate(zip(base, free)):
            detok = _detokenizer(engine, c)
            if detok is None:
                return skip(name, "cannot detokenise the runs (no text offsets from the server)")
            for j in range(len(c.ids)):
                start = detok(c.ids[:max(0, j + 1 - STOP_WINDOW)])
                span = detok(c.ids[:j + 1])[len(start):]
                for stop in {span, span[:-1]} - {""}:
                    cases.append((k, j, stop, ref.finish(c.ids, max_tokens=RUN_TOKENS, detokenize=detok, stop=(stop,))))
                    reqs.append({**b, "stop": [stop]})
        got = engine.client.many(reqs, in_flight)
        again = [g[0] for g in engine.client.many(base, in_flight)]     # after the stops: the same run again
    where = []
    for (k, j, stop, want), g in zip(cases, got):
        c, base_c = g[0], free[k]
        where.append(len(want.ids) - 1)
        problems = []
        if c.ids != want.ids:
            problems.append(f"ids {list(c.ids)} (plain decode keeps {list(want.ids)})")
        if c.text != want.text:
            problems.append(f"text {c.text!r} (expected {want.text!r})")
        if c.finish_reason != want.finish_reason:
            problems.append(f"finish_reason {c.finish_reason!r} (expected {want.finish_reason!r})")
        if lp is not None:
            kept = want.logprobs(base_c.logprobs)
            if c.logprobs is None or len(c.logprobs) != len(kept) or not all(
                    _same_value(a, b, exact) for a, b in zip(c.logprobs, kept)):
                problems.append(f"{0 if c.logprobs is None else len(c.logprobs)} logprobs, expected the "
                                f"{len(kept)} of the kept ids")
        if problems:
            return _fail(name, f"run {k}, stop {stop!r} (completes at token {len(want.ids) - 1}, placed at {j}): "
                               + "; ".join(problems), len(cases), t, run=k, stop=stop, offset=j)
    for k, (b, c, a) in enumerate(zip(base, free, again)):   # a seeded run continues identically after a stop
        if a.ids != c.ids or a.text != c.text or (lp is not None and (
                a.logprobs is None or len(a.logprobs) != len(c.logprobs or ())
                or not all(_same_value(x, y, exact) for x, y in zip(a.logprobs, c.logprobs)))):
            j = next((i for i, (x, y) in enumerate(zip(a.ids, c.ids)) if x != y), min(len(a.ids), len(c.ids)))
            return _fail(name, f"run {k} ({'greedy' if greedy else 'seed ' + str(b.get('seed'))}) sent again after its "
                               f"stopped copies: ids {list(a.ids)} (first differing at {j}), before the stops "
                               f"{list(c.ids)}{'' if a.ids != c.ids else ' (text or logprobs differ)'}: the run does not "
                               "continue past a stop as plain decode's", len(cases) + len(base), t, run=k, position=j)
    return _pass(name, f"{len(cases)} stopped {'greedy' if greedy else 'seeded'} requests equal plain decode's "
                       f"completion (ids, text, finish_reason{', logprobs' if lp else ''}); stops completed at "
                       f"{len(set(where))} distinct positions; the {len(base)} runs sent again after them continue "
                       "identically past every stop"
                       + (" (greedy, one in flight: the server does not honour seeds)" if greedy else ""),
                 len(cases), t, positions=sorted(set(where)), greedy=greedy)


# ------------------------------------------------------------------------------ length

def length_row(engine, ctx) -> CheckResult:
    s = engine.support
    name = f"server.length[caps 1..{RUN_TOKENS}]"
    if not s["token_ids"] or not s["token_id_prompts"]:
        return skip(name, "needs token-id prompts and returned token ids")
    prompts = _prompts(engine, 2, "length", ctx)
    with Timer() as t:
        longest = [g[0] for g in engine.client.many(
            [dict(prompt=p, max_tokens=RUN_TOKENS, temperature=0.0) for p in prompts], IN_FLIGHT)]
        settings = [dict(temperature=0.0)] + ([dict(temperature=1.0, seed=SEED_BASE + 200)] if s["seed"] else [])
        reqs = [dict(prompt=p, max_tokens=c, temperature=st["temperature"], seed=st.get("seed"), full=True)
                for p in prompts for st in settings for c in range(1, RUN_TOKENS + 1)]
        got = engine.client.many(reqs, IN_FLIGHT)
    no_usage = 0
    for r, resp in zip(reqs, got):
        c, cap = resp.choices[0], r["max_tokens"]
        what = f"prompt {prompts.index(r['prompt'])}, {'greedy' if r['temperature'] == 0 else 'seeded'}, max_tokens {cap}"
        if len(c.ids) > cap:
            return _fail(name, f"{what}: {len(c.ids)} tokens returned (the cap crossed)", len(reqs), t, request=what)
        if c.finish_reason not in (ref.STOP, ref.LENGTH):
            return _fail(name, f"{what}: finish_reason {c.finish_reason!r}", len(reqs), t, request=what)
        if (c.finish_reason == ref.LENGTH) != (len(c.ids) == cap and c.finish_reason != ref.STOP):
            return _fail(name, f"{what}: finish_reason {c.finish_reason!r} with {len(c.ids)} tokens", len(reqs), t,
                         request=what)
        if engine.vocab is not None and (c.finish_reason != ref.LENGTH or len(c.ids) != cap):
            return _fail(name, f"{what}: a toy model has no EOS, yet {len(c.ids)} tokens and "
                               f"finish_reason {c.finish_reason!r}", len(reqs), t, request=what)
        if r["temperature"] == 0:        # greedy: the longest run cut at the cap (its EOS, if it stopped, kept)
            full = longest[prompts.index(r["prompt"])]
            want_ids, want_reason = ((full.ids[:cap], ref.LENGTH) if cap < len(full.ids)
                                     else (full.ids, full.finish_reason))
            if c.ids != want_ids or c.finish_reason != want_reason:
                return _fail(name, f"{what}: ids {list(c.ids)} / {c.finish_reason!r}, the longest greedy run "
                                   f"gives {list(want_ids)} / {want_reason!r}", len(reqs), t, request=what)
        u = resp.usage
        if u is None:
            no_usage += 1
            continue
        if u["completion_tokens"] != len(c.ids):
            return _fail(name, f"{what}: usage.completion_tokens {u['completion_tokens']} for {len(c.ids)} "
                               f"returned tokens", len(reqs), t, request=what, usage=u)
        if u["prompt_tokens"] != len(r["prompt"]) or u["total_tokens"] != u["prompt_tokens"] + u["completion_tokens"]:
            return _fail(name, f"{what}: usage {u} for a prompt of {len(r['prompt'])} tokens", len(reqs), t,
                         request=what, usage=u)
    if no_usage == len(reqs):           # the caps were checked; usage is listed apart (`usage_row`)
        return _pass(name, f"{len(reqs)} requests: len(ids) <= max_tokens and finish_reason right (no usage "
                           "block: usage not checked)", len(reqs), t, usage_checked=False)
    return _pass(name, f"{len(reqs)} requests: len(ids) <= max_tokens, finish_reason and usage right"
                       + (f" ({no_usage} without usage)" if no_usage else ""), len(reqs), t, usage_checked=True)


def usage_rows(length: CheckResult) -> list:
    """[] when the length row checked usage (or did not run); else a SKIP listed under not covered: a
    server (or engine) that returns no usage block had its caps checked, its usage not."""
    if length.verdict == SKIP or length.data.get("usage_checked", True):
        return []
    return [skip("server.length.usage", "the server returns no usage block: usage.completion_tokens == "
                                        "len(ids) not checked")]


# ------------------------------------------------------------------------------ stream

def stream_row(engine, ctx) -> CheckResult:
    s = engine.support
    name = f"server.stream[{RUNS_PROMPTS if engine.vocab else RUNS_PROMPTS + len(STREAM_TEXT_PROMPTS)} prompts x " \
           "greedy/seeded, with and without a stop]"
    if not s["stream"]:
        return skip(name, "the server does not stream (or its greedy stream differs from its answer: see not covered)")
    lp = 1 if s["logprobs"] else None
    prompts = _prompts(engine, RUNS_PROMPTS, "stream", ctx)
    if engine.vocab is None:             # a real vocabulary: quotes, multi-byte characters, emoji (byte pieces)
        prompts = list(prompts) + list(STREAM_TEXT_PROMPTS)
    with Timer() as t:
        plain = _runs(engine, prompts, ctx, logprobs=lp, full=True)
        reqs = [r for r, _ in plain]
        if s["stop"]:                    # the same runs, stopped at a string from their middle
            for r, resp in list(plain):
                c = resp.choices[0]
                stop = c.text[len(c.text) // 2:len(c.text) // 2 + 4].strip() or None
                if stop:
                    reqs.append({**r, "stop": [stop]})
        plain_all = engine.client.many(reqs, IN_FLIGHT)
        streamed = engine.client.many([{**r, "stream": True} for r in reqs], IN_FLIGHT)
    exact = engine.vocab is not None and _float64_rows(engine)
    detok = _decoder(engine)
    for i, (r, a, b) in enumerate(zip(reqs, plain_all, streamed)):
        a, b, ua, ub = a.choices[0], b.choices[0], a.usage, b.usage
        what = f"request {i} ({'greedy' if r['temperature'] == 0 else 'seeded'}{', stop ' + repr(r['stop'][0]) if 'stop' in r else ''})"
        problems = []
        if ref.stream_text(b.deltas or ()) != a.text:
            problems.append(f"streamed text {ref.stream_text(b.deltas or ())!r} != non-streamed {a.text!r}")
        if a.ids is not None and b.ids is not None and a.ids != b.ids:
            problems.append(f"streamed ids {list(b.ids)} != non-streamed {list(a.ids)}")
        if detok is not None and a.ids is not None and "stop" not in r and detok(a.ids) != a.text:
            problems.append(f"text {a.text!r} != detokenised ids {detok(a.ids)!r}")
        if a.finish_reason != b.finish_reason:
            problems.append(f"finish_reason {b.finish_reason!r} streamed, {a.finish_reason!r} not")
        if lp is not None and (b.logprobs is None or len(b.logprobs) != len(a.logprobs or ()) or not all(
                _same_value(x, y, exact) for x, y in zip(a.logprobs, b.logprobs))):
            problems.append("streamed logprobs differ")
        counts = ("prompt_tokens", "completion_tokens", "total_tokens")     # not cached_tokens: the cache warms
        if ua is not None and ub is not None and any(ua[k] != ub[k] for k in counts):
            problems.append(f"streamed usage {ub} != {ua}")
        if a.ids is not None and ua is not None and ua["completion_tokens"] != len(a.ids):
            problems.append(f"usage.completion_tokens {ua['completion_tokens']} for {len(a.ids)} ids")
        if problems:
            return _fail(name, f"{what}: " + "; ".join(problems), len(reqs), t, request=i)
    return _pass(name, f"{len(reqs)} requests: concatenated deltas == non-streamed text"
                       + (" == detokenised ids" if detok else "") + "; ids, logprobs, finish_reason, usage equal",
                 len(reqs), t)


# ------------------------------------------------------------------------------ seeds

def seeds_rows(engine, ctx) -> list:
    from specverify.server.client import SEED_DIFFERS

    s = engine.support
    name = f"server.seeds[{SEED_PROBES} probes: alone, after {WARMUPS} warm-ups, among {SEED_FILLERS} fillers]"
    if not s["seed"] and s.why.get("seed") != SEED_DIFFERS:
        return [skip(name, "the server does not take seed")]      # refused; a seed taken but not honoured fails below
    lp = 1 if s["logprobs"] else None
    prompts = _prompts(engine, SEED_PROBES, "seeds", ctx)
    fill = _prompts(engine, SEED_FILLERS, "seed-fillers", ctx)
    probes = [dict(prompt=p, max_tokens=RUN_TOKENS, temperature=1.0, seed=SEED_BASE + 300 + i, logprobs=lp)
              for i, p in enumerate(prompts)]
    warm = [dict(prompt=p, max_tokens=RUN_TOKENS, temperature=1.0) for p in fill[:WARMUPS]]
    fillers = [dict(prompt=p, max_tokens=RUN_TOKENS + 4, temperature=1.0) for p in fill]
    with Timer() as t:
        alone = [engine.client.many([r], 1)[0][0] for r in probes]
        for w in warm:
            engine.client.many([w], 1)
        after = [engine.client.many([r], 1)[0][0] for r in probes]
        crowded = [engine.client.many(fillers + [r], len(fillers) + 1)[-1][0] for r in probes]
    rows = []
    bad = None
    for i, (a, b, c) in enumerate(zip(alone, after, crowded)):
        for label, x in (("after the warm-ups", b), ("among the fillers", c)):
            if x.ids != a.ids or x.text != a.text:
                bad = (i, label, a, x)
                break
        if bad:
            break
    if bad:
        i, label, a, x = bad
        rows.append(_fail(name, f"probe {i} (seed {probes[i]['seed']}): tokens {label} "
                                f"{list(x.ids or ())[:8] or x.text[:40]!r}... differ from alone "
                                f"{list(a.ids or ())[:8] or a.text[:40]!r}...", len(probes), t, probe=i, where=label))
    else:
        rows.append(_pass(name, f"{len(probes)} seeded probes identical alone, after {WARMUPS} warm-up requests "
                                f"and among {SEED_FILLERS} concurrent fillers", len(probes), t))
    rows.append(_independence(engine, ctx))
    return rows


def _independence(engine, ctx) -> CheckResult:
    from scipy import stats as sps

    s = engine.support
    name = f"server.seeds.n_independent[{INDEPENDENCE_REQUESTS} requests, n=2]"
    if not s["n"]:
        return skip(name, "the server does not take n > 1")
    prompt = _prompts(engine, 1, "independence", ctx)[0]
    seeds = ctx.draws("server-independence").integers(0, 2**62, size=INDEPENDENCE_REQUESTS)
    with Timer() as t:
        got = engine.client.many([dict(prompt=prompt, max_tokens=1, temperature=1.0, n=2, seed=int(sd))
                                  for sd in seeds], IN_FLIGHT)
    firsts = [tuple((c.ids[0] if c.ids else c.text) for c in g) for g in got]
    values, counts = np.unique(np.array([repr(x) for f in firsts for x in f]), return_counts=True)
    keep = [v for _, v in sorted(zip(-counts, values))][:INDEPENDENCE_CELLS - 1]
    cell = {v: i for i, v in enumerate(keep)}
    other = len(keep)
    table = np.zeros((other + 1, other + 1), np.int64)
    for a, b in firsts:
        table[cell.get(repr(a), other), cell.get(repr(b), other)] += 1
    table = table[table.sum(1) > 0][:, table.sum(0) > 0]
    if min(table.shape) < 2:
        return skip(name, "every first token the same: no independence to test at this prompt")
    res = sps.chi2_contingency(table, correction=False)
    same = sum(1 for a, b in firsts if a == b)
    return CheckResult(name, PASS, statistic=float(res.statistic), p_value=float(res.pvalue), dof=int(res.dof),
                       n=INDEPENDENCE_REQUESTS, seconds=t.seconds,
                       detail=f"first tokens of the 2 choices of {INDEPENDENCE_REQUESTS} seeded requests: chi-squared "
                              f"test of independence over {table.shape[0]}x{table.shape[1]} cells ({same} pairs equal)",
                       data={"table": table.tolist()})


# ------------------------------------------------------------------------------ prefix cache

def prefix_cache_row(engine, ctx) -> CheckResult:
    """Each probe prompt cold (never seen: a fresh nonce in it), then warm (the same request again),
    greedy and seeded: ids and logprob bytes identical; on a toy model also a prompt sharing the probe's
    first tokens (its prefix served from the cache) against the toy's exact greedy path. The cache must
    be seen hit (usage.prompt_tokens_details.cached_tokens > 0 on the warm requests): a stress that did not
    happen is not a pass."""
    s = engine.support
    name = f"server.prefix_cache[{CACHE_PROBES} prompts of {CACHE_PROMPT_TOKENS} tokens: cold, warm, shared prefix]"
    if not s["token_ids"] or not s["token_id_prompts"]:
        return skip(name, "needs token-id prompts and returned token ids")
    lp = 1 if s["logprobs"] else None
    high = min(engine.vocab or 64, 64)
    nonce = np.random.default_rng()            # cold means never sent before, also by an earlier audit
    prompts = [tuple(int(t) for t in nonce.integers(0, high, size=CACHE_PROMPT_TOKENS)) for _ in range(CACHE_PROBES)]
    modes = [dict(temperature=0.0)] + ([dict(temperature=1.0, seed=SEED_BASE + 400)] if s["seed"] else [])

    def reqs(ps):
        return [dict(prompt=p, max_tokens=CACHE_TOKENS, logprobs=lp, full=True, **m) for p in ps for m in modes]

    shared = [p[:CACHE_SHARED_TOKENS] + tuple(int(t) for t in nonce.integers(0, high, size=CACHE_PROMPT_TOKENS -
                                                                             CACHE_SHARED_TOKENS)) for p in prompts]
    with Timer() as t:
        cold = engine.client.many(reqs(prompts), 1)
        warm = engine.client.many(reqs(prompts), 1)
        sharing = engine.client.many([dict(prompt=p, max_tokens=CACHE_TOKENS, temperature=0.0, logprobs=lp, full=True)
                                      for p in shared], 1)
    n = len(cold) + len(sharing)
    for i, (a, b) in enumerate(zip(cold, warm)):
        a, b = a.choices[0], b.choices[0]
        if a.ids != b.ids or _hex(a.logprobs) != _hex(b.logprobs):
            what = "ids" if a.ids != b.ids else "logprob bytes"
            return _fail(name, f"prompt {i // len(modes)} ({'greedy' if i % len(modes) == 0 else 'seeded'}): {what} "
                               f"differ cold vs warm (cold {list(a.ids)[:8]}..., warm {list(b.ids)[:8]}...)", n, t,
                         prompt=list(prompts[i // len(modes)]))
    toy = _toy(engine)
    if toy is not None:
        for i, (p, resp) in enumerate(zip(shared, sharing)):
            want, ctx_ids = [], list(p)
            for _ in range(CACHE_TOKENS):
                lsm = ref.log_softmax(toy[1].logits(ctx_ids))
                want.append(int(np.argmax(lsm)))
                ctx_ids.append(want[-1])
            c = resp.choices[0]
            if list(c.ids) != want:
                return _fail(name, f"shared-prefix prompt {i}: ids {list(c.ids)}, the toy's greedy path {want}", n, t,
                             prompt=list(p))
    hits = [r.usage.get("cached_tokens") for r in warm + sharing if r.usage is not None]
    if not hits or any(h is None for h in hits):
        return skip(name, "the server does not report cache hits (usage.prompt_tokens_details.cached_tokens): "
                          "cold and warm agreed, but whether the cache served them is unknown")
    cold_hits = sum(r.usage.get("cached_tokens") or 0 for r in cold[::len(modes)])
    if max(hits) == 0:
        return skip(name, f"no warm request was served from the cache (cached_tokens 0 on all {len(hits)}): the warm "
                          "path was not exercised")
    return _pass(name, f"{len(cold)} requests identical cold and warm (ids{' and logprob bytes' if lp else ''})"
                       + (", shared-prefix prompts on the toy's exact greedy path" if toy is not None else "")
                       + f"; cached tokens: cold {cold_hits}, warm and shared {sum(hits)}", n, t,
                 cached_warm=hits, cached_cold=cold_hits)


def _hex(values):
    return None if values is None else [float(v).hex() for v in values]


# ------------------------------------------------------------------------------ preemption

def _wave(engine, reqs) -> list:
    """The requests of one kind (same temperature, seed, logprobs) as ONE completions request with a list
    of prompts: a server that queues a request's prompts together (ours: `Batcher.submit` takes them at
    once) admits them in one step, so which request is preempted at which step does not depend on arrival
    times. A server that refuses prompt lists gets them concurrently. One choice per request, in order."""
    from specverify.server.client import Unsupported
    first = reqs[0]
    try:
        return list(engine.client.complete([r["prompt"] for r in reqs], max_tokens=first["max_tokens"],
                                           temperature=first["temperature"], seed=first.get("seed"),
                                           logprobs=first["logprobs"]))
    except Unsupported:
        return [g[0] for g in engine.client.many(reqs, len(reqs))]


def preemption_row(engine, ctx) -> CheckResult:
    """Module docstring, server.preemption."""
    s = engine.support
    kinds = "greedy/seeded" if s["seed"] else "greedy"
    name = f"server.preemption[{PREEMPT_PROMPTS} prompts x {kinds}: alone vs a wave of {PREEMPT_PROMPTS} at once]"
    before = engine.client.counter(PREEMPTIONS_METRIC)
    if before is None:
        return skip(name, f"the server exposes no preemption counter (GET /metrics, a *{PREEMPTIONS_METRIC} "
                          "sample): whether the traffic preempted anything is unknown")
    lp = 1 if s["logprobs"] else None
    exact = _toy(engine) is not None and _float64_rows(engine)
    prompts = _prompts(engine, PREEMPT_PROMPTS, "preemption", ctx)
    waves = [[dict(prompt=p, max_tokens=RUN_TOKENS, temperature=0.0, logprobs=lp) for p in prompts]]
    if s["seed"]:              # one seed for the wave (a list of prompts shares the request's seed)
        waves.append([dict(prompt=p, max_tokens=RUN_TOKENS, temperature=1.0, seed=SEED_BASE + 500, logprobs=lp)
                      for p in prompts])
    reqs = [r for w in waves for r in w]
    with Timer() as t:
        alone = [engine.client.many([r], 1)[0][0] for r in reqs]
        mid = engine.client.counter(PREEMPTIONS_METRIC)
        mid_decode = engine.client.counter(DECODE_PREEMPTIONS_METRIC)
        crowd = [c for w in waves for c in _wave(engine, w)]
        after = engine.client.counter(PREEMPTIONS_METRIC)
        after_decode = engine.client.counter(DECODE_PREEMPTIONS_METRIC)
    preempted = (after or 0.0) - (mid or 0.0)
    decode = None if mid_decode is None or after_decode is None else after_decode - mid_decode
    counts = dict(preemptions_alone=(mid or 0.0) - before, preemptions_at_once=preempted,
                  decode_preemptions_at_once=decode)
    if preempted <= 0:
        return CheckResult(name, SKIP, n=len(reqs), seconds=t.seconds,
                           detail=f"no preemption during the waves of {PREEMPT_PROMPTS} requests at once (the counter "
                                  f"stayed at {after:g}): the KV budget was not tight enough (our server: specverify "
                                  "serve --kv-budget N); nothing was tested", data={"not_covered": True, **counts})
    if decode is not None and decode <= 0:
        return CheckResult(name, SKIP, n=len(reqs), seconds=t.seconds,
                           detail=f"{preempted:g} preemptions in the waves, none of a request while decoding (the "
                                  f"*{DECODE_PREEMPTIONS_METRIC} counter stayed at {after_decode:g}): a resume with "
                                  "stale draft state was not exercised", data={"not_covered": True, **counts})
    where = (f"{decode:g} of them while decoding" if decode is not None
             else f"the server does not say which while decoding (no *{DECODE_PREEMPTIONS_METRIC} sample)")
    for i, (r, a, b) in enumerate(zip(reqs, alone, crowd)):
        kind = "greedy" if r["temperature"] == 0 else f"seed {r['seed']}"
        problems = []
        if a.ids != b.ids or a.text != b.text:
            problems.append(f"tokens {list(b.ids or ())[:8] or b.text[:40]!r}... differ from alone "
                            f"{list(a.ids or ())[:8] or a.text[:40]!r}...")
        if a.finish_reason != b.finish_reason:
            problems.append(f"finish_reason {b.finish_reason!r}, alone {a.finish_reason!r}")
        if lp is not None and not problems and (a.logprobs is None or b.logprobs is None
                                                 or len(a.logprobs) != len(b.logprobs)
                                                 or not all(_same_value(x, y, exact)
                                                            for x, y in zip(a.logprobs, b.logprobs))):
            problems.append(f"logprobs differ from alone (not {_tol_words(exact)})")
        if problems:
            return _fail(name, f"request {i} ({kind}) in a wave of {PREEMPT_PROMPTS} at once ({preempted:g} "
                               f"preemptions, {where}): " + "; ".join(problems), len(reqs), t, request=i, **counts)
    return _pass(name, f"{len(waves)} waves of {PREEMPT_PROMPTS} requests at once, {preempted:g} preemptions ({where}): "
                       "ids, text, finish_reason" + (f" and logprobs ({_tol_words(exact)})" if lp else "")
                 + " equal to each alone", len(reqs), t, **counts)


def _law_model(engine):
    """The float64 target whose exact run law the audit knows: a tiny:V,SEED model's, or a `specverify models
    write` folder's (`server.audit.known_law`), else None."""
    known = getattr(engine, "law", None)
    if known is not None:
        return known.vocab, known.model
    return _toy(engine)


def preemption_law_budget(ctx) -> int:
    """Runs of the preemption law row: samples // PREEMPT_LAW_PER_SAMPLE, at least PREEMPT_LAW_MIN_RUNS."""
    return max(PREEMPT_LAW_MIN_RUNS, ctx.samples // PREEMPT_LAW_PER_SAMPLE)


def preemption_law_row(engine, ctx) -> CheckResult:
    """The run law under preemption (module docstring, server.preemption.law): unseeded T=1 runs of
    PREEMPT_LAW_TOKENS tokens after one prompt of PREEMPT_LAW_PROMPT_TOKENS tokens, sent PREEMPT_LAW_IN_FLIGHT
    at once so that the KV budget preempts them while they decode, against the exact law of the target
    (`reference.laws.target_law`) by Pearson chi-squared over the V^L runs (`joint.sequence_gof`: an
    impossible run fails exactly). The decode-preemption counter must have grown, else a SKIP."""
    from specverify.reference import laws
    from specverify.reference.transforms import Transform

    from .joint import sequence_gof
    from .server import MAX_LAW_SEQUENCES

    n = preemption_law_budget(ctx)
    name = f"server.preemption.law[{n} unseeded runs of {PREEMPT_LAW_TOKENS} tokens, waves of {PREEMPT_LAW_IN_FLIGHT}]"
    s = engine.support
    if not s["token_ids"] or not s["token_id_prompts"]:
        return skip(name, "needs token-id prompts and returned token ids")
    known = _law_model(engine)
    if known is None:
        return skip(name, f"model {engine.client.model!r} has no law the audit knows (serve tiny:V,SEED or a "
                          "`specverify models write` folder)")
    vocab, target = known
    if vocab ** PREEMPT_LAW_TOKENS > MAX_LAW_SEQUENCES:
        return skip(name, f"the law spans {vocab}^{PREEMPT_LAW_TOKENS} runs, more than {MAX_LAW_SEQUENCES}")
    before = engine.client.counter(PREEMPTIONS_METRIC)
    before_decode = engine.client.counter(DECODE_PREEMPTIONS_METRIC)
    if before is None:
        return skip(name, f"the server exposes no preemption counter (GET /metrics, a *{PREEMPTIONS_METRIC} "
                          "sample): whether the runs were preempted is unknown")
    prompt = tuple(int(t) for t in ctx.rng("server-preemption-law").integers(0, vocab, size=PREEMPT_LAW_PROMPT_TOKENS))
    req = dict(prompt=prompt, max_tokens=PREEMPT_LAW_TOKENS, temperature=1.0, seed=None, logprobs=None)

    def waves(count):        # one completions request a wave (`_wave`: admitted together, preempted alike)
        out = []
        while len(out) < count:
            out += _wave(engine, [req] * min(PREEMPT_LAW_IN_FLIGHT, count - len(out)))
        return out
    def counts():
        after = engine.client.counter(PREEMPTIONS_METRIC)
        after_decode = engine.client.counter(DECODE_PREEMPTIONS_METRIC)
        decode = None if before_decode is None or after_decode is None else after_decode - before_decode
        return dict(preemptions=(after or 0.0) - before, decode_preemptions=decode)

    def unstressed(c):
        return c["preemptions"] <= 0 or (c["decode_preemptions"] is not None and c["decode_preemptions"] <= 0)

    with Timer() as t:       # a first slice: a server that preempts nothing is a SKIP without the rest
        first = min(n, PREEMPT_LAW_PROBE_RUNS)
        got = waves(first)
        seen = counts()
        if not unstressed(seen):
            got += waves(n - first)
            seen = counts()
    preempted, decode = seen["preemptions"], seen["decode_preemptions"]
    if unstressed(seen):
        what = "no preemption" if preempted <= 0 else f"{preempted:g} preemptions, none while decoding"
        return CheckResult(name, SKIP, n=len(got), seconds=t.seconds,
                           detail=f"{what} during {len(got)} runs in waves of {PREEMPT_LAW_IN_FLIGHT}: the KV budget "
                                  "was not tight enough (our server: specverify serve --kv-budget N); the law was not "
                                  "tested", data={"not_covered": True, **seen})
    tokens = np.full((n, PREEMPT_LAW_TOKENS), -1, np.int64)
    short = 0
    for i, c in enumerate(got):
        ids = list(c.ids or ())[:PREEMPT_LAW_TOKENS]
        tokens[i, :len(ids)] = ids
        short += len(ids) != PREEMPT_LAW_TOKENS
    law = laws.target_law(laws.Transformed(target, Transform(temperature=1.0)), prompt, PREEMPT_LAW_TOKENS)
    row = sequence_gof(name, tokens, law, t.seconds, ctx)
    if short and row.verdict != FAIL:
        row.verdict, row.exact = FAIL, True
        row.detail = f"{short} of {n} runs did not return {PREEMPT_LAW_TOKENS} tokens (a toy model has no EOS)"
    where = (f"{decode:g} of them while decoding" if decode is not None
             else f"the server does not say which while decoding (no *{DECODE_PREEMPTIONS_METRIC} sample)")
    row.detail = f"{preempted:g} preemptions ({where}); " + row.detail
    row.data.update(seen)
    return row


# ------------------------------------------------------------------------------ the check

def run(engine, ctx) -> list[CheckResult]:
    if getattr(engine, "client", None) is None or "server" not in getattr(engine, "capabilities", ()):
        return [skip("serving", "not a server: audit an OpenAI-compatible URL (specverify audit http://HOST:PORT/v1)")]
    support = engine.client.probe()
    length = length_row(engine, ctx)
    rows = [logprobs_row(engine, ctx), stop_row(engine, ctx), length, *usage_rows(length), stream_row(engine, ctx)]
    rows += seeds_rows(engine, ctx)
    rows.append(prefix_cache_row(engine, ctx))
    rows.append(preemption_row(engine, ctx))
    rows.append(preemption_law_row(engine, ctx))
    for r in rows:
        r.data.setdefault("support", support.to_dict())
    return rows


__all__ = ["run"]
