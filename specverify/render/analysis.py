"""What a report computes from result JSON (numbers only; plots.py draws them, audit_report.py lays
them out).

Inputs are the dicts `AuditResult.to_dict()` writes (see specverify/audit.py). A check's `data` is
rendered generically: when it holds equally long lists `observed` and `expected` (counts), the cells
are pooled for display exactly as the audit pools them for its test (stats.pool_cells at an
expected count of 10, cells of expected 0 kept apart) and each cell gets its standardised (Pearson)
residual

    r_k = (O_k - E_k) / sqrt(E_k),        sum_k r_k^2 = the Pearson statistic over these cells,

which under an exact engine is approximately N(0, 1) per cell (a little narrower: the cells sum to
n). Labels come from `cells` or `sequences` when they have the same length, else the index. Any
other key of `data` is shown as a value. A new check needs no report code.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import numpy as np
from scipy import stats as sps

from specverify import stats
from specverify.errors import InputError
from specverify.verdicts import ERROR, FAIL, PASS, SKIP, WARN

DISPLAY_MIN_EXPECTED = 10.0     # the audit's pooling threshold (battery.base.Context.min_expected)
LABEL_KEYS = ("cells", "sequences", "labels", "tokens")


# ============================================================================ loading

def kind_of(obj) -> str:
    """'audit' (one AuditResult), 'zoo' (a mutant x check matrix), 'lab' (specverify lab)."""
    if isinstance(obj, dict):
        if obj.get("kind") == "lab":
            return "lab"
        if isinstance(obj.get("checks"), list) and "engine" in obj:
            return "audit"
        if any(k in obj for k in ("mutants", "matrix", "zoo")):
            return "zoo"
        if isinstance(obj.get("engines"), dict) and isinstance(obj.get("checks"), list):
            return "zoo"                                   # `specverify zoo --json`
    raise InputError("not a specverify result: expected an audit result (engine, checks), a zoo or a lab result")


VERDICTS = (PASS, FAIL, SKIP, ERROR, WARN)


def _bad_constant(name):
    raise ValueError(f"non-JSON number {name}")


def check_result(obj, path: str) -> str:
    """The kind of a loaded result (`kind_of`), after checking what the report reads from it: every
    audit row has a name and a known verdict, and its numbers are finite (p-values in [0, 1]);
    InputError naming the file and the first bad field otherwise."""
    kind = kind_of(obj)
    audits = [obj] if kind == "audit" else [e.get("audit") for e in obj.get("engines", {}).values()
                                             if isinstance(e, dict) and e.get("audit")] if kind == "zoo" else []
    _check_strings(obj, path)
    for audit in audits:
        if not isinstance(audit, dict) or not isinstance(audit.get("checks"), list):
            raise InputError(f"{path}: an audit without a list of checks")
        engine = audit.get("engine")
        if not isinstance(engine, str) or len(engine) > MAX_NAME_CHARS:
            raise InputError(f"{path}: engine must be a name (a string of at most {MAX_NAME_CHARS} characters), "
                             f"got {type(engine).__name__} {_clip(engine)}")
        if audit.get("verdict") not in VERDICTS:
            raise InputError(f"{path}: audit of {engine!r} has verdict {_clip(audit.get('verdict'))}")
        for key, kinds in TOP_KEYS.items():
            v = audit.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, kinds)
                                  or (isinstance(v, float) and not math.isfinite(v))):
                raise InputError(f"{path}: {key} {_clip(v)} is not a {' or '.join(k.__name__ for k in kinds)}")
        alpha = audit.get("alpha")
        if alpha is not None and not 0 < alpha < 1:
            raise InputError(f"{path}: alpha {alpha!r} is outside (0, 1)")
        for i, row in enumerate(audit["checks"]):
            where = f"{path}: checks[{i}]"
            if not isinstance(row, dict) or not isinstance(row.get("name"), str):
                raise InputError(f"{where}: a row without a name")
            if len(row["name"]) > MAX_NAME_CHARS:
                raise InputError(f"{where}: a row name of {len(row['name'])} characters (at most {MAX_NAME_CHARS})")
            if row.get("verdict") not in VERDICTS:
                raise InputError(f"{where} ({row['name']}): verdict {_clip(row.get('verdict'))} is not one of {', '.join(VERDICTS)}")
            for key, kinds in ROW_KEYS.items():
                v = row.get(key)
                if v is not None and not isinstance(v, kinds):
                    raise InputError(f"{where} ({row['name']}): {key} must be a {' or '.join(k.__name__ for k in kinds)}, "
                                     f"got {type(v).__name__}")
            for key in ("statistic", "p_value", "min_detectable_tv", "n", "dof"):
                v = row.get(key)
                if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)):
                    raise InputError(f"{where} ({row['name']}): {key} {v!r} is not a finite number")
            p = row.get("p_value")
            if p is not None and not 0 <= p <= 1:
                raise InputError(f"{where} ({row['name']}): p_value {p!r} is outside [0, 1]")
        failing = any(row["verdict"] in (FAIL, ERROR) for row in audit["checks"])
        if failing != (audit["verdict"] in (FAIL, ERROR)):      # the rows decide, not the summary
            raise InputError(f"{path}: audit of {engine!r} says {audit['verdict']!r} but its rows "
                             f"{'fail' if failing else 'do not fail'}: the file was edited or is not an audit result")
    return kind


MAX_NAME_CHARS = 1000           # an engine or row name: longer ones are refused (a 1 MB name took 7 GB)
MAX_DEPTH = 64                  # nesting of a result file (audits nest ~6 deep)
MAX_BYTES = 256 << 20           # a result file's size
TOP_KEYS = {"alpha": (int, float), "seed": (int,), "samples": (int,), "seconds": (int, float),
            "deviation": (dict,), "not_covered": (dict,)}
ROW_KEYS = {"detail": (str,), "check": (str,), "data": (dict,), "exact": (bool,), "law": (str,)}


def _clip(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _check_strings(obj, path: str) -> None:
    """InputError if the document nests deeper than MAX_DEPTH or holds a string that is not text (a lone
    surrogate, which no page can be written with); iterative, so no depth can overflow the stack."""
    stack = [(obj, 0)]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"{path}: nested deeper than {MAX_DEPTH} levels: not a specverify result")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InputError(f"{path}: a string that is not valid text (a lone surrogate): "
                                 f"{value.encode('utf-8', 'backslashreplace')[:60].decode()!r}") from None
        elif isinstance(value, dict):
            stack.extend((k, depth + 1) for k in value)
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def load_json(path: str):
    try:
        with open(path, encoding="utf-8") as f:
            f.seek(0, 2)
            if f.tell() > MAX_BYTES:
                raise InputError(f"{path}: {f.tell()} bytes, more than a result file holds ({MAX_BYTES})")
            f.seek(0)
            return json.load(f, parse_constant=_bad_constant)
    except RecursionError:
        raise InputError(f"{path}: nested too deeply to be a specverify result") from None
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except (ValueError, UnicodeDecodeError) as exc:       # JSONDecodeError is a ValueError
        raise InputError(f"{path}: not JSON ({exc})") from None
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror}") from None


# ========================================================================== residuals

@dataclass
class CellTable:
    labels: list           # [K] str, one per displayed (pooled) cell
    observed: np.ndarray   # [K]
    expected: np.ndarray   # [K]
    residuals: np.ndarray  # [K] (O - E) / sqrt(E); +inf where E == 0 < O
    raw_cells: int         # cells before pooling
    pooled: bool

    @property
    def chi2(self) -> float:
        finite = np.isfinite(self.residuals)
        return float(np.sum(self.residuals[finite] ** 2))


def _label(x) -> str:
    if isinstance(x, (list, tuple)):
        return "(" + " ".join(str(v) for v in x) + ")" if x else "()"
    return str(x)


def cell_table(data: dict, min_expected: float = DISPLAY_MIN_EXPECTED) -> CellTable | None:
    """Observed vs expected with residuals, pooled for display; None when `data` has no such pair."""
    if not isinstance(data, dict):
        return None
    obs, exp = data.get("observed"), data.get("expected")
    if not isinstance(obs, list) or not isinstance(exp, list) or len(obs) != len(exp) or not obs:
        return None
    try:
        o = np.asarray(obs, dtype=np.float64)
        e = np.asarray(exp, dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if o.ndim != 1 or not np.all(np.isfinite(e)) or np.any(e < 0):
        return None
    labels = None
    for key in LABEL_KEYS:
        v = data.get(key)
        if isinstance(v, list) and len(v) == len(obs):
            labels = [_label(x) for x in v]
            break
    if labels is None:
        labels = [str(i) for i in range(len(obs))]
    zero = e <= 0
    pos_idx = np.flatnonzero(~zero)
    out_l, out_o, out_e = [], [], []
    pooled = False
    if pos_idx.size:
        pools = stats.pool_cells(e[pos_idx], min_expected) if np.any(e[pos_idx] < min_expected) else \
            tuple((i,) for i in range(pos_idx.size))
        for pool in pools:
            idx = pos_idx[list(pool)]
            if len(idx) == 1:
                out_l.append(labels[idx[0]])
            else:
                pooled = True
                shown = ", ".join(labels[i] for i in idx[:3])
                out_l.append(f"pool of {len(idx)}: {shown}{', ...' if len(idx) > 3 else ''}")
            out_o.append(o[idx].sum())
            out_e.append(e[idx].sum())
    for i in np.flatnonzero(zero):
        if o[i] > 0:                      # an impossible observation: its own cell, infinite residual
            out_l.append(labels[i] + " (impossible)")
            out_o.append(o[i])
            out_e.append(0.0)
    out_o, out_e = np.array(out_o), np.array(out_e)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(out_e > 0, (out_o - out_e) / np.sqrt(np.where(out_e > 0, out_e, 1.0)), np.inf)
    return CellTable(out_l, out_o, out_e, r, len(obs), pooled)


def top_cells(t: CellTable, k: int = 30) -> np.ndarray:
    """Indices of the k cells with the largest |residual|, in cell order."""
    if len(t.labels) <= k:
        return np.arange(len(t.labels))
    order = np.argsort(-np.abs(t.residuals), kind="stable")[:k]
    return np.sort(order)


def extra_data(data: dict) -> dict:
    """The keys of `data` that are not the observed/expected/labels arrays, for display."""
    if not isinstance(data, dict):
        return {}
    skip = {"observed", "expected", "holm_adjusted_p", *LABEL_KEYS}
    return {k: v for k, v in data.items() if k not in skip}


def short_value(v, limit: int = 120) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    s = json.dumps(v, default=str)
    return s if len(s) <= limit else s[:limit - 3] + "..."


# ================================================================================ QQ

@dataclass
class QQ:
    n: int
    expected: np.ndarray        # [n] i/(n+1), ascending
    observed: np.ndarray        # [n] sorted p-values (clipped below at 1e-300)
    band_lo: np.ndarray         # [n] pointwise 99% band of the i-th order statistic, Beta(i, n+1-i)
    band_hi: np.ndarray
    ks_p: float                 # Kolmogorov-Smirnov p-value against U(0, 1)
    fraction_below: dict        # {0.05: observed fraction of p < 0.05, ...}


def qq(pvalues, band: float = 0.99) -> QQ:
    p = np.sort(np.clip(np.asarray([x for x in pvalues if x is not None], dtype=np.float64), 1e-300, 1.0))
    n = p.size
    if n == 0:
        raise InputError("no p-values for a QQ plot")
    i = np.arange(1, n + 1)
    lo = sps.beta.ppf((1 - band) / 2, i, n + 1 - i)
    hi = sps.beta.ppf(1 - (1 - band) / 2, i, n + 1 - i)
    ks = float(sps.kstest(p, "uniform").pvalue)
    frac = {t: float(np.mean(p < t)) for t in (0.01, 0.05, 0.1)}
    return QQ(n, i / (n + 1), p, lo, hi, ks, frac)


# ============================================================================== power

def power_curve(dof: int, level: float, power: float, ns) -> np.ndarray:
    """min detectable TV at each n in `ns` (the audit's definition, stats.min_detectable_tv)."""
    return np.array([stats.min_detectable_tv(n, dof, level, power) for n in ns])


def statistical_checks(result: dict) -> list:
    return [c for c in result.get("checks", []) if c.get("p_value") is not None and not c.get("exact")]


def bonferroni_level(result: dict) -> float:
    m = max(1, len(statistical_checks(result)))
    return float(result.get("alpha", 1e-3)) / m


# ================================================================================ zoo

@dataclass
class Matrix:
    rows: list          # engine / mutant names
    cols: list          # check names (or families)
    verdict: list       # [rows][cols] "pass" | "fail" | ... | "" (not run)
    p_min: list         # [rows][cols] smallest p-value in the cell (None: none)
    row_verdict: list   # overall verdict per row


def family(check_name: str) -> str:
    """'chain.marginal[dirichlet,pos=1]' -> 'chain.marginal'."""
    return check_name.split("[", 1)[0]


VERDICT_ORDER = {FAIL: 4, ERROR: 3, WARN: 2, PASS: 1, SKIP: 0, "": -1}


def worst(verdicts) -> str:
    vs = [v for v in verdicts if v is not None]
    return max(vs, key=lambda v: VERDICT_ORDER.get(v, 2)) if vs else ""


def audit_matrix(results: list, by_family: bool = True) -> Matrix:
    """Engine x check matrix from several audit results (each row one engine)."""
    cols: list = []
    cells = []
    for r in results:
        row: dict = {}
        for c in r.get("checks", []):
            key = family(c["name"]) if by_family else c["name"]
            if key not in cols:
                cols.append(key)
            v, p = row.get(key, ("", None))
            pv = c.get("p_value")
            row[key] = (worst([v, c.get("verdict")]), pv if p is None else (p if pv is None else min(p, pv)))
        cells.append(row)
    verdict = [[row.get(k, ("", None))[0] for k in cols] for row in cells]
    p_min = [[row.get(k, ("", None))[1] for k in cols] for row in cells]
    return Matrix([r.get("engine", "?") for r in results], cols, verdict, p_min,
                  [r.get("verdict", worst(v)) for r, v in zip(results, verdict)])


NOT_RUN = "not run"     # a check --fail-fast did not reach (the zoo matrix's "~")
ZOO_SYMBOLS = {"X": FAIL, ".": PASS, "-": "", "s": SKIP, "E": ERROR, "W": WARN, "~": NOT_RUN}


def zoo_matrix(obj: dict) -> Matrix:
    """A zoo result -> Matrix. Accepted shapes: `specverify zoo --json` ({"checks": [check modules],
    "engines": {name: {"verdict", "row": {check: X . - s E}, "audit"}}}), {"mutants": [audit result |
    {"name", "checks" | "audit"}]}, {"matrix": {"rows", "cols", "verdict"}}, or {"zoo": <any>}."""
    if "zoo" in obj and isinstance(obj["zoo"], dict):
        obj = obj["zoo"]
    engines = obj.get("engines")
    if isinstance(engines, dict) and isinstance(obj.get("checks"), list):
        cols = [str(c) for c in obj["checks"]]
        rows = list(engines)
        verdict = [[ZOO_SYMBOLS.get((engines[e].get("row") or {}).get(c, "-"), "") for c in cols] for e in rows]
        return Matrix(rows, cols, verdict, [[None] * len(cols) for _ in rows],
                      [engines[e].get("verdict") or worst(v) for e, v in zip(rows, verdict)])
    if "matrix" in obj and isinstance(obj["matrix"], dict):
        m = obj["matrix"]
        rows, cols, verdict = m.get("rows"), m.get("cols") or m.get("checks"), m.get("verdict") or m.get("cells")
        if isinstance(rows, list) and isinstance(cols, list) and isinstance(verdict, list):
            p_min = m.get("p_min") or [[None] * len(cols) for _ in rows]
            return Matrix(list(map(str, rows)), list(map(str, cols)), verdict, p_min,
                          [worst(v) for v in verdict])
    mutants = obj.get("mutants")
    if isinstance(mutants, list):
        results = []
        for m in mutants:
            if isinstance(m, dict) and isinstance(m.get("audit"), dict):
                a = dict(m["audit"])
                a["engine"] = m.get("name", a.get("engine", "?"))
                results.append(a)
            elif isinstance(m, dict) and isinstance(m.get("checks"), list):
                a = dict(m)
                a["engine"] = m.get("name", m.get("engine", "?"))
                results.append(a)
        if results:
            return audit_matrix(results)
    raise InputError("zoo result: expected 'mutants' (a list of audits) or a 'matrix' {rows, cols, verdict}")
