"""Compile every Triton kernel ahead of time for a CUDA target, on any machine (no GPU needed:
Triton's front end, its LLVM back end and the bundled ptxas run on the CPU). CI has no GPU, and the
interpreter executes kernels as Python, so this is what catches a kernel that would not compile
for a real device (a loop-carried type change, an unsupported construct).

    compile_all(arch=90) -> {kernel name: CompiledKernel or the error text}

The kernels are those every kernel module (`specverify.kernels`' `triton_*.py` and the modules of its
`sampler/` subpackage) lists in its COMPILE (`triton_common.CompileSpec`: the signature its launcher uses, the constexprs
of a SmolLM2-sized launch). Run it with TRITON_INTERPRET unset: the kernel modules must be imported
as compiled kernels.
"""

from __future__ import annotations

import importlib
import pkgutil

KERNEL_PREFIX = "triton_"
"""The op kernel modules of the kernels package: one kernel (or a few variants) each, with its launcher."""

SAMPLER_PACKAGE = "sampler"
"""The kernels package's subpackage of sampler kernels: every module of it may list kernels."""


def kernel_modules() -> list:
    """The modules that may list kernels: the sampler subpackage's, then the op kernels', each in name order."""
    from specverify import kernels
    sampler = importlib.import_module(f"{kernels.__name__}.{SAMPLER_PACKAGE}")
    return ([f"{sampler.__name__}.{m.name}" for m in sorted(pkgutil.iter_modules(sampler.__path__), key=lambda m: m.name)]
            + [f"{kernels.__name__}.{m.name}" for m in sorted(pkgutil.iter_modules(kernels.__path__), key=lambda m: m.name)
               if m.name.startswith(KERNEL_PREFIX)])


def specs() -> list:
    """The CompileSpec of every kernel, module by module (`kernel_modules`)."""
    out = []
    for mod in kernel_modules():
        out += getattr(importlib.import_module(mod), "COMPILE", ())
    return out


def compile_all(arch: int = 90) -> dict:
    """Compile each kernel for CUDA sm_<arch>; the value is the compiled kernel or the error text.
    Model kernels compile with Triton's default options, sampler kernels with enable_fp_fusion=False
    (as their launchers run them)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    target = GPUTarget("cuda", arch, 32)
    out = {}
    for spec in specs():
        fn = spec.kernel
        sig = {a: ("constexpr" if a in spec.constexprs else spec.types.get(a, "*fp32" if a.endswith("_ptr") else "i32"))
               for a in fn.arg_names}
        try:
            out[spec.name] = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=spec.constexprs), target=target,
                                            options={"enable_fp_fusion": spec.fp_fusion})
        except Exception as exc:                   # noqa: BLE001 -- reported per kernel
            out[spec.name] = f"{type(exc).__name__}: {exc}"
    return out
