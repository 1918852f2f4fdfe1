"""The acceptance/speedup lab (`specverify lab`): measured on the real model, beside the chapter's
formulas. See run.py."""
