"""The acceptance/speedup lab (`specverify lab`): measured on the real model, beside the chapter's
formulas. run.py runs it: config.py (what to measure), units.py (the units of measurement),
state.py (resuming), analysis.py (the units beside formulas.py), report.py and plots.py (the page)."""
