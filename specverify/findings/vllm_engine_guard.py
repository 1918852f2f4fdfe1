"""Diagnostic (shim repaired): the audit's `engine.runs` and `engine.transform[top_p=0.8]` rows of a draft-model
variant, re-run on the audit's own V=4 tiny Llamas with the C++ rejection op given the guard it lacks (a
placeholder draft, id -1, gets coin +inf: never accepted, as in the Triton kernel since vLLM PR #46533) --
or without it (`shipped`), for comparison. If the rows pass with the guard and fail without, the padded
placeholder drafts (repro `vllm_cpu_engine_draft_law.py`) are the whole of what is left once #55005 is repaired.

    SPECVERIFY_CACHE=... VENV/bin/python -m specverify findings vllm-engine-guard draft|probabilistic guard|shipped

20,000 runs (temperature 1) and 10,000 (top-p 0.8) of 4 tokens from prompt [1], kappa 2, seeds 5 + i; Pearson
chi-squared over the cells with expected count >= 5 and the count of runs of exact probability 0. The
models are the ones the audit draws for seed 0 (`harness.models` with the audit's context); they are built
under SPECVERIFY_CACHE if absent.
"""
import sys
import time

import numpy as np
from scipy.stats import chi2

from specverify.adapters import vllm_cpu_engine as v
from specverify.reference import laws
from specverify.reference.transforms import Transform

ROWS = ((Transform(), 20_000), (Transform(top_p=0.8), 10_000))
PROMPT, KAPPA, LENGTH, SEED, V = (1,), 2, 4, 5, 4


def add_guard() -> None:
    """Give vllm-cpu's wrapper of the C++ rejection op the Triton kernel's `draft_token_id < 0` guard (before
    the engine starts: its CPU worker registers the wrapper then)."""
    import torch
    import vllm.utils.cpu_triton_utils as cpu_tl
    shipped = cpu_tl._rejection_random_sample_kernel_impl

    def guarded(out, cu, draft, draft_probs, target_probs, bonus, recovered, uniform, *args, **kwargs):
        uniform = torch.where(draft < 0, torch.full_like(uniform, float("inf")), uniform)
        return shipped(out, cu, draft, draft_probs, target_probs, bonus, recovered, uniform, *args, **kwargs)

    cpu_tl._rejection_random_sample_kernel_impl = guarded


def audit_models():
    """The V=4 (target, draft) the audit of seed 0 uses (`battery.harness.models`)."""
    from specverify.battery import harness
    from specverify.battery.base import Context
    from specverify.checks.runs import SETUP
    eng = v.VllmCpuEngine.__new__(v.VllmCpuEngine)          # only its name and own_models: no engine started
    eng.name, eng.method = "vllm-cpu-engine-fixed", v.DRAFT
    return harness.models(eng, SETUP, Context(seed=0))


def measure(method: str, mode: str) -> None:
    v._environment()
    installed_guard = mode == "guard"
    if installed_guard:
        v.installed.load("vllm-cpu", "vllm")
        add_guard()
    target, draft = audit_models()
    eng = v.VllmCpuEngine(method, fixed=True)
    weights = V ** np.arange(LENGTH - 1, -1, -1)
    for transform, n in ROWS:
        law = laws.target_law(laws.Transformed(target, transform), PROMPT, LENGTH)
        exact = np.zeros(V ** LENGTH)
        for seq, p in zip(law.sequences, law.probs):
            exact[int((np.array(seq) * weights).sum())] = p
        t0 = time.time()
        tok, _ = eng.generate(target, draft, PROMPT, KAPPA, transform, SEED, n, LENGTH)
        obs = np.bincount((tok * weights).sum(1), minlength=V ** LENGTH).astype(float)
        cells = exact * n >= 5
        stat = float(((obs[cells] - exact[cells] * n) ** 2 / (exact[cells] * n)).sum())
        print(f"{method} {mode}: {transform} n={n}: runs of exact probability 0: {int(obs[exact == 0].sum())}; "
              f"chi2 {stat:.1f} on {int(cells.sum()) - 1} dof, p = {chi2.sf(stat, cells.sum() - 1):.3g} "
              f"({time.time() - t0:.0f} s)", flush=True)


def main(argv=None) -> int:
    """`specverify findings vllm-engine-guard draft|probabilistic guard|shipped`."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if len(argv) != 2 or argv[0] not in (v.DRAFT, v.PROBABILISTIC) or argv[1] not in ("guard", "shipped"):
        print("usage: specverify findings vllm-engine-guard draft|probabilistic guard|shipped", file=sys.stderr)
        return 2
    measure(argv[0], argv[1])
    return 0
