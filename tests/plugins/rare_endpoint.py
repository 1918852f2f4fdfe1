"""A seeded-level mutant with a planted coin-endpoint bug at rate 1e-5 (not in the zoo's catalogue: a rare
event is caught only by drawing about 1e6 requests, beyond the zoo's 10 s a mutant).

The bug class is the zoo's mutant 8 (coin-one-past-cdf: SGLang's seeded path cast its coins to float32,
which rounds the largest ones to exactly 1.0, and a 1.0 coin walks past the last CDF bucket), planted at
a rate a test can reach: the final coin of each seeded request is rounded to the nearest multiple of
1 / FINAL_STEPS, so u >= 1 - 1e-5 becomes exactly 1.0, and the draw clamps a walk past the end to id
V - 1 (not to the last id of positive weight). With injected coins (all below 1) it is exact; in seeded
mode one request in 1e5 emits id V - 1 even where it has probability 0.

    specverify audit tests/plugins/rare_endpoint.py:PlantedEndpoint --checks rare_event --rare-rate 1e-5
"""

from __future__ import annotations

from specverify.zoo.seeded import SeededCoinRoundedToOne

PLANTED_RATE = 1e-5         # the chance a seeded request's final coin is exactly 1.0


class PlantedEndpoint(SeededCoinRoundedToOne):
    """Zoo mutant 53 (seeded-coin-rounded-to-one) at a rate of 1e-5 instead of 2e-3."""

    name = "planted-endpoint-1e-5"
    FINAL_STEPS = 50_000        # the final coin's grid: round(u * 5e4) / 5e4 is 1.0 for u >= 1 - 1e-5
