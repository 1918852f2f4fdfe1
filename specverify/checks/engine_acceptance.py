"""The acceptance law at engine level: an engine's own acceptance counters against the exact law of how
many drafts its verify steps accept, for the battery's toy target and draft (`reference.acceptance`).

An engine can keep the exact output law and still be broken: the drafter's state out of sync with the
committed sequence (its KV not ingested or not rewound after a step, hidden states from the wrong
layer, a misaligned vocabulary map) makes every draft come from the wrong context; the verifier, handed
the q the draft was drawn from, stays exact, and only the speed is gone. The output law cannot show it
(`runs` passes); the identity draft (`identity`) shows it only when the draft is the target. Here the
draft is a real one (the target plus noise), and the exact law of the acceptance counts of whole runs
is known: the engine must match it.

Rows (engine level, an adapter that declares its `draft_schedule`, `reference.acceptance.SCHEDULES`;
without one the check runs nothing and says why, listed under not covered):

    engine.acceptance[... per-step]   the engine reports each run's verify steps as (drafted, accepted)
                                      pairs (info "verify_counts"): Pearson chi-squared of the runs'
                                      traces against their exact law (runs are independent; a trace of
                                      probability 0 fails exactly). Power: min_detectable_tv of the trace law.
    engine.acceptance[... totals]     the engine reports only totals (info "num_accepted"): the exact
                                      two-sided test of the total against the n-fold sum of the per-run
                                      law (`reference.acceptance.total_test`). Power: the smallest shift
                                      of E (mean acceptance length) detected with probability ctx.power
                                      at the row's level (normal approximation; stated in min_detectable_tv
                                      and the detail).
    engine.acceptance_greedy[...]     temperature 0: the drafts and the verdicts are deterministic, so
                                      every run has the same trace (exact row).
    engine.acceptance[... counters]   where the adapter builds the traces from the declared schedule and
                                      checks them against the engine's own counters (info
                                      "counter_mismatches": {"runs", "example"}): a run whose counters
                                      disagree fails (exact row; its traces are then not what the engine
                                      did, so the trace row's verdict stands only with this one).

An adapter whose drafts come from the context in spans after an n-gram match (llama-cpp-python's prompt
lookup, vLLM's n-gram proposer) declares `span_drafter`, a `reference.span_drafters.SpanDrafter` with the
engine's rule; the law is then that drafter's (the battery's draft model is not used), each step drafting
min(schedule's k, len(span)) tokens and a step with an empty span being a plain decode.

Every row reports E observed (with its own confidence interval where the engine gives traces) against
the exact E and the range E observed over n runs keeps under the exact law, both at the audit's alpha
(delta method on the ratio 1 + accepted / verifies; the row's test itself is the trace law's or the
exact sum law's), and what the difference costs: S = E / (1 + kappa c) at c = `reference.acceptance.C_DRAFT`
(`data["acceptance"]`). A failing row says whether acceptance is below the exact law (the audit's
deviation kind `exact-but-slow` when whole runs pass) or above it (impossible for an exact token-wise
verifier with this draft: the counters, the drafts or the rule are not what the engine says).

Budget (`--samples`): max(2000, samples // 10) whole runs (engine.acceptance_greedy: 256 runs, fixed).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from specverify import stats
from specverify.reference import acceptance as law_mod
from specverify.errors import AdapterError
from specverify.reference.span_drafters import is_span_drafter
from specverify.reference.transforms import Transform

from ..battery import harness
from ..battery.base import FAIL, PASS, SKIP, CheckResult, Timer
from .runs import SETUP, generate

MIN_RUNS = 2000
RUNS_DIVISOR = 10
GREEDY_RUNS = 256
TRACE_KEY = "verify_counts"
MISMATCH_KEY = "counter_mismatches"
TRANSFORM = Transform(temperature=0.7)      # not 1: a transform applied to one model only changes acceptance
BELOW, ABOVE = "below", "above"


def runs_of(ctx) -> int:
    return max(MIN_RUNS, int(ctx.samples) // RUNS_DIVISOR)


def exact_law(target, draft, transform: Transform, schedule: str, ctx=None,
              rule: str = law_mod.CHAIN, sampling: str = law_mod.SAMPLED) -> law_mod.RunAcceptanceLaw:
    """The exact trace law of the battery's runs (memoised in the audit's state when `ctx` is given).
    `draft` is the battery's draft model or the adapter's declared span drafter (`span_drafter`)."""
    def build():
        spans = is_span_drafter(draft)
        drafter = law_mod.ArgmaxDraft(draft) if sampling == law_mod.ARGMAX and not spans else draft
        return law_mod.run_acceptance_law(target, drafter, SETUP.prompt, SETUP.kappa, SETUP.length, transform,
                                          schedule, rule)
    if ctx is None:
        return build()
    key = ("engine-acceptance", harness.law_key(target), harness.law_key(draft), transform, schedule, rule, sampling,
           SETUP.prompt, SETUP.kappa, SETUP.length)
    return ctx.state.shared.law(key, build)


@dataclass(frozen=True)
class Observed:
    """What the engine's counters say about n runs."""

    n: int
    accepted: int
    verifies: float             # observed, or n E[N] when the engine reports neither traces nor verifies
    verifies_observed: bool
    r: list | None = None       # per-position rates from the traces

    @property
    def E(self) -> float:       # noqa: N802 - the seed's symbol
        return 1.0 + self.accepted / self.verifies if self.verifies else float("nan")


def summary(law: law_mod.RunAcceptanceLaw, obs: Observed, level: float) -> dict:
    """E observed vs exact, the exact law's central range of E at `level`, and the speed-up they give."""
    test = law_mod.total_test(law, obs.accepted, obs.n, level)
    e_exact, kappa, c = law.E, law.kappa, law_mod.C_DRAFT
    lo, hi = law.e_range(obs.n, level)
    s_obs, s_exact = law_mod.speedup(obs.E, kappa, c), law_mod.speedup(e_exact, kappa, c)
    return {"E_observed": obs.E, "E_exact": e_exact, "E_range": [lo, hi],
            "range_level": level, "accepted_observed": obs.accepted, "accepted_exact": test.mean,
            "verifies": obs.verifies, "verifies_observed": obs.verifies_observed, "runs": obs.n,
            "r_observed": obs.r, "r_exact": [float(x) for x in law.r()], "direction": test.direction,
            "p_total": test.p_value, "kappa": kappa, "c": c, "S_observed": s_obs, "S_exact": s_exact,
            "speedup_loss": 1.0 - s_obs / s_exact if s_exact > 0 else float("nan"),
            "break_even_E": 1.0 + kappa * c, "schedule": law.schedule, "rule": law.rule}


def describe(acc: dict) -> str:
    lo, hi = acc["E_range"]
    ci = acc.get("E_observed_ci")
    own = f" (CI [{ci[0]:.4f}, {ci[1]:.4f}])" if ci else ""
    return (f"E {acc['E_observed']:.4f}{own} vs exact {acc['E_exact']:.4f} (exact law's range [{lo:.4f}, {hi:.4f}] "
            f"at {acc['range_level']:g}); S = E/(1 + kappa c) at c = {acc['c']:g}: {acc['S_observed']:.3f} vs "
            f"{acc['S_exact']:.3f}")


def observed_r(traces, kappa: int) -> list:
    hit, drafted = np.zeros(kappa), np.zeros(kappa)
    for t in traces:
        for k, m in t:
            drafted[:min(k, kappa)] += 1
            hit[:min(m, kappa)] += 1
    return [float(h / d) if d else float("nan") for h, d in zip(hit, drafted)]


def trace_row(name: str, traces, law: law_mod.RunAcceptanceLaw, seconds: float, ctx) -> CheckResult:
    """Pearson chi-squared of the runs' traces against the exact trace law."""
    runs = [tuple((int(k), int(m)) for k, m in t) for t in traces]
    n = len(runs)
    obs = Observed(n, sum(m for t in runs for _, m in t), float(sum(len(t) for t in runs)), True,
                   observed_r(runs, law.kappa))
    acc = summary(law, obs, ctx.alpha)
    acc["E_observed_ci"] = ci_of(runs, ctx.alpha)
    index = law.index()
    bad = [t for t in runs if t not in index]
    if bad:
        return CheckResult(name, FAIL, n=n, exact=True, seconds=seconds,
                           detail=f"run trace {[list(s) for s in bad[0]]} (drafted, accepted per verify) has exact "
                                  f"probability 0 under schedule {law.schedule!r} ({len(bad)} of {n} runs); {describe(acc)}",
                           data={"impossible_example": [list(s) for s in bad[0]], "impossible_count": len(bad),
                                 "acceptance": {**acc, "direction": None}})
    counts, _ = law.counts(runs)
    res = stats.pearson(counts, law.probs, alpha=ctx.alpha, min_expected=ctx.min_expected)
    return CheckResult(name, PASS, statistic=res.statistic, p_value=res.p_value, dof=res.dof, n=n, seconds=seconds,
                       detail=f"{len(law.traces)} traces in {res.cells} cells, {res.p_value_method} p-value; {describe(acc)}",
                       data={"observed": counts.tolist(), "expected": (law.probs * n).tolist(),
                             "traces": [[list(s) for s in t] for t in law.traces], "acceptance": acc})


def total_power(law: law_mod.RunAcceptanceLaw, n: int, level: float, power: float) -> float:
    """The smallest |shift of E| the totals row detects with probability `power` at `level` (normal
    approximation of the sum of n runs' accepted drafts, its exact variance; E's shift per run's mean
    shift is 1 / E[N])."""
    z = sps.norm.isf(level / 2.0) + sps.norm.ppf(power)
    return float(z * math.sqrt(law.var_accepted / n) / law.mean_verifies)


def total_row(name: str, info: dict, n: int, law: law_mod.RunAcceptanceLaw, seconds: float, ctx,
              spans: bool = False) -> CheckResult:
    """The exact test of the total accepted drafts of n runs (`spans`: a span drafter's steps draft
    min(kappa, len(span)) tokens, so drafted = kappa x verifies is not required of them)."""
    accepted = int(info["num_accepted"])
    verifies = info.get("num_verifies")
    drafted = info.get("num_drafted")
    if (law.schedule in (law_mod.FIXED, law_mod.PREFILL_FIXED) and not spans and verifies is not None
            and drafted is not None
            and int(drafted) != law.kappa * int(verifies)):
        return CheckResult(name, FAIL, n=n, exact=True, seconds=seconds,
                           detail=f"the engine drafted {int(drafted)} tokens in {int(verifies)} verify steps, not "
                                  f"kappa = {law.kappa} each: its declared schedule {law.schedule!r} is not what it does",
                           data={"num_drafted": int(drafted), "num_verifies": int(verifies)})
    if verifies is None and law.schedule == law_mod.FIXED and not spans and info.get("num_drafted") is not None:
        verifies = int(info["num_drafted"]) // law.kappa           # every verify drafts kappa
    obs = Observed(n, accepted, float(verifies) if verifies is not None else n * law.mean_verifies, verifies is not None)
    acc = summary(law, obs, ctx.alpha)
    p = acc["p_total"]
    detectable = total_power(law, n, ctx.alpha, ctx.power)
    return CheckResult(name, PASS, statistic=obs.E, p_value=p, dof=1, n=n, seconds=seconds,
                       detail=f"{accepted} drafts accepted in {n} runs (exact mean {acc['accepted_exact']:.1f}); "
                              f"{describe(acc)}; detects |dE| >= {detectable:.4f} at power {ctx.power:g}",
                       data={"acceptance": acc, "min_detectable_dE": detectable},
                       power_fn=lambda level: total_power(law, n, level, ctx.power))


def counters_row(name: str, info: dict, n: int, schedule: str, seconds: float) -> CheckResult | None:
    """A FAIL row where the engine's own counters disagree with the traces the adapter built from its
    declared schedule (info "counter_mismatches"), else None (nothing reported: no row)."""
    bad = info.get(MISMATCH_KEY)
    if not bad or not int(bad.get("runs", 0)):
        return None
    what = bad.get("what") or (f"the engine's own draft counters disagree with the trace its declared schedule "
                               f"{schedule!r} gives")
    return CheckResult(name, FAIL, n=n, exact=True, seconds=seconds,
                       detail=f"in {int(bad['runs'])} of {n} runs {what} (first: {bad.get('example')}): those runs "
                              f"did not draft as declared",
                       data={"counter_mismatches": bad})


def ci_of(traces, level: float) -> list:
    """The observed E's central 1 - `level` confidence interval from the runs' own traces (delta method
    on the ratio 1 + sum A / sum N of independent runs)."""
    a = np.array([sum(m for _, m in t) for t in traces], np.float64)
    v = np.array([len(t) for t in traces], np.float64)
    if v.sum() == 0 or len(traces) < 2:
        return [float("nan"), float("nan")]
    e = 1.0 + a.sum() / v.sum()
    d = a - (e - 1.0) * v
    half = float(sps.norm.isf(level / 2.0) * d.std(ddof=1) / math.sqrt(len(traces)) / v.mean())
    return [e - half, e + half]


def verify_rule(engine) -> str:
    """The adapter's declared verify rule (`reference.acceptance.RULES`; "chain" when not declared)."""
    return getattr(engine, "verify_rule", None) or law_mod.CHAIN


def draft_sampling(engine) -> str:
    """How the adapter's drafts are drawn (`reference.acceptance.DRAFT_SAMPLING`; "sampled" when not declared)."""
    return getattr(engine, "draft_sampling", None) or law_mod.SAMPLED


def span_drafter(engine):
    """The adapter's declared span drafter (`reference.span_drafters`), or None: its drafts are then the
    battery's draft model's. A declared object that is not a span drafter is the adapter's error."""
    drafter = getattr(engine, "span_drafter", None)
    if drafter is not None and not is_span_drafter(drafter):
        raise AdapterError(f"{getattr(engine, 'name', 'the adapter')} declares span_drafter "
                           f"{type(drafter).__name__}, which is not a reference.span_drafters.SpanDrafter")
    return drafter


def drafter_label(drafter) -> str:
    """How a row names a span drafter: its class and settings."""
    if drafter is None:
        return ""
    args = ", ".join(f"{k}={v}" for k, v in vars(drafter).items() if v is not None)
    return f"{type(drafter).__name__}({args})"


def greedy_row(engine, ctx, target, draft, schedule: str) -> CheckResult:
    """Temperature 0: every run has the one trace of the exact (deterministic) law."""
    spans = span_drafter(engine)
    label = f", {drafter_label(spans)}" if spans is not None else ""
    name = f"engine.acceptance_greedy[toy V={SETUP.vocab} L={SETUP.length} kappa={SETUP.kappa}, {schedule}{label}]"
    transform = Transform(temperature=0.0)
    law = exact_law(target, spans if spans is not None else draft, transform, schedule, ctx)   # greedy: one rule
    with Timer() as t:
        _, info = generate(engine, "engine", ctx, name, target=target, draft=draft, prompt=SETUP.prompt,
                           kappa=SETUP.kappa, transform=transform, seed=3, n=GREEDY_RUNS, length=SETUP.length)
    (trace,) = law.traces
    want = sum(m for _, m in trace)
    traces = info.get(TRACE_KEY)
    if traces is not None:
        got = [tuple((int(k), int(m)) for k, m in x) for x in traces]
        bad = [x for x in got if x != trace]
        accepted = sum(m for x in got for _, m in x)
        verifies = sum(len(x) for x in got)
    elif info.get("num_accepted") is not None:
        accepted, verifies = int(info["num_accepted"]), GREEDY_RUNS * len(trace)
        bad = [] if accepted == GREEDY_RUNS * want else [None]
    else:
        return CheckResult(name, SKIP, exact=True, seconds=t.seconds,
                           detail="generate() reported no num_accepted counter", data={"not_covered": ["counters"]})
    acc = summary(law, Observed(GREEDY_RUNS, accepted, float(verifies), True), ctx.alpha)
    if bad:
        first = "" if bad[0] is None else f"; first trace {[list(s) for s in bad[0]]}"
        return CheckResult(name, FAIL, n=GREEDY_RUNS, exact=True, seconds=t.seconds,
                           detail=f"greedy runs must all have the trace {[list(s) for s in trace]} "
                                  f"(drafted, accepted per verify); {len(bad) if bad[0] is not None else 'the total'} "
                                  f"differ{first}; {describe(acc)}", data={"acceptance": acc})
    bad_counters = counters_row(f"{name[:-1]}, counters]", info, GREEDY_RUNS, schedule, t.seconds)
    if bad_counters is not None:
        return bad_counters
    if not trace:           # no verify step on the greedy path (a span drafter that never matches there)
        return CheckResult(name, SKIP, n=GREEDY_RUNS, exact=True, seconds=t.seconds,
                           detail="the greedy path makes no verify step under this drafter (its span is empty at "
                                  "every step), and no run made one: no acceptance to test",
                           data={"not_covered": ["greedy acceptance (no verify step)"], "acceptance": acc})
    return CheckResult(name, PASS, n=GREEDY_RUNS, exact=True, seconds=t.seconds,
                       detail=f"every run has the exact trace {[list(s) for s in trace]}; {describe(acc)}",
                       data={"acceptance": acc})


def run(engine, ctx) -> list[CheckResult]:
    caps = set(getattr(engine, "capabilities", ()))
    base = f"toy V={SETUP.vocab} L={SETUP.length} kappa={SETUP.kappa} temperature={TRANSFORM.temperature:g}"
    if "engine" not in caps or not hasattr(engine, "generate"):
        return [CheckResult(f"engine.acceptance[{base}]", SKIP, exact=True,
                            detail="not an engine-level adapter (no generate)")]
    schedule = getattr(engine, "draft_schedule", None)
    if schedule not in law_mod.SCHEDULES:
        why = getattr(engine, "acceptance_skip", None)      # the adapter's own account of what its API lacks
        return [CheckResult(f"engine.acceptance[{base}]", SKIP, exact=True,
                            detail=f"the adapter declares no draft_schedule (one of {', '.join(law_mod.SCHEDULES)}): "
                                   f"the acceptance law depends on how many drafts each step makes"
                                   + (f"; {why}" if why else ""),
                            data={"not_covered": ["draft_schedule"]})]
    target, draft = harness.models(engine, SETUP, ctx)
    transform = TRANSFORM
    rule, sampling = verify_rule(engine), draft_sampling(engine)
    spans = span_drafter(engine)
    law = exact_law(target, spans if spans is not None else draft, transform, schedule, ctx, rule, sampling)
    label = ", ".join([schedule] + ([rule] if rule != law_mod.CHAIN else [])              # in the row's name
                      + ([f"{sampling} drafts"] if sampling != law_mod.SAMPLED and spans is None else [])
                      + ([drafter_label(spans)] if spans is not None else []))
    n = runs_of(ctx)
    seed = int(ctx.draws("engine_acceptance", "law").integers(2**31))
    with Timer() as t:
        _, info = generate(engine, "engine", ctx, f"engine.acceptance[{base}]", target=target, draft=draft,
                           prompt=SETUP.prompt, kappa=SETUP.kappa, transform=transform, seed=seed, n=n,
                           length=SETUP.length)
    rows = []
    if info.get(TRACE_KEY) is not None:
        traces = info[TRACE_KEY]
        if len(traces) != n:
            rows.append(CheckResult(f"engine.acceptance[{base}, per-step]", FAIL, n=n, exact=True, seconds=t.seconds,
                                    detail=f"generate() gave {len(traces)} traces for {n} runs"))
        else:
            rows.append(trace_row(f"engine.acceptance[{base}, {label}, per-step]", traces, law, t.seconds, ctx))
            bad = counters_row(f"engine.acceptance[{base}, {label}, counters]", info, n, schedule, t.seconds)
            if bad is not None:
                rows.append(bad)
    elif info.get("num_accepted") is not None:
        rows.append(total_row(f"engine.acceptance[{base}, {label}, totals]", info, n, law, t.seconds, ctx,
                              spans is not None))
    else:
        rows.append(CheckResult(f"engine.acceptance[{base}]", SKIP, n=n, exact=True, seconds=t.seconds,
                                detail="generate() reported no num_accepted counter nor verify_counts",
                                data={"not_covered": ["counters"]}))
        return rows
    rows.append(greedy_row(engine, ctx, target, draft, schedule))
    return rows
