"""`specverify report`: audit results (and zoo results) -> one HTML page + its Markdown twin.

Layout of a report folder (written atomically, see atomic.py):

    index.html       the page: inline CSS, no network assets, images from img/ (or inlined: embed)
    README.md        the Markdown twin (same blocks; GitHub renders it when browsing the folder)
    img/*.png        the plots
    summary.json     engines, verdicts and every check's verdict, p-value and min detectable TV

What is in it, per engine (results are grouped by their `engine` field; several results of one
engine are seeded repeats -- run `specverify audit ENGINE --seed S --json rS.json` for a few S):

    verdict line, the repeats table (seed, verdict, failing checks)
    the verdict table of the first result (lowest seed)
    QQ plot: the p-values of every statistical check of every repeat against U(0, 1), with the
        99% pointwise band of the order statistics and a KS p-value (an exact engine stays inside;
        a biased one peels off to the upper right)
    power curve: min detectable TV against n for the dofs of its checks, the checks as points
    per check: observed vs expected counts and standardised residuals (bars), p-value, min TV,
        and whatever else its `data` holds

and, with two or more engines or a zoo result, the engine x check-family matrix.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from specverify import __version__
from specverify.errors import InputError
from specverify.format import fmt, fmt_p
from specverify.progress import as_progress

from . import analysis as A
from . import plots
from .atomic import atomic_dir, check_replaceable
from .doc import BulletList, Details, Document, Heading, Image, Para, Table, slug, write_document
from specverify.verdicts import FAIL, FAILING, PASS

MAX_TABLE_CELLS = 16            # per-check count tables are shown when the check has at most this many cells
POWER_NS = np.unique(np.logspace(2, 7, 41).astype(int))


@dataclass
class ReportInfo:
    path: str
    files: list
    engines: dict = field(default_factory=dict)     # engine -> overall verdict


class _Images:
    def __init__(self):
        self.used: set = set()

    def name(self, stem: str) -> str:
        base = slug(stem)[:80]
        name, k = base, 1
        while name in self.used:
            k += 1
            name = f"{base}-{k}"
        self.used.add(name)
        return f"img/{name}.png"


def group_by_engine(results: list) -> dict:
    groups: dict = {}
    for r in results:
        groups.setdefault(r.get("engine", "?"), []).append(r)
    for g in groups.values():
        g.sort(key=lambda r: (r.get("seed") is None, r.get("seed") or 0))
    return groups


def _verdict_tables(result: dict) -> list:
    """The failing rows' table first, then the other rows folded (a <details> block)."""
    rows = result.get("checks", [])
    failing = [c for c in rows if c.get("verdict") in FAILING]
    others = [c for c in rows if c.get("verdict") not in FAILING]
    blocks = [_verdict_table(failing)] if failing else []
    if others:
        label = "passing" if all(c.get("verdict") == PASS for c in others) else "other (passing, skipped, warnings)"
        blocks.append(Details(f"{len(others)} {label} rows", [_verdict_table(others)], open=not failing))
    return blocks


def _diagnosis(result: dict) -> list:
    """A failing audit's diagnosis (`specverify.diagnosis`): its worst cells and the zoo's hint."""
    from specverify import diagnosis

    try:
        found = diagnosis.diagnose(result)
    except (TypeError, ValueError, KeyError, AttributeError):      # a malformed row: the table still shows it
        return []
    lines = diagnosis.lines(found)
    return [Heading(3, "Diagnosis"), BulletList(lines)] if lines else []


def _verdict_table(checks: list) -> Table:
    rows, cls = [], []
    for c in checks:
        d = c.get("data") or {}
        rows.append([c["name"], c["verdict"].upper() + (" (exact)" if c.get("exact") else ""),
                     fmt(c.get("statistic"), ".2f"), fmt(c.get("dof"), "d"), fmt_p(c.get("p_value")),
                     fmt_p(d.get("holm_adjusted_p")), str(c.get("n", "")), fmt(c.get("min_detectable_tv"), ".4f"),
                     c.get("detail", "")])
        cls.append(c["verdict"])
    return Table(["check", "verdict", "statistic", "dof", "p-value", "Holm p", "n", "min TV", "detail"], rows,
                 row_class=cls, align="llrrrrrrl", cls="verdicts")


def _check_blocks(c: dict, engine: str, images: _Images, bar) -> Details:
    d = c.get("data") or {}
    summary = f"{c['name']}: {c['verdict'].upper()}"
    if c.get("p_value") is not None:
        summary += f", p = {fmt_p(c['p_value'])}"
    if c.get("min_detectable_tv") is not None:
        summary += f", min TV {c['min_detectable_tv']:.4f}"
    blocks: list = []
    line = [f"n = {c.get('n', 0)}"]
    if c.get("statistic") is not None:
        line.append(f"statistic {c['statistic']:.2f} on {fmt(c.get('dof'), 'd')} dof")
    if d.get("holm_adjusted_p") is not None:
        line.append(f"Holm-adjusted p {fmt_p(d['holm_adjusted_p'])}")
    if c.get("detail"):
        line.append(c["detail"])
    blocks.append(Para("; ".join(line) + "."))
    t = A.cell_table(d)
    if t is not None:
        blocks.append(Image(images.name(f"{engine}-{c['name']}"), plots.residual_plot(t, c["name"]),
                            f"observed vs expected and residuals of {c['name']}",
                            caption=f"{t.raw_cells} cells" + (f", pooled to {len(t.labels)} (expected >= "
                                                               f"{A.DISPLAY_MIN_EXPECTED:g})" if t.pooled else "")
                            + f"; sum of squared residuals {t.chi2:.2f}"))
        bar.advance(note=c["name"])
        if len(t.labels) <= MAX_TABLE_CELLS:
            blocks.append(Table(["cell", "observed", "expected", "residual"],
                                [[lab, f"{o:.0f}", f"{e:.1f}", f"{r:+.2f}"] for lab, o, e, r in
                                 zip(t.labels, t.observed, t.expected, t.residuals)],
                                row_class=[FAIL if not np.isfinite(r) or abs(r) > 3 else None for r in t.residuals],
                                align="lrrr"))
    extra = A.extra_data(d)
    if extra:
        blocks.append(BulletList([f"`{k}`: {A.short_value(v)}" for k, v in extra.items()]))
    bad = c["verdict"] in FAILING
    return Details(summary, blocks, open=bad, cls=c["verdict"])


def _engine_section(engine: str, results: list, images: _Images, bar) -> list:
    primary = results[0]
    verdict = A.worst([r.get("verdict", "") for r in results])
    stat = A.statistical_checks(primary)
    blocks: list = [Heading(2, f"Engine `{engine}`: {verdict.upper()}", anchor=slug("engine-" + engine))]
    seeds = [r.get("seed") for r in results]
    blocks.append(Para(
        f"{verdict.upper()}: {len(primary.get('checks', []))} checks ({len(stat)} statistical), family-wise "
        f"alpha {primary.get('alpha', 0):g} by "
        + ("Holm" if "stop" not in primary else "Bonferroni over anytime-valid e-values (decisive, "
           f"{primary['stop'].get('rounds')} rounds)")
        + f", {primary.get('samples', '?')} samples per problem; "
        f"engine version {primary.get('engine_version')}; "
        + (f"{len(results)} seeded repeats (seeds {', '.join(map(str, seeds))})." if len(results) > 1
           else f"seed {seeds[0]}."), cls=f"verdict-{PASS if verdict == PASS else FAIL}"))
    if len(results) > 1:
        blocks.append(Table(["seed", "verdict", "failing checks", "seconds"],
                            [[str(r.get("seed")), r.get("verdict", "").upper(),
                              ", ".join(c["name"] for c in r.get("checks", []) if c["verdict"] == FAIL)[:200] or "-",
                              fmt(r.get("seconds"), ".1f")] for r in results],
                            row_class=[r.get("verdict") for r in results], align="llll"))
    if primary.get("errors"):
        blocks.append(BulletList([f"error: {A.short_value(e, 300)}" for e in primary["errors"]]))

    blocks += _diagnosis(primary)
    blocks.append(Heading(3, "Verdicts" + (f" (seed {primary.get('seed')})" if len(results) > 1 else "")))
    blocks += _verdict_tables(primary)

    pvals = [c["p_value"] for r in results for c in A.statistical_checks(r)]
    if len(pvals) >= 3:
        q = A.qq(pvals)
        blocks.append(Heading(3, "p-values against uniform (QQ)"))
        blocks.append(Image(images.name(f"{engine}-qq"), plots.qq_plot({engine: q}, f"{engine}: {q.n} p-values"),
                            f"QQ plot of the p-values of {engine}",
                            caption="Every statistical check of every repeat; under an exact engine the points "
                                    "follow the diagonal inside the band. The checks of one audit share samples "
                                    "(marginal and joint rows of a problem), so the KS p-value is indicative."))
        blocks.append(Para(f"{q.n} p-values: KS against U(0,1) p = {q.ks_p:.3g}; fraction below 0.01 / 0.05 / 0.1: "
                           f"{q.fraction_below[0.01]:.3f} / {q.fraction_below[0.05]:.3f} / {q.fraction_below[0.1]:.3f}"
                           f" (uniform: 0.01 / 0.05 / 0.1)."))
        bar.advance(note="QQ")

    if stat:
        level, power = A.bonferroni_level(primary), 0.99
        dofs = sorted({int(c["dof"]) for c in stat if c.get("dof")})
        show = sorted({dofs[0], dofs[len(dofs) // 2], dofs[-1]}) if dofs else []
        curves = {d: A.power_curve(d, level, power, POWER_NS) for d in show}
        points = [(c["n"], c["min_detectable_tv"], c["name"]) for c in stat if c.get("min_detectable_tv")]
        blocks.append(Heading(3, "Power"))
        blocks.append(Image(images.name(f"{engine}-power"), plots.power_plot(curves, points, level, power, POWER_NS),
                            f"power curve of {engine}",
                            caption=f"min detectable TV (probability {power:g}) at the Bonferroni level "
                                    f"alpha/m = {level:.2g} for dofs {', '.join(map(str, show))}; it falls as "
                                    "1/sqrt(n). The dots are this audit's checks."))
        bar.advance(note="power")

    blocks.append(Heading(3, "Checks"))
    checks = sorted(primary.get("checks", []), key=lambda c: -A.VERDICT_ORDER.get(c["verdict"], 2))
    for c in checks:
        blocks.append(_check_blocks(c, engine, images, bar))
    return blocks


def _matrix_section(m: A.Matrix, title: str, images: _Images, zoo: dict | None = None) -> list:
    caught = sum(1 for v in m.row_verdict if v == FAIL)
    engines = (zoo or {}).get("engines") if isinstance((zoo or {}).get("engines"), dict) else {}
    rows = []
    for name, rv, vs in zip(m.rows, m.row_verdict, m.verdict):
        failing = [c for c, v in zip(m.cols, vs) if v == FAIL]
        row = [name, (rv or "").upper(), ", ".join(failing) or "-"]
        if engines:
            e = engines.get(name, {})
            row += [fmt(e.get("catch_seconds"), ".2f"), fmt(e.get("seconds"), ".1f")]
        rows.append(row)
    header = ["engine", "verdict", "failing checks"] + (["catch s", "audit s"] if engines else [])
    blocks = [Heading(2, title),
              Para(f"{len(m.rows)} engines x {len(m.cols)} checks; {caught} of {len(m.rows)} fail at least one."
                   + (f" Settings: {A.short_value(zoo.get('settings'), 300)}; wall {zoo.get('wall_seconds')} s."
                      if engines else "")),
              Image(images.name("matrix-" + title), plots.matrix_plot(m, title), title),
              Table(header, rows, row_class=m.row_verdict, align="lll" + "rr" * bool(engines))]
    if engines:
        blocks.append(Para("`catch s`: seconds the fastest catching check needs on its own. Each engine's failing "
                           "rows:", cls="note"))
        for name in m.rows:
            audit = engines.get(name, {}).get("audit") or {}
            bad = [c for c in audit.get("checks", []) if c.get("verdict") in FAILING]
            if engines.get(name, {}).get("error"):
                blocks.append(Details(f"{name}: ERROR", [Para(str(engines[name]["error"]))], cls="error"))
            elif bad:
                blocks.append(Details(f"{name}: {len(bad)} failing rows", [Table(
                    ["check", "verdict", "p-value", "n", "detail"],
                    [[c["name"], c["verdict"].upper() + (" (exact)" if c.get("exact") else ""), fmt_p(c.get("p_value")),
                      str(c.get("n", "")), c.get("detail", "")] for c in bad], row_class=[c["verdict"] for c in bad],
                    align="llrrl")]))
    return blocks


def build_document(inputs: list, title: str | None = None, progress=None) -> Document:
    """inputs: result dicts (audit or zoo). Returns the Document (plots rendered)."""
    progress = as_progress(progress)
    audits = [x for x in inputs if A.kind_of(x) == "audit"]
    zoos = [x for x in inputs if A.kind_of(x) == "zoo"]
    if not audits and not zoos:
        raise InputError("nothing to report: give audit or zoo results")
    groups = group_by_engine(audits)
    engines = list(groups)
    doc = Document(title or ("specverify report: " + (", ".join(engines) if engines else "zoo")))
    doc.add(Para(f"Generated by specverify {__version__} from {len(inputs)} result file(s). Each statistical row is "
                 "a chi-squared test of emitted tokens against the exact law of the float64 reference; the audit's "
                 "family-wise false-alarm rate is alpha (Holm); min TV is the smallest total-variation deviation "
                 "detected with probability 0.99.", cls="note"))
    if engines:
        doc.add(Table(["engine", "verdict", "results", "checks", "failing"],
                      [[f"`{e}`", A.worst([r.get("verdict", "") for r in g]).upper(), str(len(g)),
                        str(len(g[0].get("checks", []))),
                        str(sum(1 for c in g[0].get("checks", []) if c["verdict"] == FAIL))]
                       for e, g in groups.items()],
                      row_class=[A.worst([r.get("verdict", "") for r in g]) for g in groups.values()], align="llrrr"))
    n_plots = sum(sum(1 for c in g[0].get("checks", []) if A.cell_table(c.get("data") or {}) is not None) + 2
                  for g in groups.values()) + len(zoos) + (len(groups) > 1)
    images = _Images()
    with progress.bar(n_plots, "report plots") as bar:
        for z in zoos:
            doc.add(*_matrix_section(A.zoo_matrix(z), "Zoo: mutant x check", images, z))
            bar.advance(note="zoo")
        if len(groups) > 1:
            doc.add(*_matrix_section(A.audit_matrix([g[0] for g in groups.values()]), "Engine x check", images))
            bar.advance(note="matrix")
        for e, g in groups.items():
            doc.add(*_engine_section(e, g, images, bar))
    return doc


def summary(inputs: list) -> dict:
    out = {"specverify_version": __version__, "engines": {}}
    for e, g in group_by_engine([x for x in inputs if A.kind_of(x) == "audit"]).items():
        out["engines"][e] = {
            "verdict": A.worst([r.get("verdict", "") for r in g]),
            "repeats": [{"seed": r.get("seed"), "verdict": r.get("verdict")} for r in g],
            "checks": [{k: c.get(k) for k in ("name", "verdict", "p_value", "min_detectable_tv", "n", "dof", "exact")}
                       for c in g[0].get("checks", [])],
        }
    zoos = [x for x in inputs if A.kind_of(x) == "zoo"]
    if zoos:
        m = A.zoo_matrix(zoos[0])
        out["zoo"] = {"rows": m.rows, "cols": m.cols, "verdict": m.verdict, "row_verdict": m.row_verdict}
    return out


def write_report(inputs: list, out_dir: str, *, title: str | None = None, embed: bool = False,
                 progress=None) -> ReportInfo:
    """Render `inputs` (result dicts) into the folder `out_dir`, atomically (all or nothing)."""
    check_replaceable(os.path.abspath(out_dir))          # fail before the plots, not after
    with atomic_dir(out_dir) as tmp:                     # the staging folder lives exactly as long as the render
        files = write_document(build_document(inputs, title, progress), tmp, embed=embed)
        s = summary(inputs)
        with open(os.path.join(tmp, "summary.json"), "w", encoding="utf-8") as f:
            json.dump(s, f, indent=1)
            f.write("\n")
        files.append("summary.json")
    return ReportInfo(out_dir, files, {e: v["verdict"] for e, v in s["engines"].items()})


def report_from_files(paths: list, out_dir: str, **kw) -> ReportInfo:
    return write_report([A.load_json(p) for p in paths], out_dir, **kw)
