"""Launchers of real OpenAI-compatible servers (`specverify serve-audit ENGINE`), one module an engine.

    base.py               `EngineLauncher` (what a launcher describes) and `launched` (the lifecycle:
                          free port, readiness, log, stop and reap on every exit)
    specverify_serve.py   our own `specverify serve` (the reference; the lifecycle tests' child)
    mlx.py                `python -m mlx_lm.server` (draft model)
    llamacpp.py           `python -m llama_cpp.server` (prompt lookup)
    transformers_serve.py `transformers serve` (prompt lookup, set in the model's generation config)
    vllm_cpu.py           `vllm serve` on CPU (draft model, n-gram), where present

`ENGINES` maps each name to its launcher: every module-level `EngineLauncher` of the modules in
ENGINE_MODULES that import (a module that is absent is left out).
"""

from __future__ import annotations

import importlib

from specverify.errors import InputError

from .base import EngineLauncher, Launched, LaunchError, launched

ENGINE_MODULES = ("specverify_serve", "mlx", "llamacpp", "transformers_serve", "vllm_cpu")


def _collect() -> dict:
    out = {}
    for name in ENGINE_MODULES:
        try:
            mod = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        for value in vars(mod).values():
            if isinstance(value, EngineLauncher):
                out[value.name] = value
    return out


ENGINES = _collect()


def get(name: str) -> EngineLauncher:
    """The launcher named `name`; InputError listing the engines for any other."""
    if name not in ENGINES:
        raise InputError(f"engine {name!r}: not one of {', '.join(sorted(ENGINES))}")
    return ENGINES[name]


__all__ = ["ENGINES", "EngineLauncher", "Launched", "LaunchError", "launched", "get"]
