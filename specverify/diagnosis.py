"""What a failing audit tells you beyond "the law is wrong": its worst cells and a hint from the zoo.

    diagnose(result_dict) -> {"worst": [cell, ...], "hint": {...} | None} | None   (None: nothing failed)

worst   the failing rows' cells furthest from their exact law, in standard deviations of a Poisson count
        under the law (sigma = (observed - expected) / sqrt(expected); a cell of expected count 0 that
        was observed is "impossible"), each with the role of the token there when the row says it
        (`checks.marginal.roles`: accepted draft, recovered token, bonus token). Worst first.
hint    the known bugs of the zoo whose pattern looks most like this audit's: the checks each mutant
        fails and passes in the committed zoo run (`specverify/zoo/signatures.json`, derived from
        reports/zoo/summary.json by `signatures_from`), the checks it is meant to be caught by, and the
        token role its primitive acts on. A hint, not a proof: a new bug may resemble none of them.

Works on `AuditResult.to_dict()` dicts (a JSON file read back gives the same diagnosis).
"""

from __future__ import annotations

import json
import math
import pathlib
import re

from specverify.verdicts import FAILING, FAIL, PASS

IMPOSSIBLE = math.inf            # the sigma of a cell the exact law gives probability 0, observed anyway
WORST = 3                        # worst cells named
CLOSEST = 3                      # mutants named by the hint, at most
SIGNATURES = pathlib.Path(__file__).resolve().parent / "zoo" / "signatures.json"
HINT_WORDING = "hint -- closest known bugs in the zoo (by the pattern of failing checks and token role; not a proof)"

# the token role each zoo module's primitive acts on (`specverify/zoo/<module>.py`'s docstring)
ROLE_OF_MODULE = {
    "acceptance": ("accepted draft",),
    "endpoints": ("accepted draft",),
    "residual": ("recovered token", "bonus token"),
    "tail": ("bonus token",),
}


# ----------------------------------------------------------------------------------- worst cells

MIN_EXPECTED = 5.0               # cells expected fewer times are not ranked by sigma (the normal
                                 # approximation of a Poisson count is poor there); impossible ones are
VIOLATION = re.compile(r"\(drafts \[([-\d, ]*)\]\) emitted token (-?\d+) of probability 0 at position (\d+)")
"""An exact row's violation line (`checks.endpoints.zero_prob_violations`): drafts, token, position."""


def _sigma(observed: float, expected: float) -> float | None:
    if expected >= MIN_EXPECTED:
        return (observed - expected) / math.sqrt(expected)
    return IMPOSSIBLE if observed > 0 and expected == 0 else None


def _violation_cells(row: dict) -> list:
    """The impossible tokens an exact row names (`VIOLATION`), by role: a draft kept at its position
    (accepted draft), a token after the last draft (bonus token), or another token (recovered token)."""
    found = {}
    for line in (row.get("data") or {}).get("violations") or ():
        m = VIOLATION.search(line) if isinstance(line, str) else None
        if not m:
            continue
        drafts = [int(x) for x in m.group(1).split(",") if x.strip()]
        token, pos = int(m.group(2)), int(m.group(3))
        role = ("bonus token" if pos >= len(drafts) else "accepted draft" if drafts[pos] == token else "recovered token")
        found[(token, role)] = found.get((token, role), 0) + 1
    return [{"row": row["name"], "cell": t, "role": r, "observed": n, "expected": 0.0, "sigma": IMPOSSIBLE,
             "impossible": True, "label": "token"} for (t, r), n in found.items()]


def cells_of(row: dict) -> list:
    """Every (cell, role) of a row with its observed and expected count and sigma."""
    data = row.get("data") or {}
    out = _violation_cells(row)
    roles = data.get("roles")
    if isinstance(roles, dict) and roles.get("observed"):
        for name, obs, exp in zip(roles["names"], roles["observed"], roles["expected"]):
            for cell, o, e in zip(roles["cells"], obs, exp):
                s = _sigma(o, e)
                if s is not None:
                    out.append({"row": row["name"], "cell": cell, "role": name, "observed": o, "expected": e,
                                "sigma": s, "impossible": s == IMPOSSIBLE, "label": "token"})
        return out
    obs, exp = data.get("observed"), data.get("expected")
    if isinstance(obs, list) and isinstance(exp, list) and len(obs) == len(exp) and obs:
        labels = data.get("cells") if isinstance(data.get("cells"), list) and len(data["cells"]) == len(obs) else range(len(obs))
        for cell, o, e in zip(labels, obs, exp):
            if isinstance(o, (int, float)) and isinstance(e, (int, float)):
                s = _sigma(o, e)
                if s is not None:
                    out.append({"row": row["name"], "cell": cell, "role": None, "observed": o, "expected": e,
                                "sigma": s, "impossible": s == IMPOSSIBLE,
                                "label": "token" if data.get("cells") is labels else "cell"})
    return out


def worst_cells(rows: list, k: int = WORST) -> list:
    """The k cells of the failing rows furthest from their law (|sigma|, impossible cells first), one a row."""
    best = {}
    for row in rows:
        if row.get("verdict") not in FAILING:
            continue
        for c in cells_of(row):
            if row["name"] not in best or abs(c["sigma"]) > abs(best[row["name"]]["sigma"]):
                best[row["name"]] = c
    # impossible cells first, then cells whose role is known, each by |sigma|
    return sorted(best.values(), key=lambda c: (not c["impossible"], c["role"] is None, -abs(c["sigma"])))[:k]


def cell_text(c: dict) -> str:
    """One line for a worst cell."""
    role = f" as {c['role']}" if c.get("role") else ""
    if c.get("impossible") or c.get("sigma") is None:
        seen = f"observed {c['observed']} times, exact probability 0 (impossible)"
    else:
        seen = f"observed {c['observed']} vs expected {c['expected']:.1f} ({c['sigma']:+.1f} sigma)"
    return f"{c['row']}: {c.get('label', 'cell')} {c['cell']}{role}: {seen}"


# ----------------------------------------------------------------------------------- zoo hint

def signatures_from(zoo_summary: dict, catalogue=None) -> dict:
    """{mutant: {"fails": [...], "passes": [...], "targets": [...], "roles": [...]}} from a committed
    zoo summary (`reports/zoo/summary.json`: its matrix of check verdicts) and the zoo's catalogue."""
    if catalogue is None:
        from specverify.zoo.run import engine_names  # noqa: F401 - registers every mutant
        from specverify.zoo.registry import CATALOGUE as catalogue
    zoo = zoo_summary["zoo"]
    out = {}
    for name, verdicts in zip(zoo["rows"], zoo["verdict"]):
        if not name.startswith("mutant:"):
            continue
        entry = catalogue.get(name.split(":", 1)[1])
        module = entry.cls.__module__.rsplit(".", 1)[-1] if entry is not None else ""
        out[name] = {"fails": [c for c, v in zip(zoo["cols"], verdicts) if v in (FAIL, "error")],
                     "passes": [c for c, v in zip(zoo["cols"], verdicts) if v == PASS],
                     "targets": list(entry.targets) if entry is not None else [],
                     "roles": list(ROLE_OF_MODULE.get(module, ()))}
    return out


MEASURE_CHECKS = ("marginal", "joint", "endpoints")   # the checks whose rows carry cells and roles
MEASURE_SAMPLES = 2000


def measure(name: str, samples: int = MEASURE_SAMPLES, seed: int = 0) -> dict:
    """{"role", "impossible"} of a zoo mutant's worst cell in a small audit of the checks that locate
    cells (`MEASURE_CHECKS`), or {} if none of them applies or none fails: what its failures look like,
    beside which checks fail (`signatures_from`)."""
    from specverify.audit import prepare
    from specverify.errors import AdapterError

    try:
        result = prepare(name, {"samples": samples, "seed": seed, "checks": list(MEASURE_CHECKS)},
                         isolated=False).run()
    except AdapterError:
        return {}
    worst = worst_cells([c.to_dict() for c in result.checks], k=1)
    if not worst or worst[0]["role"] is None:
        return {}
    return {"role": worst[0]["role"], "impossible": bool(worst[0]["impossible"])}


def write_signatures(zoo_summary_path: str = "reports/zoo/summary.json", path=SIGNATURES, progress=None) -> dict:
    """Regenerate `signatures.json`: the committed zoo summary's pattern per mutant, and what its worst
    cell looks like (`measure`)."""
    sig = signatures_from(json.loads(pathlib.Path(zoo_summary_path).read_text()))
    for name in sig:
        if progress:
            progress(name)
        sig[name]["measured"] = measure(name)
    from specverify.io import write_atomic
    write_atomic(str(path), json.dumps({"source": zoo_summary_path, "measured": {
        "checks": list(MEASURE_CHECKS), "samples": MEASURE_SAMPLES, "seed": 0}, "mutants": sig}, indent=1) + "\n")
    return sig


def load_signatures() -> dict:
    try:
        return json.loads(SIGNATURES.read_text())["mutants"]
    except (OSError, ValueError, KeyError):
        return {}


def check_pattern(rows: list) -> tuple:
    """(failing checks, passing checks) of an audit: a check fails if any of its rows failed, passes
    if it decided rows and none failed."""
    decided, failed = set(), set()
    for r in rows:
        check = r.get("check") or r["name"].split(".")[0]
        if r.get("verdict") in FAILING:
            failed.add(check)
        if r.get("verdict") in (PASS, FAIL, "error"):
            decided.add(check)
    return failed, decided - failed


def closest(rows: list, worst: list, signatures: dict | None = None, k: int = CLOSEST) -> list:
    """The zoo mutants closest to this audit, best first: [{"mutant", "score", "why"}]. Score: +1 a
    check both fail, +0.5 a failing check it targets, -1 a check one fails and the other passes, +1
    when the role most of the worst cells have (the worst first on a tie) is the mutant's (its measured worst cell's, else the role its
    module's primitive acts on), +0.5 when both worst cells are impossible or both are not. Only
    mutants sharing a failing check, with a positive score, are named; ties in the zoo's order."""
    signatures = load_signatures() if signatures is None else signatures
    failed, passed = check_pattern(rows)
    named = [c["role"] for c in worst if c.get("role")]
    roles = {max(named, key=named.count)} if named else set()      # the role most of the worst cells have
    impossible = bool(worst and worst[0].get("impossible"))
    scored = []
    for order, (name, sig) in enumerate(signatures.items()):
        fails, passes, targets = set(sig["fails"]), set(sig["passes"]), set(sig["targets"])
        shared = failed & (fails | targets)
        if not shared:
            continue
        score = len(failed & fails) + 0.5 * len(failed & targets) - len(fails & passed) - len(passes & failed)
        measured = sig.get("measured") or {}
        role = roles & ({measured["role"]} if measured.get("role") else set(sig["roles"]))
        score += 1.0 if role else 0.0
        same_kind = bool(measured) and bool(worst) and measured.get("impossible") == impossible
        score += 0.5 if same_kind else 0.0
        if score > 0:
            why = (f"fails {', '.join(sorted(shared))}" + (f"; acts on the {role.pop()}" if role else "")
                   + ("; emits impossible tokens too" if same_kind and impossible else ""))
            scored.append((-score, order, {"mutant": name, "score": round(score, 2), "why": why}))
    return [s[2] for s in sorted(scored, key=lambda s: s[:2])[:k]]


def diagnose(result: dict, signatures: dict | None = None) -> dict | None:
    """The diagnosis of an audit result dict (None if no row failed)."""
    rows = [r for r in result.get("checks", []) if isinstance(r, dict)]
    if not any(r.get("verdict") in FAILING for r in rows):
        return None
    worst = worst_cells(rows)
    near = closest(rows, worst, signatures)
    hint = {"text": HINT_WORDING, "closest": near} if near else None
    return {"worst": worst, "hint": hint}


def lines(diagnosis: dict | None) -> list:
    """The diagnosis as text lines (no indentation), for summaries."""
    if not diagnosis:
        return []
    out = [f"worst cell: {cell_text(c)}" for c in diagnosis["worst"]]
    if diagnosis.get("hint"):
        names = ", ".join(f"{m['mutant'].removeprefix('mutant:')} ({m['why']})" for m in diagnosis["hint"]["closest"])
        out.append(f"hint: closest known bugs: {names} -- from the zoo's pattern of failing checks, not a proof")
    return out


def first_line_hint(diagnosis: dict | None) -> str:
    """'; closest known bug: NAME' for one-line summaries (empty without a hint)."""
    if not diagnosis or not diagnosis.get("hint"):
        return ""
    return f"; closest known bug: {diagnosis['hint']['closest'][0]['mutant'].removeprefix('mutant:')}"
