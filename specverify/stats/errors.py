"""The one error the statistics raise beyond `InputError`, and their shared level/power check.

`ImpossibleObservation` means the sample contains an outcome the null distribution gives probability
exactly 0 (a token outside the support, a count in a zero-probability cell). No p-value is needed: the
implementation under audit is wrong with certainty, and callers (the audit checks) catch this error and
report a definitive failure. It subclasses `InputError`, so a caller that does not catch it still gets a
one-line user-facing message rather than a traceback.
"""

from __future__ import annotations

from specverify.errors import InputError


class ImpossibleObservation(InputError):
    """An observation where the exact null distribution has probability 0 (a definitive failure).

    `cell` is the index of the cell (for `pearson`/`gtest`) or the offending sample code (for
    `observed_counts`); `count` is how many times it was observed (None when not counted).
    """

    def __init__(self, message: str, *, cell: int, count: int | None = None):
        super().__init__(message)
        self.cell = int(cell)
        self.count = None if count is None else int(count)


def check_unit_open(value, name: str) -> float:
    """`value` as a float in the open interval (0, 1) (a level alpha or a target power), else InputError."""
    value = float(value)
    if not 0.0 < value < 1.0:
        raise InputError(f"{name} must lie in (0, 1), got {value!r}")
    return value
