"""Run laws of our engine on the sliding-window family: whole speculative runs at temperature > 0 from
prompts that put the window's edge (and the ring's wrap) at every offset of the run, against the exact
law of the float64 forward (`models.sliding.tabulated`, `reference.laws.target_law`), by Pearson
chi-squared over the V^L sequences.

Rows `engine.runs[<model>,P=<prompt length>]`, one per prompt; each at level `alpha` (the false-alarm
rate of one row; a caller testing several rows divides it), its power stated as the smallest total
variation distance it detects with probability 0.99 (`stats.min_detectable_tv`). The engine runs the
float32 forward: its laws differ from the float64 law by ~1e-6 relative (measured, docs/sliding-window.md),
far below that power.

Budget: n runs per prompt (the caller's), fixed seeds; not part of the battery's table (our engine only).
"""

from __future__ import annotations

import numpy as np

from specverify import stats
from specverify.reference import laws
from specverify.reference.laws import encode
from specverify.reference.transforms import Transform

from .base import FAIL, PASS, CheckResult, Timer

ALPHA = 0.01                 # the false-alarm rate of one row
MIN_EXPECTED = 5.0


def edge_prompts(window: int, length: int, ring_len: int, vocab: int, seed: int = 0) -> list:
    """Prompts whose runs of `length` tokens cross the window's edge (position `window`) at every output
    offset 0 .. length - 1, and the ring's first wrap (position `ring_len`) at offset 0: lengths
    window - length + 1 .. window, and ring_len."""
    rng = np.random.default_rng(seed)
    lengths = list(range(max(1, window - length + 1), window + 1)) + [ring_len]
    return [tuple(int(t) for t in rng.integers(0, vocab, n)) for n in lengths]


def run_rows(target, draft, law, prompts, *, n: int, length: int, kappa: int, temperature: float = 1.0,
             seed: int = 0, backend: str = "invariant", label: str = "sliding") -> list[CheckResult]:
    """One row per prompt: n runs of `length` tokens of our engine with `target` and draft model `draft`
    (engine models), `kappa` drafts a step, against `law` (the target's float64 TabulatedModel)."""
    from specverify.engine.api import RunOptions, SpecOptions, generate
    from specverify.engine.engine import SamplingParams

    def sample(prompt, i):
        out = generate(target, draft, [list(prompt)] * n,
                       sampling=SamplingParams(temperature=temperature, max_tokens=length, ignore_eos=True),
                       spec=SpecOptions("draft", kappa=kappa), run=RunOptions(backend=backend, seed=seed + i,
                                                                             max_batch_size=n))
        return np.asarray(out.tokens, np.int64)                        # [n, length]

    return law_rows(sample, law, prompts, n=n, length=length, temperature=temperature,
                    label=f"{label},kappa={kappa}")


def law_rows(sample, law, prompts, *, n: int, length: int, temperature: float = 1.0, label: str = "sliding",
             alpha: float = ALPHA) -> list[CheckResult]:
    """One row `engine.runs[<label>,P=..,L=..]` per prompt: `sample(prompt, i)` -> int64 [n, length], the
    runs of any engine from prompt i, against `law` (a float64 TabulatedModel) at `temperature`."""
    transform = Transform(temperature=temperature)
    rows = []
    for i, prompt in enumerate(prompts):
        name = f"engine.runs[{label},P={len(prompt)},L={length}]"
        with Timer() as t:
            samples = np.asarray(sample(prompt, i), np.int64)
        if samples.shape != (n, length):
            rows.append(CheckResult(name, FAIL, n=n, exact=True, seconds=t.seconds,
                                    detail=f"the engine returned runs of shape {samples.shape}, asked for {(n, length)}"))
            continue
        exact = laws.target_law(laws.Transformed(law, transform), prompt, length)
        codes = encode(samples, law.vocab_size)
        try:
            counts = stats.observed_counts(codes, exact.codes())
        except stats.ImpossibleObservation:
            rows.append(CheckResult(name, FAIL, n=n, exact=True, seconds=t.seconds,
                                    detail="a run has exact probability 0"))
            continue
        res = stats.pearson(counts, exact.probs, alpha=alpha, min_expected=MIN_EXPECTED)
        tv = stats.min_detectable_tv(n, res.dof, alpha=alpha)
        verdict = PASS if res.p_value >= alpha else FAIL
        rows.append(CheckResult(name, verdict, statistic=res.statistic, p_value=res.p_value, dof=res.dof, n=n,
                                min_detectable_tv=tv, seconds=t.seconds,
                                detail=f"{len(exact.probs)} sequences in {res.cells} cells, p = {res.p_value:.3g} "
                                       f"at alpha {alpha} (detects TV >= {tv:.3f} with probability 0.99)"))
    return rows
