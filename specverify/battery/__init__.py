"""What the checks stand on: the row and context types (`base`), the adapter driver (`harness`), the
one-step problems (`problems`, `large_problems`) and the shared one-step samples (`onestep`).

`specverify.checks` holds only checks; everything a check needs but does not decide lives here.
"""
