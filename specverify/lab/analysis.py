"""The lab's analysis: the measured units (units.py) set beside the chapter's formulas (formulas.py).

    analyse(config, units, prompts, L, depths) -> the lab result (kind "lab"): c, the knee fit, the
        kappa sweep of every proposer pooled over prompts (E, r_i, alpha, speedups and their
        predictions), the batch sweep beside the roofline, end-to-end runs, the draft depth scan
    choose_depth(config, depth_units, knee) -> the draft depth with the largest predicted speedup
"""

from __future__ import annotations

from dataclasses import asdict

import numpy as np

from specverify.format import json_safe

from . import formulas as F
from . import measure as M
from .config import LabConfig


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


def _kappa_row(config: LabConfig, u: dict, n_prompts: int, p: str, k: int, c: float, plain: dict,
               plain_wall: dict, verify_cost) -> dict:
    """Proposer p at kappa k, pooled over prompts, beside its predictions (with its pooled counts
    under "_counts")."""
    clk = config.clock
    plain_tps = plain["decode_tps"]
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
    return {
        "kappa": k, "E": E, "alpha": a, "r_i": pooled["r_i"], "speedup": S, "speedup_wall": S_wall,
        "speedup_per_prompt": per, "speedup_iqr": M.iqr(per) if per else None,
        "decode_tps": pooled["decode_tps"], "c_in_run": c_run,
        "E_iid": F.expected_length(a, k) if a is not None else None,
        "pred_formula": F.speedup(E, k, c) if E else None,                 # E / (1 + k c)
        "pred_iid": F.speedup(F.expected_length(a, k), k, c) if a is not None else None,
        "verify_cost": v,
        "pred_verify_cost": F.speedup(E, k, c, v) if E else None,         # E / (v + k c)
        "_counts": (pooled["drafted_at"], pooled["accepted_at"]),
    }


def _proposer(config: LabConfig, u: dict, n_prompts: int, p: str, c: float, plain: dict, plain_wall: dict,
              verify_cost) -> dict:
    """Proposer p's kappa sweep: one row per kappa, and at the largest kappa r_i against alpha^i."""
    rows = [_kappa_row(config, u, n_prompts, p, k, c, plain, plain_wall, verify_cost) for k in config.kappas]
    for r in rows[:-1]:
        r.pop("_counts")
    top = rows[-1]
    top_counts = top.pop("_counts")
    a_top = top["alpha"]
    r_i = top["r_i"]
    iid = [a_top ** (i + 1) for i in range(len(r_i))] if a_top is not None else []
    dev = [abs(r - q) for r, q in zip(r_i, iid) if r is not None]
    best_row = max(rows, key=lambda r: r["speedup"] or 0)
    return {
        "c": c, "rows": rows, "r_i": r_i, "alpha": a_top, "alpha_pow_i": iid,
        "drafted_at_top": top_counts[0], "accepted_at_top": top_counts[1],
        "conditional_rates": [r / q if q else None for r, q in zip(r_i, [1.0, *r_i[:-1]]) if r is not None],
        "iid_max_abs_dev": max(dev) if dev else None,
        "E_max_kappa": top["E"], "E_iid_max_kappa": top["E_iid"],
        "best_kappa": best_row["kappa"], "best_speedup": best_row["speedup"],
        "break_even_alpha": {str(k): F.break_even_alpha(k, c) for k in config.kappas},
        "break_even_alpha_verify_cost": {str(k): F.break_even_alpha(k, c, verify_cost(k)) for k in config.kappas},
    }


def _batch_sweep(config: LabConfig, u: dict, proposers: dict, c: dict, t_ngram_lookup: float, T_star: float) -> dict:
    """Step times at every batch size, the measured speedup S(B) of each proposer from them, and the
    roofline's prediction."""
    best = M.best
    ks = config.sweep_kappa
    batch = {"B": list(config.batches), "kappa": ks, "T_star": T_star, "ctx_len": config.ctx_len,
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
        t_prop = td * ks if p == "draft" else t_ngram_lookup * np.array(config.batches, dtype=np.float64)
        S = E * tp / (tv + t_prop)
        roof = F.roofline_speedup(np.array(config.batches, dtype=np.float64), E, ks, c[p], T_star)
        batch["curves"][p] = {
            "E": E, "c": c[p], "S_measured": S.tolist(), "S_roofline": roof.tolist(),
            "crossing_measured": F.crossing_from_curve(config.batches, S),
            "crossing_roofline": F.roofline_crossing(E, ks, c[p], T_star),
            "S_formula_batch1": F.speedup(E, ks, c[p]),
        }
    return batch


def _e2e(config: LabConfig, u: dict) -> dict:
    """End-to-end plain and speculative decode tokens/s at each e2e batch size."""
    clk = config.clock
    e2e = {}
    for B in config.e2e_batches:
        runs = u[f"e2e/{B}"]
        pl = _pool_runs(runs["none"], clk)
        e2e[str(B)] = {"plain_tps": pl["decode_tps"]}
        for p in config.proposers:
            sp = _pool_runs(runs[p], clk)
            e2e[str(B)][p] = {"tps": sp["decode_tps"], "E": sp["E"],
                              "speedup": sp["decode_tps"] / pl["decode_tps"] if sp["decode_tps"] and pl["decode_tps"] else None}
    return e2e


def _depth_scan(config: LabConfig, u: dict, depths: list, v_sweep: float) -> list:
    """The draft depth scan: c(L) against acceptance, beside the break-even curve."""
    ks = config.sweep_kappa
    depth = []
    for d in depths:
        du = u[f"depth/{d}"]
        pooled = _pool_runs(du["runs"], config.clock)
        E = pooled["E"]
        depth.append({"L": d, "c": du["c"], "E": E, "alpha": pooled["alpha"], "r_i": pooled["r_i"],
                      "pred_formula": F.speedup(E, ks, du["c"]) if E else None,
                      "pred_verify_cost": F.speedup(E, ks, du["c"], v_sweep) if E else None,
                      "break_even_alpha": F.break_even_alpha(ks, du["c"]),
                      "break_even_alpha_verify_cost": F.break_even_alpha(ks, du["c"], v_sweep)})
    return depth


def analyse(config: LabConfig, u: dict, prompts: list, L: int, depths: list) -> dict:
    """The lab result (kind "lab", JSON-safe) from the measured units `u` {unit name: value}."""
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
    plain_runs = [r for i in range(n_prompts) for r in u[f"kappa/{i}"]["plain"]]   # pooled over prompts
    plain = _pool_runs(plain_runs, clk)
    plain_wall = _pool_runs(plain_runs, "wall")
    proposers = {p: _proposer(config, u, n_prompts, p, c[p], plain, plain_wall, verify_cost) for p in config.proposers}
    return json_safe({
        "kind": "lab", "config": asdict(config), "n_prompts": n_prompts, "draft_layers": L,
        "depths": _depth_scan(config, u, depths, verify_cost(config.sweep_kappa)),
        "clock": clk,
        "c": {"draft": c_unit["c_draft"], "draft_median_of_ratios": c_unit["c_draft_median_of_ratios"],
              "t_target_1": best(c_unit["t_target"]), "t_draft_1": best(c_unit["t_draft"]),
              "t_target_rounds": c_unit["t_target"], "t_draft_rounds": c_unit["t_draft"],
              "ngram": c_unit["c_ngram"], "t_ngram_lookup": c_unit["t_ngram_lookup"]},
        "knee": {"T": knee["T"], "t_best": t_med.tolist(), "t_rounds": knee["t"], **fit,
                 "affine": F.fit_affine(T, t_med)},
        "plain": {"decode_tps": plain["decode_tps"], "decode_tokens": plain["decode_tokens"], "decode_s": plain["decode_s"],
                  "decode_wall_tps": plain_wall["decode_wall_tps"]},
        "proposers": proposers,
        "batch": _batch_sweep(config, u, proposers, c, c_unit["t_ngram_lookup"], fit["T_star"]),
        "e2e": _e2e(config, u),
        "chapter": {"E_0.7_k3": F.expected_length(0.7, 3), "break_even_k3_c0.165": F.break_even_alpha(3, 0.165),
                    "crossing_k3_c0.165_a0.7_T295": F.roofline_crossing(F.expected_length(0.7, 3), 3, 0.165, 295)},
    })
