"""The server level: an OpenAI-compatible completions server, audited over HTTP (`specverify audit URL`).

The engine is a `specverify.server.audit.ServerEngine`: the client of the speculative server under
audit and, with --plain-url, of a plain (non-speculative) server of the same model. What each server
supports is probed first (`server.client.ServerClient.probe`); a row that needs what a server lacks is
a SKIP listed under not covered, never a pass.

    server.greedy_bitwise   spec vs plain server at temperature 0, GREEDY_PROMPTS prompts of
                            GREEDY_TOKENS tokens, IN_FLIGHT requests open on each: the token ids (text
                            when the server returns no ids) and the returned logprobs, compared as the
                            bytes of the float64 values sent (float.hex); the first divergence with its
                            margin (plain's top-1 minus top-2 logprob there). Exact. Needs --plain-url.
    server.needle           each of NEEDLE_PROBES probe requests (greedy, and seeded at temperature 1
                            where seed is honoured) sent alone, then again inside NEEDLE_FILLERS
                            concurrent filler requests (longer, other prompts and settings): ids and
                            logprobs must be identical (batch invariance and seeded reproducibility
                            under traffic). Exact.
    server.law              a server whose model has a law the audit knows (`server.audit.known_law`: a toy
                            model "tiny:V,SEED" served by `specverify serve`, or a tiny Llama written by
                            `specverify models write`, found from the served model's path-name or
                            --law-model, its law a float64 forward of the folder's weights):
                            seeded runs of LAW_TOKENS tokens after LAW_PROMPT
                            against the exact law of the transformed target (`reference.laws.target_law`),
                            by Pearson chi-squared over the V^L sequences (an impossible sequence fails
                            exactly). Rows: temperature 1, and temperature 0.8 with top_p 0.9.
    server.spec_vs_plain    any model: the same prompt and settings against both servers (a toy model:
                            LAW_PROMPT, T=1, 4 tokens; any other: one prompt, T=0.5, 3 tokens), the two run
                            laws compared by the two-sample e-process (`stats.TwoSampleEProcess`, cells =
                            the distinct runs seen in both arms, so the test holds without a law). Its
                            p-value is the anytime-valid 1 / max e. Stated power: the one-sample e-process
                            bound at the effective size n_a n_b / (n_a + n_b) (an approximation for two
                            samples; tests/test_server.py measures that a biased server fails).
                            Needs --plain-url.

Budget (`--samples`): samples // 20 runs per law row and per arm of spec_vs_plain (at least 500); fixed prompts and tokens for greedy_bitwise and needle.
"""

from __future__ import annotations

import numpy as np

from ..battery.base import FAIL, PASS, SKIP, CheckResult, Timer

GREEDY_PROMPTS = 16
GREEDY_TOKENS = 16
IN_FLIGHT = 16
NEEDLE_PROBES = 4
NEEDLE_FILLERS = 16
FILLER_EXTRA_TOKENS = 8        # fillers run this much longer than the probe (within a toy model's context of 31)
LAW_PROMPT = (1,)
LAW_TOKENS = 4
MAX_LAW_SEQUENCES = 4096       # V^LAW_TOKENS runs enumerated by the exact law: V <= 8
RUNS_PER_REQUEST = 50          # choices per request (n) where the server gives distinct seeded choices
MIN_RUNS = 500
RUNS_PER_SAMPLE = 20           # runs per row = samples // RUNS_PER_SAMPLE
LAW_TRANSFORMS = ((1.0, 1.0), (0.8, 0.9))      # (temperature, top_p)
SPEC_VS_PLAIN_TOKENS = 4       # run length compared between two servers of a toy model (its V^4 runs)
REAL_TEMPERATURE = 0.5         # ... and of any other model: cooler and shorter runs, so that the distinct
REAL_TOKENS = 3                # runs are few enough for the test to have power at a server's budget
PAD = -1


def budget(ctx) -> int:
    return max(MIN_RUNS, ctx.samples // RUNS_PER_SAMPLE)


def skip(name: str, why: str) -> CheckResult:
    return CheckResult(name, SKIP, detail=why, data={"not_covered": True})


def _prompts(engine, count: int, length: int, salt: str, ctx) -> list:
    """`count` prompts the server takes: token ids in [0, min(V, 64)) if it takes ids, else text from
    the repo's prompt set."""
    words = getattr(engine, "word_vocab", None)
    if engine.support.prompt_kind == "text" and words:       # a tiny Llama folder's words "t0".."t{V-1}"
        rng = ctx.rng("server-prompts", salt)
        return [" ".join(f"t{int(t)}" for t in rng.integers(0, words, size=length)) for _ in range(count)]
    if engine.support.prompt_kind == "text":
        from specverify.models.prompts import load_prompts
        texts = [p if isinstance(p, str) else p.get("text", str(p)) for p in load_prompts(count, full=True)]
        return [str(t)[:200] for t in texts]
    high = min(engine.vocab or 64, 64)
    rng = ctx.rng("server-prompts", salt)
    return [tuple(int(t) for t in rng.integers(0, high, size=length)) for _ in range(count)]


def _key(c):
    return c.ids if c.ids is not None else c.text


def _hex(values) -> list:
    return [float(v).hex() for v in values] if values is not None else None


# ------------------------------------------------------------------------------ greedy bitwise

def greedy_bitwise(engine, ctx) -> CheckResult:
    name = f"server.greedy_bitwise[{GREEDY_PROMPTS} prompts x {GREEDY_TOKENS} tokens, {IN_FLIGHT} in flight]"
    if engine.plain is None:
        return skip(name, "needs --plain-url (a plain server of the same model)")
    s, ps = engine.support, engine.plain.probe()
    lp = 2 if s["logprobs"] and ps["logprobs"] else None
    prompts = _prompts(engine, GREEDY_PROMPTS, 6, "greedy", ctx)
    reqs = [dict(prompt=p, max_tokens=GREEDY_TOKENS, temperature=0.0, logprobs=lp) for p in prompts]
    with Timer() as t:
        spec = engine.client.many(reqs, IN_FLIGHT)
        plain = engine.plain.many(reqs, IN_FLIGHT)
    compared = "ids" if s["token_ids"] and ps["token_ids"] else "text"
    for i, (a, b) in enumerate(zip(spec, plain)):
        a, b = a[0], b[0]
        ka, kb = (a.ids, b.ids) if compared == "ids" else (a.text, b.text)
        if ka != kb:
            j = next((j for j, (x, y) in enumerate(zip(ka, kb)) if x != y), min(len(ka), len(kb)))
            margin = _margin(b, j)
            return CheckResult(name, FAIL, n=len(prompts), exact=True, seconds=t.seconds,
                               detail=f"prompt {i}: spec and plain {compared} differ first at position {j} "
                                      f"(spec {_at(ka, j)!r}, plain {_at(kb, j)!r})"
                                      + (f", plain's top-2 logprob margin there {margin:.3g}" if margin is not None else ""),
                               data={"prompt": list(prompts[i]) if not isinstance(prompts[i], str) else prompts[i],
                                     "position": j, "spec": list(ka), "plain": list(kb), "margin": margin})
        if lp is not None and _hex(a.logprobs) != _hex(b.logprobs):
            j = next(j for j, (x, y) in enumerate(zip(_hex(a.logprobs), _hex(b.logprobs))) if x != y)
            return CheckResult(name, FAIL, n=len(prompts), exact=True, seconds=t.seconds,
                               detail=f"prompt {i}: same tokens, logprob bytes differ first at position {j} "
                                      f"(spec {a.logprobs[j]!r}, plain {b.logprobs[j]!r})",
                               data={"prompt_index": i, "position": j})
    what = compared + (" and logprob bytes" if lp is not None else " (no logprobs: values not compared)")
    return CheckResult(name, PASS, n=len(prompts), exact=True, seconds=t.seconds,
                       detail=f"{len(prompts)} greedy completions identical between spec and plain server: {what}",
                       data={"compared": what})


def _at(seq, j):
    return seq[j] if j < len(seq) else "<end>"


def _margin(choice, j):
    """Top-1 minus top-2 logprob at position j of a choice with top entries, or None."""
    if not choice.top or j >= len(choice.top) or not isinstance(choice.top[j], dict) or len(choice.top[j]) < 2:
        return None
    v = sorted(choice.top[j].values(), reverse=True)
    return float(v[0] - v[1])


# ------------------------------------------------------------------------------ needle

def needle(engine, ctx) -> CheckResult:
    s = engine.support
    name = f"server.needle[{NEEDLE_PROBES} probes x {NEEDLE_FILLERS} fillers]"
    lp = 1 if s["logprobs"] else None
    prompts = _prompts(engine, NEEDLE_PROBES, 5, "needle", ctx)
    probes = []
    for i, p in enumerate(prompts):
        if i % 2 == 0 or not s["seed"]:
            probes.append(dict(prompt=p, max_tokens=GREEDY_TOKENS, temperature=0.0, logprobs=lp))
        else:
            probes.append(dict(prompt=p, max_tokens=GREEDY_TOKENS, temperature=1.0, seed=1000 + i, logprobs=lp))
    fill_prompts = _prompts(engine, NEEDLE_FILLERS, 4, "fillers", ctx)
    fillers = [dict(prompt=p, max_tokens=GREEDY_TOKENS + FILLER_EXTRA_TOKENS, temperature=1.0 if j % 2 else 0.0, logprobs=lp)
               for j, p in enumerate(fill_prompts)]
    with Timer() as t:
        alone = [engine.client.many([r], 1)[0] for r in probes]
        crowded = []
        for r in probes:                 # the fillers are sent first, the probe last, all at once
            crowded.append(engine.client.many(fillers + [r], len(fillers) + 1)[-1])
    for i, (a, b) in enumerate(zip(alone, crowded)):
        a, b = a[0], b[0]
        if _key(a) != _key(b) or _hex(a.logprobs) != _hex(b.logprobs):
            what = "tokens" if _key(a) != _key(b) else "logprob bytes"
            return CheckResult(name, FAIL, n=len(probes), exact=True, seconds=t.seconds,
                               detail=f"probe {i} ({'greedy' if probes[i]['temperature'] == 0 else 'seeded'}): "
                                      f"{what} differ alone vs among {NEEDLE_FILLERS} concurrent fillers "
                                      f"(alone {list(_key(a))[:8]!r}..., crowded {list(_key(b))[:8]!r}...)",
                               data={"probe": i})
    seeded = sum(1 for r in probes if r["temperature"] != 0)
    note = "" if s["seed"] else " (seed not honoured: greedy probes only)"
    return CheckResult(name, PASS, n=len(probes), exact=True, seconds=t.seconds,
                       detail=f"{len(probes)} probes ({seeded} seeded) identical alone and among {NEEDLE_FILLERS} "
                              f"concurrent fillers: {'ids' if s['token_ids'] else 'text'}"
                              f"{' and logprob bytes' if lp else ''}{note}")


# ------------------------------------------------------------------------------ runs

def runs(client, prompt, total: int, length: int, ctx, key: str, **sampling) -> list:
    """`total` runs of `length` tokens: [total] keys (id tuples, or texts). Seeded requests (distinct
    seeds from the audit's seed) where the server honours seeds; n choices per request where its seeded
    choices are distinct."""
    s = client.support
    per = RUNS_PER_REQUEST if s["n"] and (s["n_seeded_distinct"] or not s["seed"]) else 1
    seeds = ctx.draws("server-runs", key).integers(0, 2**62, size=-(-total // per))
    reqs = []
    left = total
    for sd in seeds:
        n = min(per, left)
        left -= n
        reqs.append(dict(prompt=prompt, max_tokens=length, n=n, seed=int(sd) if s["seed"] else None, **sampling))
    out = []
    for choices in client.many(reqs, IN_FLIGHT):
        out.extend(_key(c) for c in choices)
    return out


def law_rows(engine, ctx) -> list:
    from specverify.reference import laws
    from specverify.reference.transforms import Transform

    from .joint import sequence_gof

    known = getattr(engine, "law", None)
    if known is None:
        return [skip("server.law", f"model {engine.client.model!r} has no law the audit knows (serve tiny:V,SEED or "
                                   "a `specverify models write` folder, or name it with --law-model)")]
    if known.vocab ** LAW_TOKENS > MAX_LAW_SEQUENCES:
        return [skip("server.law", f"the law of {known.source} spans {known.vocab}^{LAW_TOKENS} runs, more than "
                                   f"{MAX_LAW_SEQUENCES} (serve a model of at most "
                                   f"{int(MAX_LAW_SEQUENCES ** (1 / LAW_TOKENS) + 1e-9)} tokens for server.law)")]
    s = engine.support
    if not s["token_ids"]:
        return [skip("server.law", "the server returns no token ids")]
    target = known.model
    rows = []
    n = budget(ctx)
    for temperature, top_p in LAW_TRANSFORMS:
        name = f"server.law[{engine.client.model} T={temperature:g} top_p={top_p:g} L={LAW_TOKENS}]"
        transform = Transform(temperature=temperature, top_p=top_p)
        with Timer() as t:
            got = runs(engine.client, LAW_PROMPT, n, LAW_TOKENS, ctx, name, temperature=temperature,
                       top_p=top_p if top_p < 1 else None)
        tokens = np.full((n, LAW_TOKENS), PAD, np.int64)
        for i, ids in enumerate(got):
            tokens[i, :len(ids)] = ids[:LAW_TOKENS]
        law = laws.target_law(laws.Transformed(target, transform), LAW_PROMPT, LAW_TOKENS)
        row = sequence_gof(name, tokens, law, t.seconds, ctx)
        if any(len(ids) != LAW_TOKENS for ids in got):
            short = sum(1 for ids in got if len(ids) != LAW_TOKENS)
            row.verdict, row.exact = FAIL, True
            row.detail = f"{short} of {n} runs did not return {LAW_TOKENS} tokens (a toy model has no EOS)"
        row.data["law_source"] = known.source
        rows.append(row)
    return rows


def spec_vs_plain(engine, ctx) -> CheckResult:
    from specverify import stats
    from specverify.stats import sequential

    if engine.vocab is not None:          # a toy model: few runs are possible, the full law's setting
        temperature, length, prompt = 1.0, SPEC_VS_PLAIN_TOKENS, LAW_PROMPT
    else:                                 # a real model: a cooler, shorter run keeps the cells few
        temperature, length = REAL_TEMPERATURE, REAL_TOKENS
        prompt = _prompts(engine, 1, 4, "svp", ctx)[0]
    name = f"server.spec_vs_plain[T={temperature:g} L={length}]"
    if engine.plain is None:
        return skip(name, "needs --plain-url (a plain server of the same model)")
    engine.plain.probe()
    n = budget(ctx)
    with Timer() as t:
        a = runs(engine.client, prompt, n, length, ctx, name + "spec", temperature=temperature)
        b = runs(engine.plain, prompt, n, length, ctx, name + "plain", temperature=temperature)
    cells = {k: i for i, k in enumerate(sorted(set(a) | set(b), key=repr))}
    ca = np.array([cells[k] for k in a])
    cb = np.array([cells[k] for k in b])
    k = max(len(cells), 2)
    process = stats.TwoSampleEProcess(k, n_target=n, alpha=ctx.alpha, power=ctx.power,
                                      seed=int(ctx.rng("server-svp").integers(2**31)))
    start = 0
    size = 64
    while start < n:                   # looks after doubling batches (anytime-valid: the max e counts)
        end = min(n, start + size)
        res = process.update(np.bincount(ca[start:end], minlength=k), np.bincount(cb[start:end], minlength=k))
        start, size = end, size * 2
    n_eff = n * n / (2 * n)

    def power_fn(level):
        return sequential.min_detectable_tv(k, n_eff, level, ctx.power)

    return CheckResult(name, PASS, statistic=res.max_log_e, p_value=res.p_value_anytime, dof=k - 1, n=2 * n,
                       seconds=t.seconds, power_fn=power_fn,
                       detail=f"{n} runs per server over {len(cells)} distinct runs; two-sample e-process, "
                              f"max log e {res.max_log_e:.2f}",
                       data={"spec_counts": np.bincount(ca, minlength=k).tolist(),
                             "plain_counts": np.bincount(cb, minlength=k).tolist(),
                             "cells": [list(c) if not isinstance(c, str) else c for c in cells]})


# ------------------------------------------------------------------------------ the check

def run(engine, ctx) -> list[CheckResult]:
    if getattr(engine, "client", None) is None or "server" not in getattr(engine, "capabilities", ()):
        return [skip("server", "not a server: audit an OpenAI-compatible URL (specverify audit http://HOST:PORT/v1)")]
    support = engine.client.probe()
    rows = [greedy_bitwise(engine, ctx), needle(engine, ctx)]
    rows += law_rows(engine, ctx)
    rows.append(spec_vs_plain(engine, ctx))
    for r in rows:
        r.data.setdefault("support", support.to_dict())
    return rows


__all__ = ["run", "budget"]
