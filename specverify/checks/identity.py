"""Identity draft: with the target itself as the draft model, q = p at every position, so an exact
verifier accepts every draft (alpha = 1 - TV(p, p) = 1). Checked exactly on the engine's counters:
num_accepted == num_drafted, under a non-trivial transform (temperature 0.7, top-k 3).

Catches bugs that cost speed without biasing the output -- the draft seen through a different
transform than the target (temperature on the target only), a draft whose context falls behind the
committed sequence, acceptance tests that reject tokens with p(x) = q(x) -- which no distributional
check can see. Power: a rejection rate of 1 - 0.01^(1/D) over D drafts is seen with probability
0.99 (about 3.5e-4 at the default 2000 runs of 8 tokens). Needs `generate` to report {"num_drafted", "num_accepted"} (engine level; the driver
counts them at sampler level); otherwise the row is skipped with the reason. An engine-level adapter
that declares `processors` gets the same rows with logits processors on (`checks.processors`
IDENTITY_ROWS: penalties + min_p + logit bias; min_tokens + stop + grammar), each run only when its
processors are declared.

Budget (`--samples`): 2000 runs per row, fixed; --samples unused.
"""

from __future__ import annotations

from specverify.reference.transforms import Transform

from ..battery import harness
from ..battery.base import FAIL, PASS, SKIP, CheckResult, Timer
from .runs import SETUP, generate, levels

TRANSFORM = Transform(temperature=0.7, top_k=3)
LENGTH = 8
RUNS = 2000


COUNTERS = ("num_steps", "num_drafted", "num_accepted", "num_verifies")


def counters(info: dict) -> dict:
    """The engine's counters of `info` for a row's data (not its per-run traces: `engine_acceptance`'s)."""
    return {k: info[k] for k in COUNTERS if k in info}


def power(drafted) -> float | None:
    """The smallest per-draft rejection rate (the TV between the accept indicator and 'always') that
    rejects at least one of `drafted` drafts with probability >= 0.99."""
    return None if not drafted else float(1.0 - 0.01 ** (1.0 / int(drafted)))


def processor_rows(engine, ctx, target) -> list[CheckResult]:
    """The identity draft with logits processors (engine level, processors the adapter declares): with
    every row of both models processed on the same prefix, q = p still holds and every draft must be
    accepted. A processor applied to one model's rows only keeps the output exact and shows here."""
    from .processors import IDENTITY_ROWS, SETUP as PSETUP, declared, needs

    rows, have = [], declared(engine)
    p_target, _ = harness.models(engine, PSETUP, ctx)
    for label, (settings, transform) in IDENTITY_ROWS.items():
        name = f"engine.identity_draft[processors {label}, L={LENGTH}]"
        missing = needs(settings) - have
        if missing:
            rows.append(CheckResult(name, SKIP, exact=True, detail=f"needs processors {', '.join(sorted(missing))}, "
                                    f"not declared", data={"not_covered": sorted(missing)}))
            continue
        with Timer() as t:
            _, info = generate(engine, "engine", ctx, name, target=p_target, draft=p_target, prompt=PSETUP.prompt,
                               kappa=PSETUP.kappa, transform=transform, seed=11, n=RUNS, length=LENGTH,
                               processors=settings)
        rows.append(verdict_row(name, info, t.seconds))
    return rows


def verdict_row(name: str, info: dict, seconds: float) -> CheckResult:
    """The identity row from the engine's counters: every draft accepted, or the shortfall."""
    drafted, accepted = info.get("num_drafted"), info.get("num_accepted")
    if drafted is None or accepted is None:
        return CheckResult(name, SKIP, n=RUNS, exact=True, seconds=seconds,
                           detail="generate() reported no num_drafted/num_accepted counters")
    if int(drafted) > 0 and int(accepted) == int(drafted):
        return CheckResult(name, PASS, n=RUNS, exact=True, seconds=seconds, min_detectable_tv=power(drafted),
                           detail=f"all {int(drafted)} drafts accepted (alpha = 1)", data=counters(info))
    return CheckResult(name, FAIL, n=RUNS, exact=True, seconds=seconds, min_detectable_tv=power(drafted),
                       detail=f"draft = target, but only {int(accepted)} of {int(drafted)} drafts accepted "
                              f"(alpha = {int(accepted) / max(int(drafted), 1):.4f}, must be 1)", data=counters(info))


def run(engine, ctx):
    rows = []
    target, _ = harness.models(engine, SETUP, ctx)
    for level in levels(engine):
        name = f"{level}.identity_draft[temperature=0.7 top_k=3, L={LENGTH}]"
        with Timer() as t:
            _, info = generate(engine, level, ctx, name, target=target, draft=target, prompt=SETUP.prompt,
                               kappa=SETUP.kappa, transform=TRANSFORM, seed=7, n=RUNS, length=LENGTH)
        drafted, accepted = info.get("num_drafted"), info.get("num_accepted")
        if drafted is None or accepted is None:
            rows.append(CheckResult(name, SKIP, n=RUNS, exact=True, seconds=t.seconds,
                                    detail="generate() reported no num_drafted/num_accepted counters"))
        elif int(drafted) > 0 and int(accepted) == int(drafted):
            rows.append(CheckResult(name, PASS, n=RUNS, exact=True, seconds=t.seconds, min_detectable_tv=power(drafted),
                                    detail=f"all {int(drafted)} drafts accepted (alpha = 1)", data=counters(info)))
        else:
            rows.append(CheckResult(name, FAIL, n=RUNS, exact=True, seconds=t.seconds, min_detectable_tv=power(drafted),
                                    detail=f"draft = target, but only {int(accepted)} of {int(drafted)} drafts accepted "
                                           f"(alpha = {int(accepted) / max(int(drafted), 1):.4f}, must be 1)",
                                    data=counters(info)))
        if level == "engine" and hasattr(engine, "processors"):
            rows.extend(processor_rows(engine, ctx, target))
    return rows
