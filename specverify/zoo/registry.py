"""The bug zoo's catalogue: every mutant registers itself where it is defined.

    @mutant(7, "coin-ge-zero", targets=("endpoints",))
    class CoinGeZero(VectorSampler):
        ...

    number    its place in the zoo's order (`specverify zoo`'s rows, docs/zoo.md's matrix): 1-14 are the
              design card's fourteen, the later ones further bug classes from public engines' history,
              in the order they joined; a new mutant takes the next number
    name      what users type: `specverify audit mutant:<name>`
    targets   the checks it is meant to be caught by (tests/test_battery_checks.py holds the battery to
              them; `specverify zoo` shows every check that catches it)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One registered mutant: its catalogue number, its class and the checks meant to catch it."""

    number: int
    cls: type
    targets: tuple


CATALOGUE: dict = {}        # name -> Entry, in registration order


def mutant(number: int, name: str, *, targets: tuple):
    """Class decorator: register `cls` as `mutant:<name>`, number `number`, meant to be caught by `targets`."""
    def register(cls):
        taken = [n for n, e in CATALOGUE.items() if n == name or e.number == number]
        if taken:
            raise ValueError(f"mutant {number} {name!r}: number or name already taken by {taken[0]!r}")
        CATALOGUE[name] = Entry(number, cls, tuple(targets))
        return cls
    return register
