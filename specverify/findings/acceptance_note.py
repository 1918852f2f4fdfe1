"""`python -m specverify.findings.acceptance_note AUDIT.json REPORT_DIR [NOTE]`: the engine's acceptance law
(`engine_acceptance` rows) added to an existing report, from an audit that ran that check on its own.

Writes REPORT_DIR/acceptance.md (E observed vs exact, the ranges, the verdict of each row, the audit's
seed, samples, engine version and time) and REPORT_DIR/acceptance.json (the audit's JSON), and adds a
line pointing to them under the README's title (once). The rest of the report -- the whole audit it
came from -- is left as it was: it was not rerun.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from specverify.io import write_atomic

MARK = "<!-- acceptance-note -->"


def render(audit: dict, note: str = "") -> str:
    rows = [c for c in audit["checks"] if c.get("check") == "engine_acceptance"]
    lines = [f"# {audit['engine']} {audit['engine_version']}: the acceptance law at engine level", "",
             f"`specverify audit {audit['engine']} --checks engine_acceptance --samples {audit['samples']} "
             f"--seed {audit['seed']}`: {audit['verdict'].upper()} in {audit['seconds']:.0f} s "
             f"(family-wise alpha {audit['alpha']:g}; docs/acceptance.md says what the rows test).", ""]
    if note:
        lines += [note, ""]
    lines += ["| row | verdict | E observed (CI) | exact E (range) | p-value | power |",
              "| --- | --- | --- | --- | --- | --- |"]
    for c in rows:
        a = (c.get("data") or {}).get("acceptance") or {}
        if a:
            ci = a.get("E_observed_ci")
            obs = ("-" if a.get("E_observed") is None        # a row with no verify step (a greedy SKIP)
                   else f"{a['E_observed']:.4f}" + (f" [{ci[0]:.4f}, {ci[1]:.4f}]" if ci else ""))
            lo, hi = a.get("E_range") or (None, None)
            exact = "-" if a.get("E_exact") is None or lo is None else f"{a['E_exact']:.4f} [{lo:.4f}, {hi:.4f}]"
        else:
            obs = exact = "-"
        p = "-" if c.get("p_value") is None else f"{c['p_value']:.3g}"
        tv = c.get("min_detectable_tv")
        power = "exact" if c.get("exact") else ("-" if tv is None else
                                                 (f"dE {tv:.4f}" if "totals" in c["name"] else f"TV {tv:.4f}"))
        lines.append(f"| `{c['name']}` | {c['verdict']} | {obs} | {exact} | {p} | {power} |")
    lines += ["", "Details:", ""]
    lines += [f"- `{c['name']}`: {c['detail']}" for c in rows]
    not_covered = (audit.get("not_covered") or {}).get("engine_acceptance")
    if not_covered:
        lines += ["", f"Not covered: {not_covered}"]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) not in (2, 3):
        print("usage: python -m specverify.findings.acceptance_note AUDIT.json REPORT_DIR [NOTE]", file=sys.stderr)
        return 2
    audit = json.loads(Path(args[0]).read_text())
    folder = Path(args[1])
    readme = folder / "README.md"
    if not readme.exists():
        print(f"{folder}: no README.md (not a report folder)", file=sys.stderr)
        return 2
    write_atomic(str(folder / "acceptance.md"), render(audit, args[2] if len(args) == 3 else ""))
    write_atomic(str(folder / "acceptance.json"), json.dumps(audit, indent=1) + "\n")
    text = readme.read_text()
    if MARK not in text:
        head, _, rest = text.partition("\n")
        line = (f"{MARK}\nThe acceptance law (`engine_acceptance`, added after this audit and run on its own): "
                f"[acceptance.md](acceptance.md).\n")
        write_atomic(str(readme), f"{head}\n\n{line}{rest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
