"""The zoo's matrix (engine x check) as text.

    table(zoo)           a `ZooResult` -> what `specverify zoo` prints: the matrix, each audit's wall,
                         CPU and catch seconds, and the summary line
    readme_block(result) a zoo result dict (what `specverify zoo --json` writes, or a report's
                         summary.json) -> docs/zoo.md's ```console block: the matrix and the summary line
                         without timings, leaving out checks that apply to no engine of the zoo

Cells: X some row of the check failed, . every row passed, - the check does not apply, s skipped,
E the adapter errored, ~ not run (--fail-fast ended that audit at an earlier failing row).
"""

from __future__ import annotations

from specverify.checks import TABLE
from specverify.errors import InputError
from specverify.render.analysis import ZOO_SYMBOLS
from specverify.verdicts import FAIL, PASS

from .run import REFERENCES

# column heads: check -> its short name (`specverify.checks.TABLE`)
SHORT = {c.name: c.short for c in TABLE}
CELL = 6                                                   # width of a matrix column
SYMBOLS = {verdict: symbol for symbol, verdict in ZOO_SYMBOLS.items()}   # a Matrix verdict -> its cell
README_COMMAND = "$ specverify zoo"


def _matrix_line(name: str, width: int, cells) -> str:
    return name.ljust(width) + "  " + " ".join(cell.rjust(CELL) for cell in cells)


def _summary(ok: bool, references: dict, n_mutants: int, missed: list) -> str:
    """The zoo's last line; `references`: {exact engine: its verdict} ("reference" always named)."""
    refs = {"reference": "?", **references}
    said = ", ".join(f"{e} {v.upper()}" for e, v in refs.items())
    return (f"zoo: {'OK' if ok else 'FAILED'} -- {said}, "
            f"{n_mutants - len(missed)}/{n_mutants} mutants caught"
            + (f" (missed: {', '.join(missed)})" if missed else ""))


def table(zoo) -> str:
    width = max(len(e) for e in zoo.engines)
    lines = [_matrix_line("", width, [SHORT.get(c, c) for c in zoo.checks]) + "  verdict   audit s    cpu s  catch s"]
    for e in zoo.engines:
        row = zoo.matrix[e]
        catch = zoo.catch_seconds.get(e)
        lines.append(_matrix_line(e, width, [row[c] for c in zoo.checks])
                     + f"  {zoo.verdicts[e].upper():8s}{zoo.seconds[e]:8.2f} {zoo.cpu_seconds.get(e, 0.0):8.2f} "
                     + (f"{catch:8.2f}" if catch is not None else "       -"))
    for e, err in zoo.errors.items():
        lines.append(f"  {e}: error: {err}")
    lines.append("")
    refs = {e: zoo.verdicts[e] for e in zoo.engines if e in REFERENCES}
    lines.append(_summary(zoo.ok, refs, len(zoo.engines) - len(refs), zoo.missed())
                 + f", {zoo.wall_seconds:.1f} s wall, {sum(zoo.cpu_seconds.values()):.1f} s CPU in the audits")
    return "\n".join(lines)


def _cells(result: dict):
    """(checks, {engine: ({check: cell}, verdict)}) of a zoo result: the shape `specverify zoo --json`
    writes ({"checks", "engines": {name: {"row", "verdict"}}}) or a report's summary.json ({"zoo":
    {"rows", "cols", "verdict": [rows][cols] pass | fail | ..., "row_verdict"}})."""
    if isinstance(result.get("engines"), dict) and isinstance(result.get("checks"), list):
        return result["checks"], {e: (v["row"], v["verdict"]) for e, v in result["engines"].items()}
    z = result.get("zoo")
    if isinstance(z, dict) and {"rows", "cols", "verdict", "row_verdict"} <= set(z):
        return z["cols"], {e: (dict(zip(z["cols"], (SYMBOLS[v] for v in row))), verdict)
                           for e, row, verdict in zip(z["rows"], z["verdict"], z["row_verdict"])}
    raise InputError("zoo result: expected the {checks, engines} of `specverify zoo --json` or the "
                     "{zoo: {rows, cols, verdict, row_verdict}} of a report's summary.json")


def readme_block(result: dict) -> str:
    """docs/zoo.md's zoo block, rendered from a zoo result (see the module docstring)."""
    checks, engines = _cells(result)
    kept = [c for c in checks if any(row[c] not in ("-", "~") for row, _ in engines.values())]
    width = max(len(e) for e in engines)
    lines = ["```console", README_COMMAND, _matrix_line("", width, [SHORT.get(c, c) for c in kept]) + "  verdict"]
    for e, (row, verdict) in engines.items():
        lines.append(_matrix_line(e, width, [row[c] for c in kept]) + "  " + verdict.upper())
    verdicts = {e: verdict for e, (_, verdict) in engines.items()}
    missed = [e for e, verdict in verdicts.items() if e not in REFERENCES and verdict != FAIL]
    refs = {e: v for e, v in verdicts.items() if e in REFERENCES}
    ok = "reference" in refs and all(v == PASS for v in refs.values()) and not missed
    lines += ["", _summary(ok, refs, len(engines) - len(refs), missed), "```"]
    return "\n".join(lines) + "\n"
