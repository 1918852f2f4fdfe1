"""OpenVINO GenAI: its acceptance against the exact acceptance law, and the law its sampled verify rule
gives instead.

`engine.acceptance` fails on openvino-genai 2026.4.1 (reports/openvino-2026.4.1.0/acceptance.md) with
acceptance *above* the exact law, which no exact rule can do with this draft. This script says why, on
tiny random Llamas (`tiny_llama.pair_folders(None, 4, 11)`, the adapter's tests' pair), prompt (1,),
L = 4, kappa = 2, temperature 0.7, through the `openvino` adapter (its per-step traces, `trace_of`):

    exact law      `reference.acceptance.run_acceptance_law`, schedule capped, rule chain: the traces of
                   OpenVINO's runs fail it
    source's rule  a Monte Carlo of the rule as openvino.genai's source reads (src/cpp/src/sampling/
                   sampler.cpp, `validate_candidate` and `sample_from_sequence_group`; the draft's pause
                   in src/cpp/src/speculative_decoding/continuous_batching/pipeline_impl.cpp,
                   `update_request`), on the float64 tables of the same weights: draft x_i ~ q; at
                   position i the target samples y ~ p_i and keeps x_i when r <= q(x_i) / p_i(y), r =
                   uniform_int(0, 100) / 100; the first rejected position's token is replaced by a sample
                   of the *next* row p_{i+1} (conditioned on the rejected x_i) and the step ends; all kept:
                   a bonus from p_k. A replacement equal to the rejected draft leaves the draft with
                   nothing to insert, and it pauses one step (a plain step). The traces are built from
                   the simulated step sizes as the adapter builds them (`trace_of`). OpenVINO's traces
                   pass a two-sample test against it

Tests: Pearson chi-squared of the runs' traces against the exact law; chi-squared two-sample test
(contingency table) of the runs' traces against the simulated runs' (independent runs), both at level
1e-3, seeded (`python -m specverify.findings.openvino_acceptance [runs] [seed] [simulated runs]`).
Needs OpenVINO GenAI (specverify/findings/install_openvino.sh).
"""

from __future__ import annotations

import sys
from collections import Counter
from functools import lru_cache

import numpy as np
from scipy import stats as sps

from specverify import stats
from specverify.reference import acceptance as law_mod
from specverify.reference.transforms import Transform

VOCAB, PAIR_SEED, PROMPT, KAPPA, LENGTH, TEMPERATURE = 4, 11, (1,), 2, 4, 0.7
LEVEL = 1e-3
R_LEVELS = 100             # r = uniform_int(0, R_LEVELS) / R_LEVELS


def simulate(target, draft, transform: Transform, runs: int, seed: int) -> list:
    """Step chunk sizes of `runs` runs under the source's rule (module docstring)."""
    rng = np.random.default_rng(seed)

    @lru_cache(maxsize=None)
    def p(prefix):
        return np.asarray(target.probs(prefix, transform), np.float64)

    @lru_cache(maxsize=None)
    def q(prefix):
        return np.asarray(draft.probs(prefix, transform), np.float64)

    def sample(row) -> int:
        return int(rng.choice(row.size, p=row / row.sum()))

    out = []
    for _ in range(runs):
        seq, sizes, emitted, paused = tuple(PROMPT), [], 0, False
        while emitted < LENGTH:
            k = law_mod.drafts_at(law_mod.CAPPED, KAPPA, emitted, LENGTH)
            if k == 0 or paused:                                    # plain step
                seq, emitted, paused = seq + (sample(p(seq)),), emitted + 1, False
                sizes.append(1)
                continue
            xs: tuple = ()
            for _ in range(k):
                xs += (sample(q(seq + xs)),)
            kept: tuple = ()
            for i in range(k + 1):
                row = p(seq + xs[:i])
                y = sample(row)
                if i == k:                                          # every draft kept: the bonus
                    kept += (y,)
                    break
                r = rng.integers(0, R_LEVELS + 1) / R_LEVELS
                if r <= q(seq + xs[:i])[xs[i]] / row[y]:
                    kept += (xs[i],)
                    continue
                replacement = sample(p(seq + xs[:i + 1]))           # the next row, after the rejected draft
                kept += (replacement,)
                paused = replacement == xs[i]
                break
            seq, emitted = seq + kept, emitted + len(kept)
            sizes.append(len(kept))
        out.append(sizes)
    return out


def e_of(traces) -> float:
    a = sum(m for t in traces for _, m in t)
    n = sum(len(t) for t in traces)
    return 1.0 + a / n


def main(argv=None) -> int:
    from specverify.adapters import openvino as ovad
    from specverify.models import tiny as tiny_llama

    args = [int(a) for a in (sys.argv[1:] if argv is None else argv)]
    runs, seed, sim_runs = (args + [2000, 0, 100_000][len(args):])[:3]
    transform = Transform(temperature=TEMPERATURE)
    t_dir, d_dir = tiny_llama.pair_folders(None, VOCAB, PAIR_SEED)
    target, draft = tiny_llama.tabulated(t_dir), tiny_llama.tabulated(d_dir)
    engine = ovad.OpenVINOEngine(ovad.DRAFT)
    _, info = engine.generate(target, draft, PROMPT, KAPPA, transform, seed, runs, LENGTH)
    traces = [tuple(tuple(s) for s in t) for t in info["verify_counts"]]
    print(f"openvino-genai {engine.version}: {runs} runs, tiny Llama pair V={VOCAB} (seed {PAIR_SEED}), prompt "
          f"{PROMPT}, L={LENGTH}, kappa={KAPPA}, temperature {TEMPERATURE}, rng_seed {seed}..{seed + runs - 1}")
    print(f"  E observed {e_of(traces):.4f}; runs whose engine counters disagree with the capped trace: "
          f"{info['counter_mismatches']['runs']}")

    law = law_mod.run_acceptance_law(target, draft, PROMPT, KAPPA, LENGTH, transform, law_mod.CAPPED, law_mod.CHAIN)
    index = law.index()
    counts = np.zeros(len(law.traces), np.int64)
    outside = 0
    for t, c in Counter(traces).items():
        if t in index:
            counts[index[t]] = c
        else:
            outside += c
    res = stats.pearson(counts, law.probs, alpha=LEVEL)
    print(f"exact law (capped, chain): E {law.E:.4f}; traces of probability 0: {outside}; Pearson p = "
          f"{res.p_value:.3g} ({'FAIL' if res.p_value < LEVEL or outside else 'pass'} at {LEVEL:g})")

    sim = [tuple(ovad.trace_of(s, KAPPA, LENGTH)) for s in simulate(target, draft, transform, sim_runs, seed + 1)]
    sim_counts = Counter(sim)
    keys = sorted(set(sim_counts) | set(traces))
    obs_counts = Counter(traces)
    table = np.array([[obs_counts.get(k, 0) for k in keys], [sim_counts.get(k, 0) for k in keys]])
    keep = table.sum(axis=0) > 0
    chi2, p_two, dof, _ = sps.chi2_contingency(table[:, keep])
    print(f"source's rule, simulated ({sim_runs} runs on the float64 tables): E {e_of(sim):.4f}; two-sample "
          f"chi-squared {chi2:.2f}, dof {dof}, p = {p_two:.3g} ({'FAIL' if p_two < LEVEL else 'pass'} at {LEVEL:g})")
    print("trace: observed / runs, exact law, simulated source rule")
    for k in keys:
        e = law.probs[index[k]] if k in index else 0.0
        print(f"  {[list(s) for s in k]}: {obs_counts.get(k, 0) / runs:.4f}  {e:.4f}  {sim_counts.get(k, 0) / sim_runs:.4f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
