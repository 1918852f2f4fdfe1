"""The settings of one audit: their defaults, their validation, and who wins. Every front door (the
`audit` and `zoo` commands, the pytest plugin, the findings runner) reads them from here.

    seed      integer in [0, 2**63 - 1]   seeds every problem and coin               default 0
    samples   integer in [MIN_SAMPLES, MAX_SAMPLES]  samples per statistical problem  default 200 000
    alpha     float in (0, 1)             family-wise false-alarm rate (Holm)        default 1e-3
    timeout   finite float > 0            seconds one adapter call may take          default 120
    checks    None (every check that applies) or names from `specverify.audit.BATTERY`, in the
              battery's order; a name given twice counts once
    size      "quick", "standard" or "full": how large the engine-level greedy bitwise runs are
              (`checks.bitwise.SIZES`; an engine may choose its default)  default "standard"

Precedence, highest first: what the user gives (flags, keyword arguments, the pytest marker or
command line), the adapter's own `audit_defaults` (an engine may size its defaults to its speed, e.g.
an interpreter on a CPU), then `DEFAULTS`. `resolve` applies it and validates the outcome: a bad value
is one InputError naming the setting, before any work is done.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields, replace

from specverify.errors import InputError

MIN_SAMPLES = 100
# the battery keeps every problem's samples (kappa + 1 int64 ids and the drafts, ~30 problems):
# about 2.5 kB a sample at the peak, so 4 million samples a problem need ~10 GB
MAX_SAMPLES = 4_000_000
MAX_SEED = 2**63 - 1
SIZES = ("quick", "standard", "full")    # the bitwise check's sizes (`checks.bitwise.SIZES` holds what each runs)


@dataclass(frozen=True)
class Settings:
    seed: int = 0
    samples: int = 200_000
    alpha: float = 1e-3
    timeout: float = 120.0
    checks: tuple | None = None
    size: str = "standard"

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v) for f in fields(self)}


DEFAULTS = Settings()
NAMES = tuple(f.name for f in fields(Settings))


def _integer(label: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise InputError(f"{label} {value!r}: must be an integer")
    if not low <= value <= high:
        raise InputError(f"{label} {value}: must be an integer in [{low}, {high}]")
    return int(value)


def _number(label: str, value) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InputError(f"{label} {value!r}: must be a number")
    return float(value)


def validate_checks(checks, battery, label: str = "checks") -> tuple | None:
    """None, or the named checks in the battery's order (duplicates removed); InputError on an
    unknown name or an empty selection."""
    if checks is None:
        return None
    names = [c.strip() for c in checks.split(",")] if isinstance(checks, str) else list(checks)
    if not names or not all(isinstance(c, str) and c for c in names):
        raise InputError(f"{label} {checks!r}: give one or more check names; available: {', '.join(battery)}")
    unknown = [c for c in dict.fromkeys(names) if c not in battery]
    if unknown:
        raise InputError(f"unknown check(s) {', '.join(unknown)}; available: {', '.join(battery)}")
    return tuple(c for c in battery if c in names)


def check_value(name: str, value, battery, label: str | None = None):
    """One setting's value, checked and normalised; InputError names it as `label` (default: its name)."""
    label = label or name
    if name == "seed":
        return _integer(label, value, 0, MAX_SEED)
    if name == "samples":
        return _integer(label, value, MIN_SAMPLES, MAX_SAMPLES)
    if name == "alpha":
        alpha = _number(label, value)
        if not 0 < alpha < 1:
            raise InputError(f"{label} {value!r}: must be in (0, 1)")
        return alpha
    if name == "timeout":
        timeout = _number(label, value)
        if not (math.isfinite(timeout) and timeout > 0):
            raise InputError(f"{label} {value!r}: must be a finite number of seconds > 0")
        return timeout
    if name == "checks":
        return validate_checks(value, battery, label)
    if name == "size":
        if value not in SIZES:
            raise InputError(f"{label} {value!r}: must be one of {', '.join(SIZES)}")
        return value
    raise InputError(f"unknown setting {name!r}; known: {', '.join(NAMES)}")


def resolve(given: dict, adapter_defaults: dict | None, battery, label=None) -> Settings:
    """The settings of an audit: `given` (what the user set; None values are unset) over the
    adapter's `audit_defaults` over DEFAULTS, each value validated where it comes from.
    `label(name)` is how the user spelled a setting (e.g. "--samples"), for the error message."""
    values = {}
    sources = ((adapter_defaults or {}, lambda n: f"audit_defaults[{n!r}]", "audit_defaults key"),
               (given, label or (lambda n: n), "setting"))
    for source, name_of, what in sources:
        unknown = sorted(set(source) - set(NAMES))
        if unknown:
            raise InputError(f"unknown {what}(s) {', '.join(unknown)}; known: {', '.join(NAMES)}")
        values.update({k: check_value(k, v, battery, name_of(k)) for k, v in source.items() if v is not None})
    return replace(DEFAULTS, **values)
