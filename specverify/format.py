"""How values are written out: numbers in text (`fmt`, `fmt_p`) and values in JSON (`json_safe`).

    fmt(0.12345, ".3f") -> "0.123"      fmt(None, "d") -> "-"      fmt(float("nan"), ".2f") -> "-"
    fmt_p(0.0) -> "<1e-300"             fmt_p(2.5e-7) -> "2.50e-07"
    json_safe({"p": float("nan"), "n": np.int64(3)}) -> {"p": None, "n": 3}
"""

from __future__ import annotations

import math
import numbers

MISSING = "-"               # how text shows a value that is absent (None) or not a number (NaN)
P_UNDERFLOW = "<1e-300"     # a p-value that underflowed to 0
P_SCIENTIFIC_BELOW = 1e-3   # p-values below this are written in scientific notation


def fmt(x, spec: str) -> str:
    """`format(x, spec)`, or "-" for None or NaN."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return MISSING
    return format(x, spec)


def fmt_p(p) -> str:
    """A p-value: three significant digits, scientific below 1e-3, "<1e-300" for 0, "-" for None."""
    if p is None:
        return MISSING
    if p == 0:
        return P_UNDERFLOW
    return f"{p:.3g}" if p >= P_SCIENTIFIC_BELOW else f"{p:.2e}"


def json_safe(obj):
    """obj as plain JSON values: dicts (keys kept) and lists recursed, tuples as lists, numpy arrays
    and scalars as Python lists and numbers, and every NaN or infinite float as None (JSON has
    neither)."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if isinstance(obj, bool):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        x = float(obj)
        return x if math.isfinite(x) else None
    if hasattr(obj, "tolist"):                  # a numpy array, or a numpy scalar such as np.bool_
        return json_safe(obj.tolist())
    return obj
