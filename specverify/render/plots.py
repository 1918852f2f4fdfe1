"""matplotlib figures for the reports, returned as PNG bytes.

No pyplot and no global backend switch: every figure is a `matplotlib.figure.Figure` drawn by the
Agg canvas, so importing this module never changes the caller's matplotlib state, and nothing needs a
display. PNGs carry no timestamp or version metadata, so a re-generated report differs only where
its numbers do.
"""

from __future__ import annotations

import io

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .analysis import CellTable, Matrix, top_cells
from specverify.verdicts import ERROR, FAIL, PASS, SKIP, WARN

DPI = 120                   # 80 gave 344 x 324 px plots, too small to read
RED, ORANGE, GREEN, GREY, BLUE = "#cf222e", "#bc4c00", "#2da44e", "#8c959f", "#0969da"
VERDICT_COLOURS = {PASS: "#aceebb", FAIL: "#ff8182", ERROR: "#ffb77c", WARN: "#f5e08a",
                   SKIP: "#eaeef2", "": "#ffffff"}


def new_figure(w: float, h: float) -> Figure:
    fig = Figure(figsize=(w, h), dpi=DPI)
    FigureCanvasAgg(fig)
    return fig


PALETTE_COLOURS = 128


def to_png(fig: Figure) -> bytes:
    """PNG bytes; reduced to a 128-colour palette (no dithering) when Pillow -- which matplotlib itself
    requires -- is importable: a third of the size, indistinguishable for line and bar plots."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    try:
        from PIL import Image as PILImage
    except ImportError:          # pragma: no cover - matplotlib depends on Pillow
        return buf.getvalue()
    buf.seek(0)
    img = PILImage.open(buf).convert("RGB").quantize(colors=PALETTE_COLOURS, method=PILImage.Quantize.MEDIANCUT,
                                                     dither=PILImage.Dither.NONE)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


def residual_plot(t: CellTable, title: str, max_cells: int = 30) -> bytes:
    """Top: observed and expected counts per cell; bottom: standardised residuals with +-2, +-3 lines."""
    idx = top_cells(t, max_cells)
    k = len(idx)
    labels = [t.labels[i] for i in idx]
    obs, exp, res = t.observed[idx], t.expected[idx], t.residuals[idx]
    w = min(9.0, 3.0 + 0.25 * k)
    fig = new_figure(w, 3.6)
    ax1, ax2 = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [1.2, 1]})
    x = np.arange(k)
    ax1.bar(x, obs, width=0.7, color=BLUE, alpha=0.55, label="observed")
    ax1.plot(x, exp, "_", color="black", markersize=14, markeredgewidth=2, label="expected")
    ax1.set_ylabel("count")
    ax1.legend(loc="upper right", fontsize=7, frameon=False)
    sub = f" ({k} of {len(t.labels)} cells with the largest |r|)" if k < len(t.labels) else ""
    ax1.set_title(title + sub, fontsize=9)
    finite = np.isfinite(res)
    lim = max(4.0, float(np.max(np.abs(res[finite]))) * 1.1 if finite.any() else 4.0)
    shown = np.where(finite, res, np.sign(np.nan_to_num(res, posinf=1, neginf=-1)) * lim)
    colours = [RED if (not np.isfinite(r) or abs(r) > 3) else ORANGE if abs(r) > 2 else GREY for r in res]
    ax2.bar(x, shown, width=0.7, color=colours)
    for y, ls in ((2, ":"), (3, "--")):
        ax2.axhline(y, color=GREY, ls=ls, lw=0.8)
        ax2.axhline(-y, color=GREY, ls=ls, lw=0.8)
    ax2.axhline(0, color="black", lw=0.6)
    ax2.set_ylim(-lim, lim)
    ax2.set_ylabel("(O-E)/sqrt(E)")
    ax2.set_xticks(x)
    ax2.set_xticklabels([lab if len(lab) <= 14 else lab[:13] + "~" for lab in labels],
                        rotation=60 if k > 8 else 0, ha="right" if k > 8 else "center", fontsize=7)
    return to_png(fig)


def qq_plot(groups: dict, title: str) -> bytes:
    """QQ of p-values against U(0,1) on -log10 axes, one series per group, 99% pointwise band of the
    largest group."""
    fig = new_figure(4.8, 4.2)
    ax = fig.subplots()
    biggest = max(groups.values(), key=lambda q: q.n)
    ex = -np.log10(biggest.expected)
    ax.fill_between(ex, -np.log10(biggest.band_hi), -np.log10(biggest.band_lo), color=GREY, alpha=0.3,
                    label="99% band (uniform)", step=None)
    xmax = float(ex.max())
    cap = max(4.0, 2.5 * xmax)              # points above are drawn at the cap, as triangles
    above_total, highest = 0, 0.0
    for name, q in groups.items():
        obs = -np.log10(q.observed)
        x = -np.log10(q.expected)
        over = obs > cap
        ax.plot(x[~over], obs[~over], "o", ms=3.5, alpha=0.8, label=f"{name} (n={q.n}, KS p={q.ks_p:.2g})")
        if over.any():
            ax.plot(x[over], np.full(over.sum(), cap), "^", ms=5, color=RED)
            above_total += int(over.sum())
            highest = max(highest, float(obs.max()))
    if above_total:
        ax.text(0.98, 0.02, f"{above_total} p-values below 1e-{cap:.0f} (down to 1e-{highest:.0f}): drawn at the top",
                transform=ax.transAxes, ha="right", va="bottom", fontsize=7, color=RED)
    ax.plot([0, xmax], [0, xmax], color="black", lw=0.8)
    ax.set_ylim(0, cap * 1.05)
    ax.set_xlabel("expected -log10 p (uniform)")
    ax.set_ylabel("observed -log10 p")
    ax.set_title(title, fontsize=9)
    # beside the axes, never over the points (bbox_inches="tight" makes room)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return to_png(fig)


def power_plot(curves: dict, points: list, level: float, power: float, ns) -> bytes:
    """curves: {dof: tv array over ns}; points: [(n, tv, label)] of the checks."""
    fig = new_figure(5.6, 3.8)
    ax = fig.subplots()
    for dof, tv in curves.items():
        ax.plot(ns, tv, lw=1.2, label=f"dof {dof}")
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], "k.", ms=5, label="the checks of this audit")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("samples n")
    ax.set_ylabel("min detectable TV")
    ax.set_title(f"power: TV detected with prob. {power:g} at level {level:.2g}", fontsize=9)
    ax.grid(True, which="both", alpha=0.25)
    ax.legend(fontsize=7, frameon=False)
    return to_png(fig)


def matrix_plot(m: Matrix, title: str) -> bytes:
    """Rows x columns coloured by verdict, each cell annotated with -log10 of its smallest p-value."""
    nr, nc = len(m.rows), len(m.cols)
    fig = new_figure(min(16.0, 2.5 + 0.55 * nc), min(22.0, 1.2 + 0.32 * nr))
    ax = fig.subplots()
    for i in range(nr):
        for j in range(nc):
            v = m.verdict[i][j] or ""
            ax.add_patch(_rect(j, nr - 1 - i, VERDICT_COLOURS.get(v, "#ffffff")))
            p = m.p_min[i][j] if m.p_min and m.p_min[i] else None
            if v == FAIL and p is not None:
                txt = ">300" if p <= 1e-300 else f"{-np.log10(p):.0f}"
            elif v:
                txt = v[0].upper()
            else:
                txt = ""
            ax.text(j + 0.5, nr - 1 - i + 0.5, txt, ha="center", va="center", fontsize=6.5)
    ax.set_xlim(0, nc)
    ax.set_ylim(0, nr)
    ax.set_xticks(np.arange(nc) + 0.5)
    ax.set_xticklabels(m.cols, rotation=60, ha="right", fontsize=7)
    ax.set_yticks(np.arange(nr) + 0.5)
    ax.set_yticklabels(list(reversed(m.rows)), fontsize=7)
    ax.tick_params(length=0)
    ax.set_title(title + "  (F fail, or -log10 of its smallest p; P pass, S skip, E error, W warn, blank: not applicable)", fontsize=8)
    return to_png(fig)


def _rect(x, y, colour):
    from matplotlib.patches import Rectangle
    return Rectangle((x, y), 1, 1, facecolor=colour, edgecolor="white", lw=1)
