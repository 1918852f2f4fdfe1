"""Engine names -> adapters. `resolve(name)` is what `specverify audit NAME` calls.

    reference                   the exact float64 rules (positive control)
    lossy:<rule>                a lossy rule (must fail)
    pkg.module:factory          a user plug-in: factory() returns an adapter (see `protocol`)
    path/to/file.py:factory     the same, from a file
"""

from __future__ import annotations

from specverify.errors import InputError

BUILTIN = {
    "reference": "the exact float64 reference rules (must pass)",
    "lossy:<rule>": "a lossy acceptance rule, e.g. lossy:threshold_acc=0.9 (must fail)",
}


def resolve(name: str):
    """The adapter for an engine name, or InputError naming the known engines."""
    if name == "reference":
        from .reference import ReferenceEngine
        return ReferenceEngine()
    if name.startswith("lossy:"):
        from .lossy import LossyEngine
        return LossyEngine(name[len("lossy:"):])
    if ":" in name:
        from .plugin import load
        return load(name)
    known = ", ".join(BUILTIN)
    raise InputError(f"unknown engine {name!r}; known engines: {known}, or a plug-in as pkg.module:factory or file.py:factory")
