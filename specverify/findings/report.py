"""Run one engine's audit (battery + probes) and write `reports/<engine>-<version>/`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from specverify.battery.base import ERROR, FAIL, WARN, CheckResult
from specverify.format import fmt, json_safe

from . import ISOLATED, LARGE, NOT_AUDITABLE, NOT_RUN, NOTES, PLANS, REPRODUCERS, probes

REPRO_DIR = Path(__file__).parent / "repro"
REPRO_TIMEOUT = 600


def run_probes(engine, names, ctx, *, assisted_runs: int = 1500, identity_runs: int = 150) -> list[CheckResult]:
    rows = []
    for name in names:
        ctx.say(f"probe {name}")
        fn = getattr(probes, name, None)
        if fn is None:                                  # an engine's own probes, given (adapter, ctx)
            from .vllm_engine_probes import PROBES
            rows += PROBES[name](engine, ctx)
        elif name == "padded_recovered":
            rows += fn(engine, ctx.rng("probe", name), n=min(probes.PADDED_N, ctx.samples))
        elif name == "tree_greedy":
            rows += fn(engine, ctx.rng("probe", name))
        elif name == "assisted_law":
            rows += fn(n=assisted_runs)
        elif name == "identity_draft":
            rows += fn(n=identity_runs)
        else:
            rows += fn(engine)
    return rows


def audit(name: str, *, samples: int | None = None, seed: int = 0, alpha: float | None = None, checks=None,
          probe_names=None, timeout: float = 3600.0, assisted_runs: int = 1500, identity_runs: int = 150):
    """(AuditResult of the battery and the engine's probes, decided in one Holm family; adapter)."""
    from specverify.audit import prepare
    plan_probes, plan_samples, plan_checks = PLANS[name]
    checks = plan_checks if checks is None else checks
    # in this process: each engine's findings run in a process of their own already (`--one`), and the
    # probes reach into the adapter beyond the protocol's methods -- except for ISOLATED engines, whose
    # probes use only `verify` and reach it through the worker's handle
    isolated = name in ISOLATED
    ready = prepare(name, {"seed": seed, "samples": samples or plan_samples, "alpha": alpha, "timeout": timeout,
                           "checks": checks or None}, isolated=isolated)
    if checks == []:                                    # the probes alone
        ready.settings = replace(ready.settings, checks=())
    scale, max_vocab = LARGE.get(name, (1.0, None))
    ready.ctx = replace(ready.ctx, large_scale=scale, large_max_vocab=max_vocab)
    probe_names = plan_probes if probe_names is None else probe_names
    adapter = ready.engine if isolated else ready.engine.local
    result = ready.run(extra=lambda engine, ctx: run_probes(adapter, probe_names, ctx, assisted_runs=assisted_runs,
                                                             identity_runs=identity_runs))
    result.not_covered.update({c: why for c, why in NOT_RUN.get(name, {}).items() if c not in result.not_covered})
    return result, adapter


def large_sizing(name: str) -> str:
    """The report's sentence on how the real-vocabulary rows were sized for this engine ('' at the defaults)."""
    scale, max_vocab = LARGE.get(name, (1.0, None))
    if scale >= 1.0 and max_vocab is None:
        return ""
    from specverify.battery import large_problems as lp
    text = (f"Real-vocabulary rows sized for the Triton interpreter: {scale:g} of the default samples per "
            f"problem (at least {lp.MIN_SCALED}; the n column gives each row's samples, min TV its power)")
    if "far_tail" in (PLANS[name][2] or ()) and (max_vocab is None or max_vocab >= lp.FAR_TAIL_VOCAB):
        from specverify import stats
        n = lp.scaled(lp.FAR_TAIL_SAMPLES, scale)
        m = lp.tail_mass(lp.far_tail())
        text += (f"; the far tail at {n} draws ({n * m:.1f} expected tail hits; a tail never drawn would have "
                 f"p = {stats.binomial_test(0, n, m).p_value:.2g})")
    if max_vocab is not None:
        text += f"; problems with V > {max_vocab} not run (listed under Not covered)"
    return text + "."


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("_")


def markdown(result, repros: dict, name: str) -> str:
    lines = [f"# {result.engine} {result.engine_version}: {result.verdict.upper()}", "",
             f"specverify audit of `{name}` ({sys.platform}, CPU; Triton kernels under TRITON_INTERPRET=1 where the "
             f"engine has them). Seed {result.seed}, {result.samples} samples per one-step problem, family-wise "
             f"alpha {result.alpha:g} by Holm over every statistical row; min TV = the smallest total-variation "
             f"deviation detected with probability 0.99. Total {result.seconds:.0f} s.", ""]
    if name.startswith("sglang"):
        lines += [NOT_AUDITABLE["sglang"], ""]
    if name in NOTES:
        lines += [NOTES[name], ""]
    if large_sizing(name):
        lines += [large_sizing(name), ""]
    failed = [c for c in result.checks if c.verdict in (FAIL, ERROR)]
    if failed:
        lines += ["## Failing rows", ""]
        for c in failed:
            rep = repros.get(c.name)
            lines.append(f"- **{c.name}**: {c.detail}" + (f" (p = {c.p_value:.3g})" if c.p_value is not None else "")
                         + (f" -- reproducer `{rep}.py`, output `{rep}.out`" if rep else " -- no standalone reproducer"))
        lines.append("")
    if result.not_covered:
        lines += ["## Not covered", ""]
        lines += [f"- `{check}`: {why}" for check, why in result.not_covered.items()] + [""]
    warned = [c for c in result.checks if c.verdict == WARN]
    if warned:
        lines += ["## Outside the contract (reported, not failures)", ""]
        lines += [f"- {c.name}: {c.detail}" for c in warned] + [""]
    lines += ["## Every row", "", "| check | verdict | statistic | dof | p-value | n | min TV | seconds |",
              "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in result.checks:
        lines.append(f"| `{c.name}` | {c.verdict}{' (exact)' if c.exact else ''} | {fmt(c.statistic, '.2f')} | "
                     f"{fmt(c.dof, 'd')} | {fmt(c.p_value, '.3g')} | {c.n} | {fmt(c.min_detectable_tv, '.4f')} | "
                     f"{c.seconds:.1f} |")
    return "\n".join(lines) + "\n"


def run_repro(script: Path) -> str:
    """Run one reproducer (its own process, this environment) and write its output beside it."""
    script = script.resolve()
    try:
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=dict(os.environ),
                              timeout=REPRO_TIMEOUT, cwd=str(script.parent))
        text = "\n".join(line for line in (proc.stdout + proc.stderr).splitlines() if "vllm._C" not in line)
        text += f"\n[exit code {proc.returncode}]\n"
    except subprocess.TimeoutExpired:
        text = f"[timed out after {REPRO_TIMEOUT} s]\n"
    script.with_suffix(".out").write_text(text)
    return text


def write(result, name: str, out_root: str, run_repros: bool = True) -> Path:
    version = (result.engine_version or "unknown").split(" ")[0]
    folder = Path(out_root) / f"{slug(name)}-{version}"
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    repros = {}
    for c in result.checks:
        if c.verdict not in (FAIL, ERROR):
            continue
        for pattern, script in REPRODUCERS.get(name, []):
            if pattern in c.name:
                repros[c.name] = f"repro_{script}"
                break
    for script in sorted(set(repros.values())):
        shutil.copyfile(REPRO_DIR / f"{script[len('repro_'):]}.py", folder / f"{script}.py")
        if run_repros:
            run_repro(folder / f"{script}.py")
    (folder / "audit.json").write_text(json.dumps(json_safe({**result.to_dict(), "reproducers": repros}), indent=1,
                                                  allow_nan=False) + "\n")
    (folder / "README.md").write_text(markdown(result, repros, name))
    return folder
