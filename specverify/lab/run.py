"""Lab 08: acceptance and speedup of speculative decoding, measured on the real model beside the
chapter's formulas (formulas.py).

What is measured (greedy decoding; SmolLM2-135M-Instruct on this CPU unless --quick):

    step_c        c = t_draft / t_target: one draft-model step over one target step, both a single
                  decode position at batch 1 (interleaved rounds, fastest of each); the n-gram proposer's
                  cost is one lookup over one target step
    knee          t(T): a target forward over T positions (one sequence), T = 1 .. 512; T* from
                  the fit t1 max(1, T/T*)
    kappa/<i>     prompt i: plain decode (before and after), then every proposer at every kappa,
                  end to end through engine.api.generate: decode tokens/s, E, r_i, alpha
    batch/<B>     step times at B concurrent sequences: plain (B positions), verify (B (kappa+1)),
                  one draft pass (B positions) -> S(B) = E t_plain / (t_verify + kappa t_draft)
    e2e/<B>       end-to-end plain vs speculative at batch B (a check of the step-time model)

Step times are the fastest of `rounds` interleaved rounds (on a shared machine the minimum is the
least disturbed estimate of a step's own cost); end-to-end speedups are ratios of decode tokens/s
pooled over prompts, each prompt's plain decode run before and after its speculative runs. The lab
runs torch on one thread by default (--threads to change): with two cores shared by several jobs, a
two-thread GEMM waits at its barrier for whichever thread was preempted.

Every unit is saved to a state file as soon as it is done (keyed by a hash of the configuration),
so an interrupted lab resumes where it stopped: run the same command again. `--fresh` starts over.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import time
from dataclasses import asdict, dataclass

import numpy as np

from specverify.errors import InputError
from specverify.io import write_json
from specverify.progress import as_progress

from . import formulas as F
from . import measure as M

CATEGORIES = ("edit", "summarise", "chat", "code")


@dataclass
class LabConfig:
    quick: bool = False
    proposers: tuple = ("ngram", "draft")
    kappas: tuple = (1, 2, 3, 4, 5, 6, 7, 8)
    draft_layers: int | None = None  # None: the depth whose predicted speedup E/(v + kappa c) is largest
    draft_depths: tuple = (2, 4, 6, 10, 15, 20, 25)
    depth_prompts: int = 4
    prompts_per_category: int = 2
    max_tokens: int = 48
    knee_T: tuple = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512)
    batches: tuple = (1, 2, 4, 8, 16, 32, 64, 128, 256)
    sweep_kappa: int = 3
    ctx_len: int = 48
    e2e_batches: tuple = (1, 4, 16)
    e2e_max_tokens: int = 24
    rounds: int = 3
    temperature: float = 0.0
    threads: int | None = 1         # one thread: a co-tenant on the other core cannot stall a GEMM barrier
    clock: str = "cpu"              # "cpu" (process CPU time) or "wall"
    seed: int = 0
    backend: str = "invariant"      # the op backend the engine ships with (batch-invariant, and faster
                                    # than torch's default ops for verify steps on this CPU)

    @classmethod
    def quick_config(cls, **kw) -> "LabConfig":
        base = dict(quick=True, kappas=(1, 2, 3), draft_depths=(1, 2), depth_prompts=1, prompts_per_category=1,
                    max_tokens=12,
                    knee_T=(1, 2, 4, 8, 16, 32), batches=(1, 2, 4, 8), sweep_kappa=2, ctx_len=16,
                    e2e_batches=(1, 2), e2e_max_tokens=8, rounds=2)
        base.update(kw)
        return cls(**base)

    def key(self) -> str:
        return hashlib.sha256(json.dumps(asdict(self), sort_keys=True).encode()).hexdigest()[:16]

    def validate(self) -> None:
        if not self.kappas or min(self.kappas) < 1:
            raise InputError("kappas must be >= 1")
        if self.sweep_kappa < 1:
            raise InputError("the batch sweep's kappa must be >= 1")
        for p in self.proposers:
            if p not in ("ngram", "draft"):
                raise InputError(f"unknown proposer {p!r}: choose ngram or draft")
        if not self.batches or min(self.batches) < 1 or not self.knee_T or min(self.knee_T) < 1:
            raise InputError("batch sizes and knee positions must be >= 1")
        if self.rounds < 1 or self.max_tokens < 2:
            raise InputError("need rounds >= 1 and max_tokens >= 2")
        if self.clock not in M.CLOCKS:
            raise InputError(f"clock {self.clock!r}: choose cpu or wall")
        if self.draft_layers is None and not self.draft_depths:
            raise InputError("give --draft-layers or some draft depths to choose from")


# ================================================================================ state

class State:
    """Units of measurement, saved after each one (atomic JSON write)."""

    def __init__(self, path: str | None, config: LabConfig, fresh: bool = False):
        self.path = path
        self.units: dict = {}
        self.key = config.key()
        if path and os.path.exists(path) and not fresh:
            try:
                with open(path) as f:
                    saved = json.load(f)
                if saved.get("key") == self.key:
                    self.units = saved.get("units", {})
            except (OSError, json.JSONDecodeError):
                self.units = {}

    def done(self, unit: str) -> bool:
        return unit in self.units

    def put(self, unit: str, value) -> None:
        self.units[unit] = value
        if self.path:
            write_json(self.path, {"key": self.key, "units": self.units})


def default_state_path(config: LabConfig) -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "specverify", f"lab-{config.key()}.json")


# ============================================================================ the model

def load_subject(config: LabConfig):
    """(model, prompt_ids, eos_id, description)."""
    if config.quick:
        from specverify.engine.model import random_llama
        model = random_llama(seed=config.seed, backend=config.backend)
        rng = np.random.default_rng(config.seed)
        prompts = []
        for i in range(max(2, config.prompts_per_category * 2)):
            motif = rng.integers(0, model.vocab_size, 5).tolist()
            prompts.append(rng.integers(0, model.vocab_size, 4).tolist() + motif * 3)
        return model, prompts, None, f"random-llama (seed {config.seed}, {model.config.n_layers} layers, quick mode)"
    from specverify.engine.bitwise import encode_prompts, load_prompts
    from specverify.engine.loader import load_smollm2
    model, tok = load_smollm2(config.backend)
    chosen = []
    for cat in CATEGORIES:
        chosen.extend(load_prompts(None, categories=[cat])[:config.prompts_per_category])
    if not chosen:
        raise InputError("the engine's prompt set is empty")
    return model, encode_prompts(tok, chosen), tok.eos_id, "SmolLM2-135M-Instruct (Q4_1 GGUF dequantised to fp32)"


# ============================================================================ measuring

def _single_step_times(model, config, L, rounds, bar) -> dict:
    """{"target": [s per round], "draft": [...]}: one decode position at batch 1 on the target and on
    its first L layers, interleaved."""
    target = M.StepTimer(model, config.clock)
    draft = M.StepTimer(model.draft_view(L), config.clock)
    ctx = config.ctx_len
    times = M.interleaved({"target": lambda: target(1, 1, ctx), "draft": lambda: draft(1, 1, ctx)},
                          rounds=rounds, bar=bar)
    target.release()
    draft.release()
    return times


def _measure_c(model, config, prompt_ids, L, bar) -> dict:
    times = _single_step_times(model, config, L, max(5, 3 * config.rounds), bar)
    ratios = [d / t for d, t in zip(times["draft"], times["target"])]
    seq = list(prompt_ids[0]) * 2
    t_lookup = M.ngram_lookup_seconds(seq, max(config.kappas))
    t_t, t_d = M.best(times["target"]), M.best(times["draft"])
    # c: fastest draft step over fastest target step (the least-disturbed round of each); one n-gram
    # lookup proposes all kappa tokens, so c_ngram is its cost per drafted token
    return {"t_target": times["target"], "t_draft": times["draft"], "c_draft": t_d / t_t,
            "c_draft_median_of_ratios": M.median(ratios),
            "t_ngram_lookup": t_lookup, "c_ngram": t_lookup / (max(config.kappas) * t_t),
            "ngram_tokens": len(seq), "draft_layers": L}


def _measure_knee(model, config, bar) -> dict:
    timer = M.StepTimer(model, config.clock)
    fns = {str(T): (lambda T=T: timer(1, T, config.ctx_len)) for T in config.knee_T}
    times = M.interleaved(fns, rounds=config.rounds, bar=bar)
    timer.release()
    return {"T": list(config.knee_T), "t": [times[str(T)] for T in config.knee_T]}


def _measure_depth(model, config, prompts, eos, L, bar) -> dict:
    """A draft of the target's first L layers: c(L) and its acceptance at the sweep kappa."""
    times = _single_step_times(model, config, L, max(3, config.rounds), bar)
    runs = []
    for ids in prompts[:config.depth_prompts]:
        r = M.run_generate(model, [ids], spec="draft", kappa=config.sweep_kappa, max_tokens=config.max_tokens,
                           draft_layers=L, eos_token_id=eos, temperature=config.temperature, seed=config.seed,
                           backend=config.backend).to_dict()
        r.pop("tokens")
        runs.append(r)
    return {"L": L, "c": M.best(times["draft"]) / M.best(times["target"]), "t_target": times["target"],
            "t_draft": times["draft"], "runs": runs}


def _measure_prompt(model, config, ids, eos, L) -> dict:
    def one(spec, kappa):
        return M.run_generate(model, [ids], spec=spec, kappa=kappa, max_tokens=config.max_tokens,
                              draft_layers=L, eos_token_id=eos, temperature=config.temperature,
                              seed=config.seed, backend=config.backend).to_dict()
    out = {"plain": [one("none", 0)]}
    for p in config.proposers:
        for k in config.kappas:
            out[f"{p}/{k}"] = one(p, k)
    out["plain"].append(one("none", 0))
    return out


def _measure_batch(model, config, B, L) -> dict:
    target = M.StepTimer(model, config.clock)
    draft = M.StepTimer(model.draft_view(L), config.clock)
    k, ctx = config.sweep_kappa, config.ctx_len
    times = M.interleaved({"plain": lambda: target(B, 1, ctx), "verify": lambda: target(B, k + 1, ctx),
                           "draft": lambda: draft(B, 1, ctx)}, rounds=config.rounds, warmup=1)
    target.release()
    draft.release()
    return times


def _measure_e2e(model, config, prompts, eos, B, L) -> dict:
    ids = [prompts[i % len(prompts)] for i in range(B)]
    out = {}
    for spec in ("none", *config.proposers, "none"):
        r = M.run_generate(model, ids, spec=spec, kappa=config.sweep_kappa, max_tokens=config.e2e_max_tokens,
                           draft_layers=L, eos_token_id=eos, ignore_eos=True, batch=B,
                           temperature=config.temperature, seed=config.seed, backend=config.backend).to_dict()
        r.pop("tokens")
        out.setdefault(spec, []).append(r)
    return out


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
    model, prompts, eos, subject = load_subject(config)
    depths = [] if config.draft_layers is not None else \
        [L for L in config.draft_depths if 1 <= L <= getattr(getattr(model, "config", None), "n_layers", L)]
    units = (["knee"] + [f"depth/{L}" for L in depths] + ["step_c"] + [f"kappa/{i}" for i in range(len(prompts))]
             + [f"batch/{B}" for B in config.batches] + [f"e2e/{B}" for B in config.e2e_batches])
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
            if u == "knee":
                v = _measure_knee(model, config, bar)
            elif u.startswith("depth/"):
                v = _measure_depth(model, config, prompts, eos, int(u.split("/")[1]), bar)
            elif u == "step_c":
                v = _measure_c(model, config, prompts, L, bar)
            elif u.startswith("kappa/"):
                v = _measure_prompt(model, config, prompts[int(u.split("/")[1])], eos, L)
            elif u.startswith("batch/"):
                v = _measure_batch(model, config, int(u.split("/")[1]), L)
            else:
                v = _measure_e2e(model, config, prompts, eos, int(u.split("/")[1]), L)
            v = {"value": v, "seconds": time.perf_counter() - t0}
            state.put(u, v)
            bar.advance(note=u)
    measured_s = sum(state.units[u]["seconds"] for u in units)
    result = analyse(config, {u: state.units[u]["value"] for u in units}, prompts, L, depths)
    result["machine"] = {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                         "cpu_count": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
                         "load_average_at_end": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}
    result["subject"] = subject
    result["wall"] = {"this_run_s": time.perf_counter() - start, "measurement_s_all_sessions": measured_s,
                      "units_resumed": len(units) - len(todo), "units_total": len(units)}
    return result


# ============================================================================= analysis

def _clean(x):
    """JSON-safe: NaN/inf -> None, numpy scalars -> python."""
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, (np.floating, float)):
        x = float(x)
        return x if math.isfinite(x) else None
    if isinstance(x, np.integer):
        return int(x)
    return x


def _secs(r: dict, clock_name: str) -> float:
    return r.get("decode_cpu_s", 0.0) if clock_name == "cpu" else r["decode_s"]


def _pool_runs(runs: list, clock_name: str = "wall") -> dict:
    """Sum the counters of several end-to-end runs (one config over prompts); decode_s on the clock."""
    acc = sum(r["metrics"]["num_accepted"] for r in runs)
    ver = sum(r["metrics"]["num_verifies"] for r in runs)
    rej = sum(r["metrics"]["num_rejections"] for r in runs)
    k = max((len(r["metrics"]["drafted_at"]) for r in runs), default=0)
    drafted = [sum(r["metrics"]["drafted_at"][i] for r in runs if len(r["metrics"]["drafted_at"]) > i) for i in range(k)]
    accepted = [sum(r["metrics"]["accepted_at"][i] for r in runs if len(r["metrics"]["accepted_at"]) > i) for i in range(k)]
    dec_tok = sum(r["decode_tokens"] for r in runs)
    dec_s = sum(_secs(r, clock_name) for r in runs)
    wall = sum(r["decode_s"] for r in runs)
    steps = sum(r["metrics"]["num_steps"] for r in runs)
    return {"E": 1 + acc / ver if ver else None, "alpha": F.fitted_alpha(acc, rej) if acc + rej else None,
            "r_i": [a / d if d else None for a, d in zip(accepted, drafted)], "drafted_at": drafted,
            "accepted_at": accepted, "verifies": ver, "accepted": acc, "rejections": rej,
            "decode_tokens": dec_tok, "decode_s": dec_s, "decode_tps": dec_tok / dec_s if dec_s > 0 else None,
            "decode_wall_s": wall, "decode_wall_tps": dec_tok / wall if wall > 0 else None,
            "draft_time_s": sum(r["metrics"]["draft_time_s"] for r in runs),
            "target_time_s": sum(r["metrics"]["target_time_s"] for r in runs), "steps": steps,
            "emitted": sum(r["emitted"] for r in runs)}


def _verify_cost_fn(knee: dict):
    """v(kappa) = t(kappa+1 positions) / t(1 position) from the knee's fastest rounds."""
    T = np.array(knee["T"], dtype=np.float64)
    t = np.array([M.best(x) for x in knee["t"]])
    return lambda k: float(np.interp(k + 1, T, t) / t[0])


def choose_depth(config: LabConfig, depth_units: dict, knee: dict) -> int:
    """The draft depth with the largest predicted speedup E / (v(kappa) + kappa c) at the sweep kappa."""
    v = _verify_cost_fn(knee)(config.sweep_kappa)
    k = config.sweep_kappa

    def predicted(L):
        d = depth_units[L]
        E = _pool_runs(d["runs"])["E"] or 1.0
        return E / (v + k * d["c"])
    return max(sorted(depth_units), key=predicted)


def analyse(config: LabConfig, u: dict, prompts: list, L: int, depths: list) -> dict:
    n_prompts = len(prompts)
    clk = config.clock
    c_unit = u["step_c"]
    c = {"draft": c_unit["c_draft"], "ngram": c_unit["c_ngram"]}
    best = M.best
    knee = u["knee"]
    T = np.array(knee["T"], dtype=np.float64)
    t_med = np.array([best(x) for x in knee["t"]])                 # fastest round of each T
    fit = F.fit_knee(T, t_med)
    verify_cost = _verify_cost_fn(knee)                             # v(k) = t(k+1) / t(1)

    # ---- kappa sweep: pooled over prompts
    plain_runs = [r for i in range(n_prompts) for r in u[f"kappa/{i}"]["plain"]]
    plain = _pool_runs(plain_runs, clk)
    plain_wall = _pool_runs(plain_runs, "wall")
    plain_tps = plain["decode_tps"]
    proposers = {}
    for p in config.proposers:
        rows = []
        for k in config.kappas:
            runs = [u[f"kappa/{i}"][f"{p}/{k}"] for i in range(n_prompts)]
            pooled = _pool_runs(runs, clk)
            # per-prompt speedups (each against the mean of its own two plain runs)
            per = []
            for i in range(n_prompts):
                pl = u[f"kappa/{i}"]["plain"]
                ptps = np.mean([r["decode_tokens"] / _secs(r, clk) for r in pl if _secs(r, clk) > 0])
                sr = u[f"kappa/{i}"][f"{p}/{k}"]
                if _secs(sr, clk) > 0:
                    per.append((sr["decode_tokens"] / _secs(sr, clk)) / ptps)
            S = pooled["decode_tps"] / plain_tps if pooled["decode_tps"] and plain_tps else None
            S_wall = (pooled["decode_wall_tps"] / plain_wall["decode_wall_tps"]
                      if pooled["decode_wall_tps"] and plain_wall["decode_wall_tps"] else None)
            E, a = pooled["E"], pooled["alpha"]
            v = verify_cost(k)
            # c as the engine saw it: draft seconds per draft pass over plain target seconds per step
            c_run = None
            if p == "draft" and pooled["verifies"]:
                c_run = (pooled["draft_time_s"] / (pooled["verifies"] * k)) / (plain["target_time_s"] / plain["steps"])
            rows.append({
                "kappa": k, "E": E, "alpha": a, "r_i": pooled["r_i"], "speedup": S, "speedup_wall": S_wall,
                "speedup_per_prompt": per, "speedup_iqr": M.iqr(per) if per else None,
                "decode_tps": pooled["decode_tps"], "c_in_run": c_run,
                "E_iid": F.expected_length(a, k) if a is not None else None,
                "pred_formula": F.speedup(E, k, c[p]) if E else None,                 # E / (1 + k c)
                "pred_iid": F.speedup(F.expected_length(a, k), k, c[p]) if a is not None else None,
                "verify_cost": v,
                "pred_verify_cost": F.speedup(E, k, c[p], v) if E else None,         # E / (v + k c)
                "_counts": (pooled["drafted_at"], pooled["accepted_at"]),
            })
        for r in rows[:-1]:
            r.pop("_counts")
        top = rows[-1]
        top_counts = top.pop("_counts")
        a_top = top["alpha"]
        r_i = top["r_i"]
        iid = [a_top ** (i + 1) for i in range(len(r_i))] if a_top is not None else []
        dev = [abs(r - q) for r, q in zip(r_i, iid) if r is not None]
        best_row = max(rows, key=lambda r: r["speedup"] or 0)
        proposers[p] = {
            "c": c[p], "rows": rows, "r_i": r_i, "alpha": a_top, "alpha_pow_i": iid,
            "drafted_at_top": top_counts[0], "accepted_at_top": top_counts[1],
            "conditional_rates": [r / q if q else None for r, q in zip(r_i, [1.0, *r_i[:-1]]) if r is not None],
            "iid_max_abs_dev": max(dev) if dev else None,
            "E_max_kappa": top["E"], "E_iid_max_kappa": top["E_iid"],
            "best_kappa": best_row["kappa"], "best_speedup": best_row["speedup"],
            "break_even_alpha": {str(k): F.break_even_alpha(k, c[p]) for k in config.kappas},
            "break_even_alpha_verify_cost": {str(k): F.break_even_alpha(k, c[p], verify_cost(k)) for k in config.kappas},
        }

    # ---- batch sweep (step-time model) and roofline
    ks = config.sweep_kappa
    batch = {"B": list(config.batches), "kappa": ks, "T_star": fit["T_star"], "ctx_len": config.ctx_len,
             "t_plain": [], "t_verify": [], "t_draft": [], "curves": {}}
    for B in config.batches:
        tb = u[f"batch/{B}"]
        batch["t_plain"].append(best(tb["plain"]))
        batch["t_verify"].append(best(tb["verify"]))
        batch["t_draft"].append(best(tb["draft"]))
    tp, tv, td = (np.array(batch[k]) for k in ("t_plain", "t_verify", "t_draft"))
    for p in config.proposers:
        row = next(r for r in proposers[p]["rows"] if r["kappa"] == ks) if ks in config.kappas else None
        E = row["E"] if row else None
        if E is None:
            continue
        # the draft model: kappa passes over B positions; n-gram: one lookup per request per step
        t_prop = td * ks if p == "draft" else c_unit["t_ngram_lookup"] * np.array(config.batches, dtype=np.float64)
        S = E * tp / (tv + t_prop)
        roof = F.roofline_speedup(np.array(config.batches, dtype=np.float64), E, ks, c[p], fit["T_star"])
        batch["curves"][p] = {
            "E": E, "c": c[p], "S_measured": S.tolist(), "S_roofline": roof.tolist(),
            "crossing_measured": F.crossing_from_curve(config.batches, S),
            "crossing_roofline": F.roofline_crossing(E, ks, c[p], fit["T_star"]),
            "S_formula_batch1": F.speedup(E, ks, c[p]),
        }
    e2e = {}
    for B in config.e2e_batches:
        runs = u[f"e2e/{B}"]
        pl = _pool_runs(runs["none"], clk)
        e2e[str(B)] = {"plain_tps": pl["decode_tps"]}
        for p in config.proposers:
            sp = _pool_runs(runs[p], clk)
            e2e[str(B)][p] = {"tps": sp["decode_tps"], "E": sp["E"],
                              "speedup": sp["decode_tps"] / pl["decode_tps"] if sp["decode_tps"] and pl["decode_tps"] else None}

    # ---- draft depth scan: c(L) against acceptance, beside the break-even curve
    depth = []
    v_sweep = verify_cost(ks)
    for d in depths:
        du = u[f"depth/{d}"]
        pooled = _pool_runs(du["runs"], clk)
        E = pooled["E"]
        depth.append({"L": d, "c": du["c"], "E": E, "alpha": pooled["alpha"], "r_i": pooled["r_i"],
                      "pred_formula": F.speedup(E, ks, du["c"]) if E else None,
                      "pred_verify_cost": F.speedup(E, ks, du["c"], v_sweep) if E else None,
                      "break_even_alpha": F.break_even_alpha(ks, du["c"]),
                      "break_even_alpha_verify_cost": F.break_even_alpha(ks, du["c"], v_sweep)})

    return _clean({
        "kind": "lab", "config": asdict(config), "n_prompts": n_prompts, "draft_layers": L, "depths": depth,
        "clock": clk,
        "c": {"draft": c_unit["c_draft"], "draft_median_of_ratios": c_unit["c_draft_median_of_ratios"],
              "t_target_1": best(c_unit["t_target"]), "t_draft_1": best(c_unit["t_draft"]),
              "t_target_rounds": c_unit["t_target"], "t_draft_rounds": c_unit["t_draft"],
              "ngram": c_unit["c_ngram"], "t_ngram_lookup": c_unit["t_ngram_lookup"]},
        "knee": {"T": knee["T"], "t_best": t_med.tolist(), "t_rounds": knee["t"], **fit,
                 "affine": F.fit_affine(T, t_med)},
        "plain": {"decode_tps": plain_tps, "decode_tokens": plain["decode_tokens"], "decode_s": plain["decode_s"],
                  "decode_wall_tps": plain_wall["decode_wall_tps"]},
        "proposers": proposers, "batch": batch, "e2e": e2e,
        "chapter": {"E_0.7_k3": F.expected_length(0.7, 3), "break_even_k3_c0.165": F.break_even_alpha(3, 0.165),
                    "crossing_k3_c0.165_a0.7_T295": F.roofline_crossing(F.expected_length(0.7, 3), 3, 0.165, 295)},
    })
