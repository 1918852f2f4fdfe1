"""Which `pip install 'specverify[...]'` extra brings each optional module, and whether it is here.

    missing(("torch",)) -> ["torch"] in an install without extras (looked up, never imported)
    install_line(["torch"]) -> "pip install 'specverify[engine]'"

A check that cannot run without a module declares it (`checks.Check.needs`); the audit looks it up
before any work (`audit.available`). An adapter that fails to build for a missing module gets the
same install line (`isolation.wire.install_hint`).
"""

from __future__ import annotations

import importlib.util

EXTRA_OF = {"torch": "engine", "gguf": "engine", "tokenizers": "engine", "jinja2": "engine",
            "triton": "triton", "transformers": "transformers", "accelerate": "transformers", "ray": "ray"}
"""module -> the extra of `pip install 'specverify[...]'` that brings it."""


def missing(modules) -> list:
    """The modules of `modules` that are not installed (their top-level package cannot be found)."""
    return [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]


def install_line(modules) -> str:
    """The pip command that brings `modules` (each module's extra, `EXTRA_OF`)."""
    extras = ",".join(dict.fromkeys(EXTRA_OF.get(m.split(".")[0], m) for m in modules))
    return f"pip install 'specverify[{extras}]'"
