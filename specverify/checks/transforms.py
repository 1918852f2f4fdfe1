"""Transforms: temperature, top-k and top-p must be applied identically to the draft rows and the
target rows. Whole runs (as `checks.runs`) under each transform, against the exact law of the
transformed target (`reference.transforms` defines each knob's semantics, ties included).

At engine level the adapter receives the raw toy models and the `Transform`; it must transform both
the rows it drafts from and the rows it verifies with. A draft handed to the verifier through a
different transform than the one it was drawn with (raw q, processed sample) biases the output and
fails here; a transform applied to the target only does not bias it (the draft only sets the speed)
and is caught by `checks.identity` instead.

Budget (`--samples`): max(1000, samples // 2) whole runs per transform row.
"""

from __future__ import annotations

from specverify.reference.transforms import Transform

from .runs import SETUP, joint_row, levels

TRANSFORMS = {
    "temperature=0.6": Transform(temperature=0.6),
    "top_k=2": Transform(top_k=2),
    "top_p=0.8": Transform(top_p=0.8),
}


def run(engine, ctx):
    rows = []
    n = max(1000, ctx.samples // 2)
    for level in levels(engine):
        for label, transform in TRANSFORMS.items():
            rows.append(joint_row(engine, level, ctx, f"{level}.transform[{label}, toy V={SETUP.vocab} L={SETUP.length}]",
                                  transform, n, f"transform {label}"))
    return rows
