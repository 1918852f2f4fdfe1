"""The lab's figures (matplotlib Figure + Agg, PNG bytes; see specverify/render/plots.py)."""

from __future__ import annotations

import numpy as np

from specverify.render.plots import BLUE, GREEN, GREY, ORANGE, RED, new_figure, to_png

from . import formulas as F

COLOURS = {"ngram": BLUE, "draft": ORANGE}


def _wilson(k, n, z=1.96):
    if not n:
        return (np.nan, np.nan)
    p = k / n
    d = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / d
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / d
    return centre - half, centre + half


def acceptance_plot(props: dict) -> bytes:
    """Per proposer: measured r_i (95% Wilson intervals) against alpha^i for the fitted alpha, and
    the conditional rates r_i / r_(i-1) against the constant alpha."""
    n = len(props)
    fig = new_figure(4.2 * n, 3.6)
    axes = np.atleast_1d(fig.subplots(1, n, squeeze=False)[0])
    for ax, (name, p) in zip(axes, props.items()):
        top = p["rows"][-1]
        r = np.array([np.nan if x is None else x for x in p["r_i"]])
        i = np.arange(1, len(r) + 1)
        lo_hi = np.array([_wilson(a, d) for a, d in zip(top_accepted(p), top_drafted(p))]) if top_drafted(p) else None
        col = COLOURS.get(name, GREEN)
        if lo_hi is not None and len(lo_hi) == len(r):
            ax.errorbar(i, r, yerr=[r - lo_hi[:, 0], lo_hi[:, 1] - r], fmt="o", color=col, capsize=3,
                        label="measured r_i (95% CI)")
        else:
            ax.plot(i, r, "o", color=col, label="measured r_i")
        if p["alpha"] is not None:
            fine = np.linspace(1, max(1, len(r)), 100)
            ax.plot(fine, p["alpha"] ** fine, "-", color="black", lw=1, label=f"alpha^i, alpha = {p['alpha']:.3f}")
            cond = np.array([np.nan if x is None else x for x in p["conditional_rates"]])
            ax.plot(np.arange(1, len(cond) + 1), cond, "s", mfc="none", color=GREY, ms=5,
                    label="conditional r_i / r_(i-1)")
            ax.axhline(p["alpha"], color=GREY, ls=":", lw=0.8)
        ax.set_ylim(0, 1.02)
        ax.set_xlabel("draft position i")
        ax.set_ylabel("P(first i drafts accepted)")
        ax.set_title(f"{name}: E = {top['E']:.2f} measured, {top['E_iid']:.2f} i.i.d. (kappa {top['kappa']})"
                     if top["E"] is not None and top["E_iid"] is not None else name, fontsize=9)
        ax.legend(fontsize=7, frameon=False)
    return to_png(fig)


def top_drafted(p):
    return p.get("drafted_at_top") or []


def top_accepted(p):
    return p.get("accepted_at_top") or []


def kappa_plot(props: dict) -> bytes:
    """Measured speedup vs kappa (median/IQR over prompts as error bars, pooled as points) against
    E/(1 + kappa c), the i.i.d. E(alpha, kappa)/(1 + kappa c), and E/(v + kappa c) with the measured
    verify cost v = t(kappa+1)/t(1)."""
    n = len(props)
    fig = new_figure(4.4 * n, 3.6)
    axes = np.atleast_1d(fig.subplots(1, n, squeeze=False)[0])
    for ax, (name, p) in zip(axes, props.items()):
        rows = p["rows"]
        k = np.array([r["kappa"] for r in rows])

        def col(key):
            return np.array([np.nan if r[key] is None else r[key] for r in rows], dtype=float)
        S = col("speedup")
        iqr = np.array([r["speedup_iqr"] if r["speedup_iqr"] else (np.nan, np.nan) for r in rows], dtype=float)
        ax.errorbar(k, S, yerr=[np.clip(S - iqr[:, 0], 0, None), np.clip(iqr[:, 1] - S, 0, None)], fmt="o",
                    color=COLOURS.get(name, GREEN), capsize=3, label="measured (IQR over prompts)")
        ax.plot(k, col("pred_formula"), "-", color="black", lw=1, label=f"E/(1 + kappa c), c = {p['c']:.3g}")
        ax.plot(k, col("pred_iid"), "--", color=GREY, lw=1, label="E(alpha, kappa)/(1 + kappa c)")
        ax.plot(k, col("pred_verify_cost"), ":", color=RED, lw=1.3, label="E/(v + kappa c), v measured")
        ax.axhline(1, color="black", lw=0.6)
        ax.set_xlabel("kappa (drafts per step)")
        ax.set_ylabel("speedup over plain decode")
        ax.set_title(f"{name}", fontsize=9)
        ax.legend(fontsize=7, frameon=False)
    return to_png(fig)


def break_even_plot(props: dict, kappa: int) -> bytes:
    """E(alpha, kappa) against alpha with the cost lines 1 + kappa c (and v + kappa c); alpha* where
    they meet; each proposer's measured alpha marked."""
    fig = new_figure(5.4, 3.8)
    ax = fig.subplots()
    a = np.linspace(0, 1, 400)
    ax.plot(a, [F.expected_length(x, kappa) for x in a], color="black", lw=1.2, label=f"E(alpha, {kappa})")
    for name, p in props.items():
        colr = COLOURS.get(name, GREEN)
        row = next((r for r in p["rows"] if r["kappa"] == kappa), None)
        cost = 1 + kappa * p["c"]
        ax.axhline(cost, color=colr, lw=1, ls="--", label=f"{name}: 1 + {kappa}c = {cost:.2f}")
        star = p["break_even_alpha"].get(str(kappa))
        if star is not None:
            ax.plot([star], [cost], "x", color=colr, ms=9, mew=2)
            ax.annotate(f"alpha* = {star:.2f}", (star, cost), textcoords="offset points", xytext=(4, 6),
                        fontsize=7, color=colr)
        if row and row["verify_cost"]:
            vc = row["verify_cost"] + kappa * p["c"]
            ax.axhline(vc, color=colr, lw=1, ls=":", label=f"{name}: v + {kappa}c = {vc:.2f}")
        if row and row["alpha"] is not None:
            ax.plot([row["alpha"]], [row["E"]], "o", color=colr, ms=7, label=f"{name}: measured alpha, E")
    ax.set_xlabel("alpha (per-token acceptance)")
    ax.set_ylabel("tokens per step")
    ax.set_xlim(0, 1)
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    ax.set_title(f"break-even acceptance at kappa = {kappa}", fontsize=9)
    return to_png(fig)


def depth_plot(depths: list, props: dict, kappa: int, ngram: dict | None) -> bytes:
    """Measured (c, alpha) of each draft depth against the break-even curves alpha*(c) for v = 1 and
    the measured verify cost v."""
    fig = new_figure(5.6, 3.9)
    ax = fig.subplots()
    cs = np.linspace(0.0, 1.0, 200)
    star = [F.break_even_alpha(kappa, c) for c in cs]
    ax.plot(cs, [np.nan if a is None else a for a in star], color="black", lw=1.2, label=f"alpha*(c), kappa {kappa}")
    row = next((r for r in props.get("draft", props.get("ngram", {"rows": []}))["rows"] if r["kappa"] == kappa), None)
    v = row["verify_cost"] if row else None
    if v:
        star_v = [F.break_even_alpha(kappa, c, v) for c in cs]
        ax.plot(cs, [np.nan if a is None else a for a in star_v], color=RED, ls=":", lw=1.3,
                label=f"alpha*(c) with v = {v:.2f} measured")
    for d in depths:
        if d["alpha"] is None:
            continue
        ax.plot([d["c"]], [d["alpha"]], "o", color=ORANGE, ms=6)
        ax.annotate(f"L={d['L']}", (d["c"], d["alpha"]), textcoords="offset points", xytext=(4, 3), fontsize=7)
    if ngram and ngram.get("alpha") is not None:
        ax.plot([ngram["c"]], [ngram["alpha"]], "s", color=BLUE, ms=7, label="n-gram")
    ax.plot([], [], "o", color=ORANGE, label="draft = first L layers")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_xlabel("c (draft step / target step)")
    ax.set_ylabel("alpha (fitted)")
    ax.set_title("which drafts can pay off", fontsize=9)
    ax.legend(fontsize=7, frameon=False, loc="upper left")
    return to_png(fig)


def knee_plot(knee: dict) -> bytes:
    T = np.array(knee["T"], dtype=float)
    med = np.array(knee["t_best"]) * 1e3
    rounds = np.array(knee["t_rounds"], dtype=float) * 1e3
    fig = new_figure(5.4, 3.8)
    ax = fig.subplots()
    ax.errorbar(T, med, yerr=[med - rounds.min(axis=1), rounds.max(axis=1) - med], fmt="o", color=BLUE,
                capsize=2, label="target forward, fastest round (bar: slowest)")
    fine = np.exp(np.linspace(np.log(T.min()), np.log(T.max()), 200))
    ax.plot(fine, knee["t1"] * 1e3 * F.roofline_cost(fine, knee["T_star"]), color="black", lw=1,
            label=f"t1 max(1, T/T*): t1 = {knee['t1'] * 1e3:.1f} ms, T* = {knee['T_star']:.1f}")
    af = knee.get("affine")
    if af and af.get("T_half"):
        ax.plot(fine, (af["t0"] + af["slope"] * fine) * 1e3, "--", color=GREY, lw=1,
                label=f"t0 + s T: doubles at T = {af['T_half']:.1f}")
    ax.axvline(knee["T_star"], color=RED, ls=":", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("positions T in one forward")
    ax.set_ylabel("ms")
    ax.set_title("step-time knee", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    return to_png(fig)


def batch_plot(batch: dict, e2e: dict) -> bytes:
    B = np.array(batch["B"], dtype=float)
    fig = new_figure(5.8, 4.0)
    ax = fig.subplots()
    for name, cur in batch["curves"].items():
        colr = COLOURS.get(name, GREEN)
        ax.plot(B, cur["S_measured"], "o-", color=colr, label=f"{name}: measured step times")
        fine = np.exp(np.linspace(0, np.log(max(B.max(), 2)), 200))
        roof = F.roofline_speedup(fine, cur["E"], batch["kappa"], cur["c"], batch.get("T_star", 1.0))
        ax.plot(fine, roof, "--", color=colr, lw=1, label=f"{name}: roofline, T* = {batch.get('T_star', 0):.0f}")
        xb = [int(b) for b in e2e]
        yb = [e2e[b].get(name, {}).get("speedup") for b in e2e]
        pts = [(x, y) for x, y in zip(xb, yb) if y is not None]
        if pts:
            ax.plot([x for x, _ in pts], [y for _, y in pts], "D", mfc="none", color=colr, ms=7,
                    label=f"{name}: end to end")
        if cur["crossing_measured"]:
            ax.axvline(cur["crossing_measured"], color=colr, ls=":", lw=0.8)
    ax.axhline(1, color="black", lw=0.7)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrent sequences B")
    ax.set_ylabel("speedup over plain decode")
    ax.set_title(f"speedup vs concurrency, kappa = {batch['kappa']}", fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    return to_png(fig)


__all__ = ["acceptance_plot", "kappa_plot", "break_even_plot", "depth_plot", "knee_plot", "batch_plot"]
