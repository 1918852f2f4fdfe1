"""Shared pieces of the Triton kernels: where they run, and how each compiles ahead of time.

The kernels run on a CUDA GPU, or on a CPU under Triton's interpreter, which must be chosen before
any kernel module is imported (TRITON_INTERPRET=1 in the environment before Python starts; the
test suite's conftest sets it, the command-line entry points call `interpret_without_gpu`). The
kernel modules import `interpreting` from here, and the "triton" backend imports the kernel
modules: nothing here imports a kernel or a backend.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


def interpreting() -> bool:
    """Whether the kernels run under Triton's interpreter (TRITON_INTERPRET set, and not to "" or "0")."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def interpret_without_gpu() -> None:
    """Choose the interpreter (TRITON_INTERPRET=1) when TRITON_INTERPRET is unset and there is no CUDA
    GPU. Call it before any kernel module is imported (the command-line entry points do)."""
    if "TRITON_INTERPRET" not in os.environ:
        import torch
        if not torch.cuda.is_available():
            os.environ["TRITON_INTERPRET"] = "1"


def require_triton() -> None:
    """Raise InputError unless the Triton kernels can run here (a CUDA GPU, or the interpreter)."""
    from specverify.errors import InputError
    try:
        import triton  # noqa: F401
    except ImportError:
        raise InputError("the Triton kernels need the 'triton' package (pip install 'specverify[engine]')") from None
    if interpreting():
        return
    try:
        import torch
        if torch.cuda.is_available():
            return
    except ImportError:
        pass
    raise InputError("the Triton kernels need a CUDA GPU or TRITON_INTERPRET=1 set before Python starts "
                     "(e.g. TRITON_INTERPRET=1 specverify ...)")


@dataclass(frozen=True)
class CompileSpec:
    """How one kernel compiles ahead of time for a CUDA target: every kernel module lists its kernels
    in COMPILE, beside the launcher (`specverify.kerneltools.compile_check` compiles them all). The
    name in the report, the @triton.jit function, the argument types the launcher passes where they
    differ from the defaults (a `*_ptr` argument is *fp32, any other i32), the constexprs of a
    SmolLM2-sized launch, and whether multiply-adds may fuse to FMA (the sampler kernels launch with
    enable_fp_fusion=False)."""

    name: str
    kernel: object
    types: dict = field(default_factory=dict)
    constexprs: dict = field(default_factory=dict)
    fp_fusion: bool = True
