"""The lab's page: each measured figure beside the chapter's formula; HTML + Markdown + lab.json,
written atomically like every report."""

from __future__ import annotations

import json
import os

from specverify.render.atomic import atomic_dir, check_replaceable
from specverify.render.doc import BulletList, Document, Formula, Heading, Image, Para, Table, write_document

from . import plots


def _f(x, spec=".3f") -> str:
    return "-" if x is None else format(x, spec)


def _x(x) -> str:
    return "-" if x is None else f"{x:.2f}x"


def _mean_err(rows: list, key: str):
    """Mean |prediction / measured - 1| over the kappas with both."""
    errs = [abs(row[key] / row["speedup"] - 1) for row in rows if row.get(key) and row.get("speedup")]
    return sum(errs) / len(errs) if errs else None


def _pct(x) -> str:
    return "-" if x is None else f"{x:.0%}"


def _v_at(p: dict, k: int):
    return next((row["verify_cost"] for row in p["rows"] if row["kappa"] == k), None)


def headline(r: dict) -> dict:
    """The numbers the closing note quotes."""
    out = {"c_draft": r["c"]["draft"], "c_ngram": r["c"]["ngram"], "T_star": r["knee"]["T_star"]}
    for name, p in r["proposers"].items():
        k3 = next((row for row in p["rows"] if row["kappa"] == r["batch"]["kappa"]), None)
        out[name] = {
            "alpha": p["alpha"], "E_at_max_kappa": p["E_max_kappa"], "E_iid_at_max_kappa": p["E_iid_max_kappa"],
            "iid_max_abs_dev": p["iid_max_abs_dev"], "best_kappa": p["best_kappa"], "best_speedup": p["best_speedup"],
            "speedup_by_kappa": {row["kappa"]: row["speedup"] for row in p["rows"]},
            "pred_by_kappa": {row["kappa"]: row["pred_formula"] for row in p["rows"]},
            "break_even_alpha_k3": p["break_even_alpha"].get(str(r["batch"]["kappa"])),
            "break_even_alpha_k3_verify_cost": p["break_even_alpha_verify_cost"].get(str(r["batch"]["kappa"])),
            "mean_abs_err_formula": _mean_err(p["rows"], "pred_formula"),
            "mean_abs_err_verify_cost": _mean_err(p["rows"], "pred_verify_cost"),
            "E_sweep_kappa": k3["E"] if k3 else None,
            "crossing_measured": r["batch"]["curves"].get(name, {}).get("crossing_measured"),
            "crossing_roofline": r["batch"]["curves"].get(name, {}).get("crossing_roofline"),
        }
    return out


def build_lab_document(r: dict) -> Document:
    cfg = r["config"]
    props = r["proposers"]
    ks = r["batch"]["kappa"]
    kmax = max(cfg["kappas"])
    doc = Document("Lab 08: speculative-decoding acceptance and speedup, measured")
    w = r.get("wall", {})
    m = r.get("machine", {})
    doc.add(Para(
        f"Subject: {r.get('subject')}; {r['n_prompts']} prompts (categories edit, summarise, chat, code), "
        f"greedy (temperature {cfg['temperature']}), up to {cfg['max_tokens']} tokens each; proposers: "
        f"{', '.join(props)} (draft model = the target's first {r['draft_layers']} layers + its head"
        + (", the depth with the best predicted speedup in the depth scan below" if cfg.get("draft_layers") is None
           else "") + "). "
        + ("Times are CPU seconds of the lab's process (one torch thread), which other jobs on the shared machine "
           "cannot inflate by preempting it; wall-clock speedups are in lab.json. " if r.get("clock") == "cpu" else "")
        + 
        f"Machine: {m.get('processor')}, {m.get('cpu_count')} CPUs, torch {m.get('torch')} with "
        f"{m.get('torch_threads')} threads, load average at the end {m.get('load_average_at_end')} (shared machine: "
        f"comparisons are interleaved; step times are the fastest round). Measurement time "
        f"{_f(w.get('measurement_s_all_sessions'), '.0f')} s"
        + (f" ({w.get('units_resumed')} of {w.get('units_total')} units resumed from an earlier session)"
           if w.get("units_resumed") else "") + ".", cls="note"))
    if cfg.get("quick"):
        doc.add(Para("QUICK MODE: a tiny random model; the numbers exercise the pipeline and mean nothing.",
                     cls="verdict-fail"))

    # ---- headline
    rows = [["c (draft step / target step)", "-", _f(r["c"]["draft"]) + " (draft), " + _f(r["c"]["ngram"], ".2g") + " (n-gram)"],
            ["T* (step-time knee, positions)", "295 (H100, bf16 Llama-3-8B)", _f(r["knee"]["T_star"], ".1f")]]
    for name, p in props.items():
        rows.append([f"{name}: fitted alpha", "0.70 (chapter's example)", _f(p["alpha"])])
        rows.append([f"{name}: E at kappa {kmax}", f"E(alpha, {kmax}) = {_f(p['E_iid_max_kappa'], '.2f')}",
                     _f(p["E_max_kappa"], ".2f")])
        br = next((row for row in p["rows"] if row["kappa"] == p["best_kappa"]), None)
        rows.append([f"{name}: best speedup (kappa)",
                     (f"E/(1+kc) = {_x(br['pred_formula'])}, E/(v+kc) = {_x(br['pred_verify_cost'])}" if br else ""),
                     f"{_x(p['best_speedup'])} (kappa {p['best_kappa']})"])
        rows.append([f"{name}: speedup over kappa, mean abs error of the formula",
                     f"E/(1+kc): {_pct(_mean_err(p['rows'], 'pred_formula'))}; "
                     f"E/(v+kc): {_pct(_mean_err(p['rows'], 'pred_verify_cost'))}",
                     "kappa " + ", ".join(f"{row['kappa']}: {_x(row['speedup'])}" for row in p["rows"])])
        rows.append([f"{name}: break-even alpha* at kappa {ks}", "0.34 for c = 0.165",
                     f"{_f(p['break_even_alpha'].get(str(ks)))} (v = 1); "
                     f"{_f(p['break_even_alpha_verify_cost'].get(str(ks)))} (v = {_f(_v_at(p, ks), '.2f')} measured)"])
        cur = r["batch"]["curves"].get(name, {})
        cm = cur.get("crossing_measured")
        rows.append([f"{name}: speedup crosses 1 at B", _f(cur.get("crossing_roofline"), ".1f") + " (roofline, T* here)",
                     ("< 1 already at B = 1" if cm == 0.0 else "not within B <= " + str(max(r["batch"]["B"])) if cm is None
                      else _f(cm, ".1f"))])
    doc.add(Heading(2, "Summary"), Table(["quantity", "formula / chapter", "measured here"], rows, align="lll"))

    # ---- acceptance
    doc.add(Heading(2, "Acceptance: E and r_i against the i.i.d. model"))
    doc.add(Formula("E = (1 - alpha^(kappa+1)) / (1 - alpha)        r_i = alpha^i   (i.i.d. acceptance)\n"
                    "alpha fitted by maximum likelihood: accepted / (accepted + verifies ending in a rejection)\n"
                    "conditional rate at position i: r_i / r_(i-1)  (constant = alpha under i.i.d.)"))
    doc.add(Image("img/acceptance.png", plots.acceptance_plot(props), "r_i against alpha^i",
                  caption=f"Unconditional per-position acceptance r_i at kappa = {kmax} (95% Wilson intervals), "
                          "the i.i.d. curve alpha^i for the fitted alpha, and the conditional rates."))
    items = []
    for name, p in props.items():
        if p["alpha"] is None:
            continue
        top = p["rows"][-1]
        rel = (top["E"] - top["E_iid"]) / top["E_iid"] if top["E"] and top["E_iid"] else None
        items.append(f"{name}: alpha = {p['alpha']:.3f}; r_i = [{', '.join(_f(x) for x in p['r_i'])}] vs alpha^i = "
                     f"[{', '.join(_f(x) for x in p['alpha_pow_i'])}]; max |r_i - alpha^i| = {_f(p['iid_max_abs_dev'])};"
                     f" E measured {_f(top['E'], '.2f')} vs E(alpha, {top['kappa']}) = {_f(top['E_iid'], '.2f')}"
                     + (f" ({rel:+.0%})" if rel is not None else "") + "; conditional rates ["
                     + ", ".join(_f(x, ".2f") for x in p["conditional_rates"]) + "]")
    doc.add(BulletList(items))

    # ---- speedup vs kappa
    doc.add(Heading(2, "Speedup against kappa"))
    doc.add(Formula("S = E / (1 + kappa c)                 c = t_draft / t_target (one step each, batch 1)\n"
                    "S = E / (v(kappa) + kappa c)          v(kappa) = t(kappa+1 positions) / t(1 position), measured"))
    doc.add(Image("img/speedup_kappa.png", plots.kappa_plot(props), "speedup against kappa",
                  caption="End-to-end decode tokens/s of each configuration over plain decode (pooled over prompts; "
                          "bars: interquartile range of per-prompt ratios)."))
    for name, p in props.items():
        doc.add(Heading(3, f"{name} (c = {p['c']:.3g})"))
        doc.add(Table(["kappa", "E", "alpha", "speedup", "IQR", "wall", "E/(1+kc)", "E(alpha,k)/(1+kc)", "v",
                       "E/(v+kc)", "c in run"],
                      [[str(row["kappa"]), _f(row["E"], ".2f"), _f(row["alpha"]), _x(row["speedup"]),
                        (f"{row['speedup_iqr'][0]:.2f}-{row['speedup_iqr'][1]:.2f}" if row["speedup_iqr"] else "-"),
                        _x(row.get("speedup_wall")),
                        _x(row["pred_formula"]), _x(row["pred_iid"]), _f(row["verify_cost"], ".2f"),
                        _x(row["pred_verify_cost"]), _f(row["c_in_run"])] for row in p["rows"]],
                      align="rrrrrrrrrrr"))
    doc.add(Para("`speedup`: decode tokens per CPU-second (or per second with --clock wall) over plain decode's, "
                 "pooled over prompts; `IQR`: the spread of the per-prompt ratios; `wall`: the same ratio in "
                 "wall-clock time (what a co-tenant disturbs). `c in run` is the draft model's seconds per draft pass inside the engine (first pass of a step "
                 "also catches the draft up on the accepted tokens) over plain decode's seconds per target step.",
                 cls="note"))

    # ---- break-even
    doc.add(Heading(2, "Break-even acceptance on this machine"))
    doc.add(Formula("alpha*: E(alpha*, kappa) = 1 + kappa c      (chapter: 0.34 at kappa 3, c 0.165)\n"
                    "with the measured verify cost: E(alpha*, kappa) = v(kappa) + kappa c"))
    doc.add(Image("img/break_even.png", plots.break_even_plot(props, ks), "break-even alpha",
                  caption=f"E(alpha, {ks}) against the cost of a step in target-step units; below alpha* speculation "
                          "makes decoding slower."))
    doc.add(Table(["kappa"] + [f"{n}: alpha*" for n in props] + [f"{n}: alpha* with v" for n in props],
                  [[str(k)] + [_f(p["break_even_alpha"].get(str(k))) for p in props.values()]
                   + [_f(p["break_even_alpha_verify_cost"].get(str(k))) for p in props.values()]
                   for k in cfg["kappas"]], align="r" * (1 + 2 * len(props))))
    doc.add(Para("A dash: the step costs at least kappa + 1 target steps, so no acceptance rate breaks even.",
                 cls="note"))

    # ---- knee
    kn = r["knee"]
    doc.add(Heading(2, "The step-time knee T*"))
    doc.add(Formula("cost(T) = max(1, T / T*)   (a step of T positions, in units of a one-position step)\n"
                    "fit: t(T) = t1 max(1, T/T*), least squares on log t"))
    doc.add(Image("img/knee.png", plots.knee_plot(kn), "step-time knee",
                  caption=f"One target forward over T new positions after {cfg['ctx_len']} cached ones (logits for "
                          f"every position, as a verify step); {cfg['rounds']} interleaved rounds."))
    doc.add(Para(f"T* = {kn['T_star']:.1f} positions, t1 = {kn['t1'] * 1e3:.1f} ms, rms log error of the fit "
                 f"{kn['rms_log_error']:.3f}. The chapter's T* = 295 is an H100's ridge in bf16; this CPU's ridge is "
                 "where its arithmetic, not its memory bandwidth, starts to bound a step."))
    af = kn.get("affine")
    if af and af.get("T_half"):
        doc.add(Para(f"An affine model t(T) = t0 + s T fits with rms log error {af['rms_log_error']:.3f} "
                     f"(t0 = {af['t0'] * 1e3:.1f} ms, s = {af['slope'] * 1e3:.2f} ms per position): a step of "
                     f"{af['T_half']:.1f} positions costs twice a one-position step. Where the affine model fits "
                     "better, the machine has no flat memory-bound stretch for verification to hide in.",
                     cls="note"))
    doc.add(Table(["T"] + [str(t) for t in kn["T"]], [["ms"] + [f"{x * 1e3:.1f}" for x in kn["t_best"]]]))

    # ---- batch sweep
    b = r["batch"]
    doc.add(Heading(2, "Speedup against concurrency B"))
    doc.add(Formula("S(B) = E max(1, B/T*) / (max(1, B(kappa+1)/T*) + kappa c max(1, B/T*))      (roofline)\n"
                    "B_cross = T* (E - kappa c) / (kappa + 1)       (chapter: 150 at kappa 3, c 0.165, alpha 0.70, T* 295)\n"
                    "measured: S(B) = E t_plain(B) / (t_verify(B, kappa+1) + kappa t_draft(B))"))
    doc.add(Image("img/speedup_batch.png", plots.batch_plot(b, r["e2e"]), "speedup against concurrency",
                  caption=f"kappa = {ks}; step times of B sequences with {b['ctx_len']} cached positions each, E from "
                          "the batch-1 runs; diamonds: end-to-end runs at that batch size."))
    header = ["B", "t_plain ms", "t_verify ms", "t_draft ms"]
    for n in b["curves"]:
        header += [f"{n}: S", f"{n}: roofline"]
    trows = []
    for i, B in enumerate(b["B"]):
        row = [str(B), f"{b['t_plain'][i] * 1e3:.1f}", f"{b['t_verify'][i] * 1e3:.1f}", f"{b['t_draft'][i] * 1e3:.1f}"]
        for cur in b["curves"].values():
            row += [_x(cur["S_measured"][i]), _x(cur["S_roofline"][i])]
        trows.append(row)
    doc.add(Table(header, trows, align="r" * len(header)))
    cross = []
    for n, cur in b["curves"].items():
        cm = cur["crossing_measured"]
        cross.append(f"{n}: E = {cur['E']:.2f}, c = {cur['c']:.3g}; measured crossing "
                     + ("below 1 already at B = 1" if cm == 0.0 else "none up to B = " + str(max(b["B"])) if cm is None
                        else f"B = {cm:.1f}")
                     + f"; roofline prediction B = {_f(cur['crossing_roofline'], '.1f')} (T* = {b['T_star']:.1f})")
    doc.add(BulletList(cross))
    if r["e2e"]:
        names = list(props)
        doc.add(Table(["B", "plain tok/s"] + [f"{n}: tok/s" for n in names] + [f"{n}: speedup" for n in names],
                      [[B, _f(v["plain_tps"], ".1f")] + [_f(v.get(n, {}).get("tps"), ".1f") for n in names]
                       + [_x(v.get(n, {}).get("speedup")) for n in names] for B, v in r["e2e"].items()],
                      align="r" * (2 + 2 * len(names))))

    # ---- draft depth scan
    if r.get("depths"):
        doc.add(Heading(2, "Draft depth: cost against acceptance"))
        doc.add(Formula(f"c(L) = t(first L layers + head) / t(all layers)      alpha*(c): E(alpha*, {ks}) = 1 + {ks} c"
                        f"   (and = v({ks}) + {ks} c)"))
        doc.add(Image("img/depth.png", plots.depth_plot(r["depths"], props, ks, r["proposers"].get("ngram")),
                      "draft depth against break-even",
                      caption=f"Self-speculative drafts (the target's first L layers and its head) at kappa = {ks}: "
                              "measured c and alpha against the break-even curve; a draft above the curve speeds "
                              "decoding up."))
        doc.add(Table(["L layers", "c", "alpha", "E", "E/(1+kc)", "E/(v+kc)", "alpha* (v = 1)", "alpha* (v measured)"],
                      [[str(d["L"]), _f(d["c"]), _f(d["alpha"]), _f(d["E"], ".2f"), _x(d["pred_formula"]),
                        _x(d["pred_verify_cost"]), _f(d["break_even_alpha"]), _f(d["break_even_alpha_verify_cost"])]
                       for d in r["depths"]], align="rrrrrrrr"))

    # ---- proposers compared
    doc.add(Heading(2, "Proposers compared"))
    doc.add(Table(["proposer", "c", "alpha", f"E (kappa {ks})", "best kappa", "best speedup", f"alpha* (kappa {ks})",
                   "crossing B"],
                  [[n, _f(p["c"], ".3g"), _f(p["alpha"]),
                    _f(next((row["E"] for row in p["rows"] if row["kappa"] == ks), None), ".2f"), str(p["best_kappa"]),
                    _x(p["best_speedup"]), _f(p["break_even_alpha"].get(str(ks))),
                    _f(b["curves"].get(n, {}).get("crossing_measured"), ".1f")] for n, p in props.items()],
                  align="lrrrrrrr"))
    doc.add(Para("Regenerate: `specverify lab` (resumes an interrupted run; `--fresh` re-measures; `--quick` is "
                 "the tiny-model smoke test). The numbers are in lab.json beside this page.", cls="note"))
    return doc


def write_lab_report(result: dict, out_dir: str) -> list:
    check_replaceable(os.path.abspath(out_dir))
    doc = build_lab_document(result)
    with atomic_dir(out_dir, kind="lab") as tmp:
        files = write_document(doc, tmp)
        with open(os.path.join(tmp, "lab.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        files.append("lab.json")
    return files
