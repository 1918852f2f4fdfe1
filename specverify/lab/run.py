"""Lab 08: acceptance and speedup of speculative decoding, measured on the real model beside the
chapter's formulas (formulas.py).

What is measured (greedy decoding; SmolLM2-135M-Instruct on this CPU unless --quick) is a list of
units -- step_c, knee, depth/<L>, kappa/<i>, batch/<B>, e2e/<B> -- described in units.py.

Step times are the fastest of `rounds` interleaved rounds (on a shared machine the minimum is the
least disturbed estimate of a step's own cost); end-to-end speedups are ratios of decode tokens/s
pooled over prompts, each prompt's plain decode run before and after its speculative runs. The lab
runs torch on one thread by default (--threads to change): with two cores shared by several jobs, a
two-thread GEMM waits at its barrier for whichever thread was preempted.

Every unit is saved to a state file as soon as it is done (keyed by a hash of the configuration),
so an interrupted lab resumes where it stopped (state.py): run the same command again. `--fresh`
starts over. The measured units are then analysed beside the formulas (analysis.py).
"""

from __future__ import annotations

import os
import platform
import time

from specverify.progress import as_progress

from .analysis import analyse, choose_depth
from .config import LabConfig
from .state import State
from .units import load_subject, measure, unit_names


def run_lab(config: LabConfig, *, state_path: str | None = None, fresh: bool = False, progress=None) -> dict:
    """Measure (resuming from `state_path` when it holds units of the same configuration) and analyse;
    returns the lab result dict (kind "lab")."""
    config.validate()
    progress = as_progress(progress)
    import torch
    if config.threads:
        torch.set_num_threads(int(config.threads))
    state = State(state_path, config, fresh=fresh)
    start = time.perf_counter()
    resumed = len(state.units)
    progress("loading the model")
    subject = load_subject(config)
    depths = [] if config.draft_layers is not None else \
        [L for L in config.draft_depths if 1 <= L <= getattr(getattr(subject.model, "config", None), "n_layers", L)]
    units = unit_names(config, depths, len(subject.prompts))
    todo = [u for u in units if not state.done(u)]
    L = config.draft_layers
    with progress.bar(len(units), "lab") as bar:
        bar.advance(len(units) - len(todo), note=f"resumed {len(units) - len(todo)} units" if resumed else None)
        for u in units:
            if u == "step_c" and L is None:       # every depth is measured: pick the draft for the rest
                L = choose_depth(config, {d: state.units[f"depth/{d}"]["value"] for d in depths},
                                 state.units["knee"]["value"])
            if state.done(u):
                continue
            bar.set_note(u)
            t0 = time.perf_counter()
            v = measure(subject, config, u, L, bar)
            state.put(u, {"value": v, "seconds": time.perf_counter() - t0})
            bar.advance(note=u)
    measured_s = sum(state.units[u]["seconds"] for u in units)
    result = analyse(config, {u: state.units[u]["value"] for u in units}, subject.prompts, L, depths)
    result["machine"] = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                         "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                         "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    result["subject"] = subject.description
    result["wall"] = {"this_run_s": time.perf_counter() - start, "measurement_s_all_sessions": measured_s,
                      "units_resumed": len(units) - len(todo), "units_total": len(units)}
    return result
