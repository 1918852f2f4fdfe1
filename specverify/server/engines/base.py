"""What a launcher of a real OpenAI-compatible server provides (one module per engine in this package).

    name            the engine's name (`specverify serve-audit NAME`)
    install_hint    how to install it (its own venv and install script)
    spec_kinds      the speculation kinds it takes ("ngram", "draft", ...)
    command         (python, model, port, spec, extra) -> argv of the child server process
    env             environment variables the child needs (added to the parent's)
    ready_timeout_s how long the server may take to answer before the launch is given up
    version         (python) -> the engine's version string
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class EngineLauncher:
    name: str
    install_hint: str
    spec_kinds: tuple
    command: Callable  # (python, model, port, spec, extra) -> list[str]  argv of the child
    env: dict
    ready_timeout_s: float
    version: Callable  # (python) -> str
