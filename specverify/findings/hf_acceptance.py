"""transformers assisted generation: its acceptance counters against the exact acceptance law, and the
law its counters do follow.

`engine.acceptance` fails on transformers 5.24.0 (reports/transformers-assisted-5.24.0). This script
says why, on the battery's own setup (toy V = 4, prompt (1, 2), L = 4, kappa = 2, temperature 0.7, the
draft = the target plus noise 1.0; the runs through the `transformers-assisted` adapter, which sets the
assistant's generation config to kappa drafts a step, "constant", no confidence stop):

    exact law      `reference.acceptance.run_acceptance_law` with q = softmax(draft logits / 0.7), the q
                   the user asked for: the runs' traces fail it
    twice-tempered the same law with q = softmax(draft logits / 0.7 / 0.7): the assistant's own
                   generate() applies the temperature warper of its generation config *and* the target's
                   logits_processor handed to it by `AssistedCandidateGenerator` (the bug of
                   `repro_transformers_identity_draft.py`): the runs' traces pass it

Both tests are Pearson chi-squared of the runs' traces (one trace per run, independent runs) at
level 1e-3, seeded (`python -m specverify.findings.hf_acceptance [runs] [seed]`).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from specverify import stats
from specverify.reference import acceptance as law_mod
from specverify.reference.toy import ToyModel
from specverify.reference.transforms import Transform

PROMPT, KAPPA, LENGTH, TEMPERATURE = (1, 2), 2, 4, 0.7
LEVEL = 1e-3


@dataclass(frozen=True)
class TemperedTwice:
    """A model whose rows under `transform` are the wrapped model's at temperature T * T: what the
    assistant drafts from when its generate() applies the temperature twice."""

    model: object

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def probs(self, prefix, transform: Transform | None = None) -> np.ndarray:
        t = transform or Transform()
        twice = Transform(temperature=t.temperature * t.temperature, top_k=t.top_k, top_p=t.top_p)
        return self.model.probs(prefix, twice)


def test(traces, law: law_mod.RunAcceptanceLaw):
    """Pearson chi-squared of the runs' traces against `law` (None when a trace has probability 0)."""
    index = law.index()
    counts = np.zeros(len(law.traces), np.int64)
    for t in traces:
        key = tuple((int(k), int(m)) for k, m in t)
        if key not in index:
            return None
        counts[index[key]] += 1
    return stats.pearson(counts, law.probs, alpha=LEVEL)


def main(runs: int = 2000, seed: int = 0) -> None:
    import transformers

    from specverify.adapters.hf_engine import TransformersAssisted

    print("transformers", transformers.__version__)
    target = ToyModel(4, 7 + seed, scale=0.7, zero_frac=0.2)
    draft = target.draft(8 + seed, noise=1.0)
    transform = Transform(temperature=TEMPERATURE)
    engine = TransformersAssisted()
    _, info = engine.generate(target, draft, PROMPT, KAPPA, transform, seed, runs, LENGTH)
    traces = info["verify_counts"]
    accepted, verifies = info["num_accepted"], info["num_verifies"]
    e_obs = 1.0 + accepted / verifies
    print(f"{runs} runs, prompt {PROMPT}, L = {LENGTH}, kappa = {KAPPA}, T = {TEMPERATURE}, schedule "
          f"{engine.draft_schedule!r}: {accepted} drafts accepted in {verifies} verify steps, E observed {e_obs:.4f}")
    for label, q_model in (("exact law (q at T)", draft), ("q tempered twice (T * T)", TemperedTwice(draft))):
        law = law_mod.run_acceptance_law(target, q_model, PROMPT, KAPPA, LENGTH, transform, engine.draft_schedule)
        lo, hi = law.e_range(runs, LEVEL)
        res = test(traces, law)
        verdict = ("FAIL: a trace of probability 0" if res is None else
                   f"{'FAIL' if res.p_value < LEVEL else 'pass'} (chi2 {res.statistic:.2f}, dof {res.dof}, p = {res.p_value:.3g})")
        print(f"  {label:26s} E {law.E:.4f} (range at {LEVEL:g} for {runs} runs [{lo:.4f}, {hi:.4f}]): {verdict}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
