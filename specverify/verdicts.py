"""The verdicts a row, a check or an audit can have: the strings written to JSON and reports.

A statistical row is PASS or FAIL after Holm; an exact row is decided on its own. SKIP: the row does
not apply to the engine's capabilities. ERROR: the adapter broke during the row. WARN: something
outside the protocol's contract was seen (e.g. a coin of exactly 1.0); reported, never fails.
"""

PASS = "pass"
FAIL = "fail"
SKIP = "skip"
ERROR = "error"
WARN = "warn"

ALL = (PASS, FAIL, SKIP, ERROR, WARN)
FAILING = (FAIL, ERROR)         # the verdicts that fail an audit

__all__ = ["PASS", "FAIL", "SKIP", "ERROR", "WARN", "ALL", "FAILING"]
