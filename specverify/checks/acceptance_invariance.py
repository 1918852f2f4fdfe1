"""Metamorphic acceptance rows: an engine's acceptance must not depend on what cannot change the models'
law -- a cold or warm prefix cache, the prefill chunk size, the position in a long context, the draft
schedule. Each row runs the engine twice (two arms that differ in one knob) and compares the two
samples of its own counters; no exact law is needed, so the rows apply wherever the knob exists.

Why two samples and these models. A drafter whose state goes stale only in some condition (its KV not
restored on a prefix-cache hit, not ingested after a step without drafts, its position counter off after
a chunked prefill or past some length) keeps the output law exact and loses acceptance only there
(`../shared/BUGCLASSES.md`, "Acceptance", drafter out of sync: vllm-metal PR #716, SGLang PR #19897,
vLLM #14649). The rows use a shift-invariant Markov target and draft (`reference.circulant`): every
verify step of k drafts then accepts m with one truncated geometric law, independent of the state and
of every earlier step. The m of the verify steps that draft the full kappa are therefore i.i.d. from
one law in both arms, under any knob, for a correct engine -- and a drafter that conditions on a stale
token accepts less.

Rows (engine level; an adapter declares the knobs its `generate` takes in `acceptance_knobs`, names
from KNOBS; a knob it lacks is a SKIP row listed under not_covered, never a pass):

    engine.acceptance_invariance[prefix_cache: cold vs warm]
        generate(..., knobs={"prefix_cache": "cold"}): no prefix-cache reuse; "warm": the prompt is
        in the engine's prefix caches (target and draft) before the runs start, and every run reuses it
    engine.acceptance_invariance[prefill_chunk: whole vs C]
        knobs={"prefill_chunk": None}: the prompt prefilled in one step; C: at most C prompt tokens a step
    engine.acceptance_invariance[position: short vs after F tokens]
        no knob value: the same prompt tail alone and after F filler tokens (the models ignore all but
        the last token, so the law is the same); declaring "position" says generate takes such prompts
    engine.acceptance_invariance[kappa_schedule: constant vs cycle]
        knobs={"kappa_schedule": (c_1, ..., c_r)}: the step after the prefill drafts at most c_1, the
        next c_2, ... cycling (steps with 0 drafts are plain decode); (kappa,) is the constant schedule

Each row: the counts of m over the full-kappa verify steps of each arm (per-step counts from
info["verify_counts"]; an engine reporting only totals gets a SKIP: totals of two arms cannot be
compared without a law) in one two-sample e-process (`stats.TwoSampleEProcess`), fed in doubling
batches, anytime-valid; the row's p-value is 1 / max e. Power: the min detectable TV of the step law at
n_a n_b / (n_a + n_b) observations (the one-sample mixture's Gaussian approximation, as the server's
spec_vs_plain row states it). The data also give each arm's E = 1 + accepted / verifies and mean
accepted per full step against the exact value of the circulant models.

Budget (`--samples`): max(500, samples // 100) whole runs per arm, two arms per row.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from specverify import stats
from specverify.reference import circulant
from specverify.reference.transforms import Transform
from specverify.stats import sequential

from ..battery import harness
from ..battery.base import PASS, SKIP, CheckResult, Timer

KNOBS = ("prefix_cache", "prefill_chunk", "position", "kappa_schedule")
TRACE_KEY = "verify_counts"
MIN_RUNS = 500
RUNS_DIVISOR = 100
VOCAB = 8
KAPPA = 3
LENGTH = 10
TRANSFORM = Transform(temperature=0.7)
TAIL = (1, 5, 2, 7, 3, 6)              # the prompt every arm ends with
FILLER = 58                            # tokens before the tail in the long prompts (cache and chunk rows)
FAR = 250                              # tokens before the tail in the position row's far arm
CHUNK = 5                              # the chunked arm's prefill chunk
CYCLE = (KAPPA, 0)                     # the varying schedule's cycle of per-step draft caps (every full
                                       # step follows a plain decode step)
MODEL_SEED = 0                         # the models: fixed, one whose rows change with the last token enough that
                                       # a drafter one token behind loses half its acceptance (a drawn pair may not)
FIRST_BATCH = 64                       # observations per arm in the e-process's first look (then doubling)


@dataclass(frozen=True)
class Arm:
    label: str
    prompt: tuple
    knobs: dict


@dataclass(frozen=True)
class Relation:
    knob: str
    a: Arm
    b: Arm

    @property
    def name(self) -> str:
        return f"engine.acceptance_invariance[{self.knob}: {self.a.label} vs {self.b.label}]"


def filler(n: int, seed: int = 7) -> tuple:
    return tuple(int(t) for t in np.random.default_rng(seed).integers(0, VOCAB, n))


def relations() -> tuple:
    long = filler(FILLER) + TAIL
    return (
        Relation("prefix_cache", Arm("cold", long, {"prefix_cache": "cold"}), Arm("warm", long, {"prefix_cache": "warm"})),
        Relation("prefill_chunk", Arm("whole", long, {"prefill_chunk": None}),
                 Arm(f"chunk {CHUNK}", long, {"prefill_chunk": CHUNK})),
        Relation("position", Arm("short", TAIL, {}), Arm(f"after {FAR} tokens", filler(FAR, 11) + TAIL, {})),
        Relation("kappa_schedule", Arm("constant", TAIL, {"kappa_schedule": (KAPPA,)}),
                 Arm(f"cycle {CYCLE}", TAIL, {"kappa_schedule": CYCLE})),
    )


def runs_of(ctx) -> int:
    return max(MIN_RUNS, int(ctx.samples) // RUNS_DIVISOR)


def full_step_counts(traces, kappa: int) -> np.ndarray:
    """Counts of m = 0..kappa over the verify steps that drafted kappa: int64 [kappa + 1]."""
    m = [int(a) for t in traces for k, a in t if int(k) == kappa]
    return np.bincount(np.asarray(m, np.int64), minlength=kappa + 1)[:kappa + 1] if m else np.zeros(kappa + 1, np.int64)


def arm_summary(traces, kappa: int, a_exact: float) -> dict:
    acc = sum(int(m) for t in traces for _, m in t)
    ver = sum(len(t) for t in traces)
    counts = full_step_counts(traces, kappa)
    full = int(counts.sum())
    return {"runs": len(traces), "verifies": ver, "accepted": acc, "E": 1.0 + acc / ver if ver else float("nan"),
            "full_steps": full, "full_step_counts": counts.tolist(),
            "mean_accepted_full": float((counts * np.arange(kappa + 1)).sum() / full) if full else float("nan"),
            "mean_accepted_full_exact": float((circulant.step_law(a_exact, kappa) * np.arange(kappa + 1)).sum())}


def two_sample(ca: np.ndarray, cb: np.ndarray, seq_a: np.ndarray, seq_b: np.ndarray, ctx, seed: int):
    """The e-process over the two arms' per-step m sequences, in doubling batches (anytime-valid)."""
    k = ca.size
    n = max(int(ca.sum()), int(cb.sum()), 1)
    process = stats.TwoSampleEProcess(k, n_target=n, alpha=ctx.alpha, power=ctx.power, seed=seed)
    res = process.result()
    start_a = start_b = 0
    size = FIRST_BATCH
    while start_a < seq_a.size or start_b < seq_b.size:
        end_a, end_b = min(seq_a.size, start_a + size), min(seq_b.size, start_b + size)
        res = process.update(np.bincount(seq_a[start_a:end_a], minlength=k), np.bincount(seq_b[start_b:end_b], minlength=k))
        start_a, start_b, size = end_a, end_b, size * 2
    return res


def sequence(traces, kappa: int) -> np.ndarray:
    """The m of the full-kappa verify steps, run by run in order: int64 [steps]."""
    return np.asarray([int(m) for t in traces for k, m in t if int(k) == kappa], np.int64)


def row(engine, ctx, rel: Relation, target, draft, n: int, a_exact: float) -> CheckResult:
    name = rel.name
    traces = []
    with Timer() as t:
        for arm, key in ((rel.a, "a"), (rel.b, "b")):
            seed = int(ctx.draws("acceptance_invariance", rel.knob, key).integers(2**31))
            kw = {"knobs": dict(arm.knobs)} if arm.knobs else {}
            _, info = harness.generated(engine, ctx, f"{name} arm {arm.label}", target=target, draft=draft,
                                        prompt=arm.prompt, kappa=KAPPA, transform=TRANSFORM, seed=seed, n=n,
                                        length=LENGTH, **kw)
            got = info.get(TRACE_KEY)
            if got is None:
                return CheckResult(name, SKIP, n=n, seconds=time.perf_counter() - t.start,
                                   detail="generate() reported no per-run verify_counts: two arms' totals cannot be "
                                          "compared without a law", data={"not_covered": ["verify_counts"]})
            if len(got) != n:
                from ..errors import AdapterError
                raise AdapterError(f"{engine.name}.generate: {len(got)} verify_counts for {n} runs")
            traces.append([tuple((int(k), int(m)) for k, m in x) for x in got])
    seq_a, seq_b = sequence(traces[0], KAPPA), sequence(traces[1], KAPPA)
    arms = {rel.a.label: arm_summary(traces[0], KAPPA, a_exact), rel.b.label: arm_summary(traces[1], KAPPA, a_exact)}
    if min(seq_a.size, seq_b.size) < 2 * KAPPA:
        return CheckResult(name, SKIP, n=n, seconds=time.perf_counter() - t.start,
                           detail=f"too few verify steps drafting kappa = {KAPPA} ({seq_a.size}, {seq_b.size}): tests nothing",
                           data={"not_covered": [rel.knob], "arms": arms})
    k = KAPPA + 1
    ca, cb = np.bincount(seq_a, minlength=k), np.bincount(seq_b, minlength=k)
    res = two_sample(ca, cb, seq_a, seq_b, ctx, int(ctx.draws("acceptance_invariance", rel.knob, "order").integers(2**31)))
    n_eff = ca.sum() * cb.sum() / (ca.sum() + cb.sum())

    def power_fn(level):
        return sequential.min_detectable_tv(k, n_eff, level, ctx.power)

    ea, eb = arms[rel.a.label]["E"], arms[rel.b.label]["E"]
    ma, mb = arms[rel.a.label]["mean_accepted_full"], arms[rel.b.label]["mean_accepted_full"]
    direction = "below" if mb < ma else "above" if mb > ma else "equal"
    return CheckResult(name, PASS, statistic=res.max_log_e, p_value=res.p_value_anytime, dof=k - 1,
                       n=int(ca.sum() + cb.sum()), seconds=t.seconds, power_fn=power_fn,
                       detail=f"{n} runs per arm; accepted per full step (kappa {KAPPA}) {ma:.4f} ({rel.a.label}) vs "
                              f"{mb:.4f} ({rel.b.label}), exact {arms[rel.a.label]['mean_accepted_full_exact']:.4f}; "
                              f"E {ea:.4f} vs {eb:.4f}; two-sample e-process over {int(ca.sum())} + {int(cb.sum())} "
                              f"steps, max log e {res.max_log_e:.2f}",
                       data={"counts_a": ca.tolist(), "counts_b": cb.tolist(), "arms": arms, "knob": rel.knob,
                             "acceptance_arms": {"direction": direction, "a": rel.a.label, "b": rel.b.label,
                                                 "E_a": ea, "E_b": eb}})


def skip(name: str, why: str, not_covered) -> CheckResult:
    return CheckResult(name, SKIP, exact=True, detail=why, data={"not_covered": list(not_covered)})


def run(engine, ctx) -> list[CheckResult]:
    caps = set(getattr(engine, "capabilities", ()))
    rels = relations()
    if "engine" not in caps or not hasattr(engine, "generate"):
        return [skip("engine.acceptance_invariance", "not an engine-level adapter (no generate)", KNOBS)]
    declared = set(getattr(engine, "acceptance_knobs", ()) or ())
    if getattr(engine, "models", "toy") != "toy" and declared:
        return [skip("engine.acceptance_invariance", "the rows pass toy Markov models (`reference.circulant`); "
                     f"the adapter takes models = {getattr(engine, 'models')!r}", KNOBS)]
    target, draft = circulant.pair(VOCAB, MODEL_SEED)
    a_exact = circulant.step_acceptance(target, draft, TRANSFORM)
    n = runs_of(ctx)
    rows = []
    for rel in rels:
        if rel.knob not in declared:
            rows.append(skip(rel.name, f"the adapter declares no {rel.knob!r} knob (acceptance_knobs)", [rel.knob]))
            continue
        rows.append(row(engine, ctx, rel, target, draft, n, a_exact))
    return rows


__all__ = ["run", "KNOBS", "relations", "full_step_counts", "runs_of"]
