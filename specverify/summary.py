"""An audit result in words: the one-line verdict, the diagnosis, failing rows, what was not covered.

    verdict_line(result)   "reference: PASS -- 192 rows (150 statistical, family-wise alpha 0.001 by Holm), seed 0, 12.3 s"
    first_line(result)     "mutant:resample-from-p: 14/192 rows failed (biased output law); closest known bug: resample-from-p"
    text(result)           the verdict line, the diagnosis, every failing row, not covered (`str(AuditResult)`)
    markdown(result), html(result)   the same for notebooks (`AuditResult._repr_markdown_`, `_repr_html_`):
                           failing rows first, passing rows folded

Verdicts print in capitals (PASS, FAIL, SKIP, ERROR, WARN): the same words as the result's strings
(`specverify.verdicts`). Works on an `AuditResult` (`specverify.audit`).
"""

from __future__ import annotations

import html as html_mod

from specverify import diagnosis as diag
from specverify.format import fmt, fmt_p
from specverify.verdicts import FAILING


def _stat_rows(result) -> int:
    return sum(1 for c in result.checks if c.p_value is not None and not c.exact)


def verdict_line(result) -> str:
    kind = f" ({result.deviation['text']})" if result.deviation else ""
    failed = result.failed()
    counts = f"{len(failed)}/{len(result.checks)} rows failed" if failed else f"{len(result.checks)} rows"
    return (f"{result.engine}: {result.verdict.upper()}{kind} -- {counts} ({_stat_rows(result)} statistical, "
            f"{result.family()}), seed {result.seed}, {result.seconds:.1f} s")


def first_line(result) -> str:
    """The failure's first line (pytest): name, rows failed, kind, closest known bug."""
    failed = [c for c in result.checks if c.verdict in FAILING]
    kind = f" ({result.deviation['text']})" if result.deviation else ""
    if not failed:
        return f"{result.engine}: {result.verdict.upper()} -- {len(result.checks)} rows"
    return (f"{result.engine}: {len(failed)}/{len(result.checks)} rows failed{kind}"
            + diag.first_line_hint(getattr(result, "diagnosis", None)))


def row_line(c) -> str:
    p = f" (p = {fmt_p(c.p_value)})" if c.p_value is not None else ""
    return f"{c.verdict.upper()} {c.name}: {c.detail}{p}"


def text(result, max_failing: int | None = 20) -> str:
    lines = [verdict_line(result)]
    lines += ["  " + x for x in diag.lines(getattr(result, "diagnosis", None))]
    failed = [c for c in result.checks if c.verdict in FAILING]
    shown = failed if max_failing is None else failed[:max_failing]
    lines += ["  " + row_line(c) for c in shown]
    if len(shown) < len(failed):
        lines.append(f"  ... and {len(failed) - len(shown)} more failing rows (result.failed())")
    if result.stop is not None and result.stop.get("stopped_at"):
        lines.append(f"  fail-fast: stopped at {result.stop['stopped_at']}")
    if result.not_covered:
        lines.append("  not covered:")
        lines += [f"    {k}: {v}" for k, v in result.not_covered.items()]
    return "\n".join(lines)


def _md(s) -> str:
    """Text safe inside a Markdown table cell (HTML escaped, pipes and newlines neutralised)."""
    return html_mod.escape(str(s)).replace("|", "&#124;").replace("\n", " ").replace("[", "&#91;").replace("]", "&#93;")


_COLUMNS = ("row", "verdict", "p-value", "n", "min TV", "detail")


def _cells(c) -> tuple:
    return (c.name, c.verdict.upper() + (" (exact)" if c.exact else ""), fmt_p(c.p_value), str(c.n),
            fmt(c.min_detectable_tv, ".4f"), c.detail)


def markdown(result) -> str:
    out = [f"**{_md(verdict_line(result))}**", ""]
    for x in diag.lines(getattr(result, "diagnosis", None)):
        out.append(f"- {_md(x)}")
    failed = [c for c in result.checks if c.verdict in FAILING]
    others = [c for c in result.checks if c.verdict not in FAILING]

    def table(rows):
        t = ["| " + " | ".join(_COLUMNS) + " |", "|" + "---|" * len(_COLUMNS)]
        t += ["| " + " | ".join(_md(v) for v in _cells(c)) + " |" for c in rows]
        return t

    if failed:
        out += ["", "Failing rows:", ""] + table(failed)
    if others:
        out += ["", f"<details><summary>{len(others)} other rows (passing, skipped, warnings)</summary>", ""]
        out += table(others) + ["", "</details>"]
    if result.not_covered:
        out += ["", "Not covered:", ""] + [f"- `{_md(k)}`: {_md(v)}" for k, v in result.not_covered.items()]
    return "\n".join(out)


def html(result) -> str:
    esc = html_mod.escape

    def table(rows):
        head = "".join(f"<th>{esc(h)}</th>" for h in _COLUMNS)
        body = "".join("<tr>" + "".join(f"<td>{esc(str(v))}</td>" for v in _cells(c)) + "</tr>" for c in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    colour = "#1a7f37" if not result.failed() else "#cf222e"
    out = [f'<div class="specverify-result"><p style="color:{colour}"><b>{esc(verdict_line(result))}</b></p>']
    d = diag.lines(getattr(result, "diagnosis", None))
    if d:
        out.append("<ul>" + "".join(f"<li>{esc(x)}</li>" for x in d) + "</ul>")
    failed = [c for c in result.checks if c.verdict in FAILING]
    others = [c for c in result.checks if c.verdict not in FAILING]
    if failed:
        out.append("<p>Failing rows:</p>" + table(failed))
    if others:
        out.append(f"<details><summary>{len(others)} other rows (passing, skipped, warnings)</summary>{table(others)}</details>")
    if result.not_covered:
        out.append("<p>Not covered:</p><ul>" + "".join(f"<li><code>{esc(k)}</code>: {esc(str(v))}</li>"
                                                      for k, v in result.not_covered.items()) + "</ul>")
    out.append("</div>")
    return "".join(out)

