"""Accuracy of every op against its float64 reference: is |y - ref| within the op's stated bound?

Each op of the registry (`specverify.kernels.registry`) runs on a launch of `rows` rows of its
seeded inputs; its reference (`specverify.kernels.accuracy`) evaluates the same, already rounded,
inputs in float64 and states the largest elementwise error the op may show. A result reports the
largest error as a fraction of that bound (<= 1 passes). Nothing is printed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.kernels.accuracy import f64
from specverify.kernels.registry import OPS

ROWS = 9
"""Output rows of each launch (more than one: a launch of several rows, as a verify step)."""


@dataclass(frozen=True)
class AccuracyResult:
    op: str                       # the case's label, e.g. "linear[576->960,float32]"
    backend: str
    rows: int                     # output rows compared
    max_err_over_bound: float     # max over elements of |y - ref| / bound (0 where both are 0)

    @property
    def ok(self) -> bool:
        return self.max_err_over_bound <= 1.0

    def to_dict(self) -> dict:
        return {"op": self.op, "backend": self.backend, "ok": self.ok, "rows": self.rows,
                "max_err_over_bound": self.max_err_over_bound}


def case_accuracy(be, op: str, case, rows: int = ROWS) -> AccuracyResult:
    """Backend method `op` on a launch of `rows` rows of `case` (a registry case) against the op's
    float64 reference."""
    args = case.args(case.batch(rows))
    ref, bound = OPS[op].reference(*args)
    err = np.abs(f64(getattr(be, op)(*args)) - ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(err == 0, 0.0, err / bound)
    return AccuracyResult(case.label, be.name, rows, float(ratio.max()))


def battery(be, quick: bool = False, device="cpu", rows: int = ROWS) -> list:
    """Every op of the registry at each of its shapes and dtypes: the model shapes (SmolLM2's), or
    the small ones (`quick`, e.g. for the Triton interpreter)."""
    res = []
    for op in OPS.values():
        for shape in op.small if quick else op.model:
            for dt in shape.dtypes:
                res.append(case_accuracy(be, op.name, op.case(0, dt, device, **shape.args), rows))
    return res
