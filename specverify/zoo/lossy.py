"""Lossy rules as engines (`lossy:threshold_acc=0.9`, `lossy:threshold_single=0.3`,
`lossy:typical`, `lossy:typical:epsilon=0.09,delta=0.3`): known-biased rules, labelled wrong like the
mutants, so the audit must FAIL them; the reference (`reference.lossy`) states their exact bias."""

from __future__ import annotations

import dataclasses

from specverify import __version__
from specverify.errors import InputError
from specverify.reference import fast, rules

KINDS = {
    "threshold_acc": ("threshold", {"threshold_acc", "threshold_single"}),
    "threshold_single": ("threshold", {"threshold_acc", "threshold_single"}),
    "threshold": ("threshold", {"threshold_acc", "threshold_single"}),
    "typical": ("typical", {"epsilon", "delta"}),
}
EXAMPLES = "lossy:threshold_acc=0.9, lossy:threshold_single=0.3, lossy:typical, lossy:typical:epsilon=0.09,delta=0.3"


def parse(spec: str):
    """'threshold_acc=0.9' | 'typical' | 'typical:epsilon=0.09,delta=0.3' -> (kind, rule object)."""
    if ":" in spec:
        head, tail = spec.split(":", 1)
    elif "=" in spec:                   # lossy:threshold_acc=0.9 -- the knob names the kind
        head, tail = spec.split("=", 1)[0], spec
    else:
        head, tail = spec, ""
    if head not in KINDS:
        raise InputError(f"unknown lossy rule {spec!r}; examples: {EXAMPLES}")
    kind, allowed = KINDS[head]
    values = {}
    for item in filter(None, tail.split(",")):
        key, eq, val = item.partition("=")
        if not eq or key not in allowed:
            raise InputError(f"lossy rule {head}: unknown or malformed parameter {item!r} (allowed: {', '.join(sorted(allowed))})")
        try:
            values[key] = float(val)
        except ValueError:
            raise InputError(f"lossy rule {head}: {key}={val!r} is not a number") from None
        if not values[key] > 0:
            raise InputError(f"lossy rule {head}: {key} must be > 0")
    return kind, rules.RULES[kind].reference(**values)


class LossyEngine:
    version = __version__
    capabilities = {"chain"}

    def __init__(self, spec: str):
        self.kind, self.rule = parse(spec)
        self.name = f"lossy:{spec}"
        self.params = dataclasses.astuple(self.rule)     # the compiled kernel's (threshold_single, threshold_acc)
                                                         # or (epsilon, delta), in field order

    def verify(self, batch, coins):
        return fast.verify_batch(batch, coins, rule=self.kind, params=self.params)
