"""The "triton" op backend: the batch-invariant Triton kernels behind the `backend.py` interface.

On a CUDA GPU the kernels compile for it (pass CUDA tensors). On a CPU they run under Triton's
interpreter, which must be chosen before the kernel modules are imported: set TRITON_INTERPRET=1
in the environment before starting Python (the test suite's conftest does). Without either, the
backend refuses with a one-line InputError. The interpreter is slow (`python -m
specverify.kernels.bench` times it on a small shape): it is for checking the kernels, the
"invariant" backend is the fast CPU path.
"""

from __future__ import annotations

import os

from .backend import register_backend


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


class TritonBackend:
    """Batch-invariant ops on the Triton kernels (`triton_*.py`, one kernel a file)."""

    name = "triton"
    batch_invariant = True

    def __init__(self):
        require_triton()
        from . import (triton_attention, triton_linear, triton_rms_norm, triton_rotary, triton_silu_mul,
                       triton_softmax)
        self._linear = triton_linear.linear
        self._rms_norm = triton_rms_norm.rms_norm
        self._softmax = triton_softmax
        self._rotary = triton_rotary.rotary
        self._silu_mul = triton_silu_mul.silu_mul
        self._attention = triton_attention.attention

    def linear(self, x, weight):
        lead = x.shape[:-1]
        if weight.dtype != x.dtype:
            weight = weight.to(x.dtype)
        return self._linear(x.reshape(-1, x.shape[-1]), weight).reshape(*lead, weight.shape[0])

    def rms_norm(self, x, weight, eps: float):
        return self._rms_norm(x.reshape(-1, x.shape[-1]), weight, eps).reshape(x.shape)

    def softmax(self, x):
        return self._softmax.softmax(x.reshape(-1, x.shape[-1])).reshape(x.shape)

    def log_softmax(self, x):
        return self._softmax.log_softmax(x.reshape(-1, x.shape[-1])).reshape(x.shape)

    def silu_mul(self, gate, up):
        return self._silu_mul(gate.reshape(-1, gate.shape[-1]), up.reshape(-1, up.shape[-1])).reshape(gate.shape)

    def rotary(self, x, positions, theta: float):
        return self._rotary(x, positions, theta)

    def attention(self, q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale: float):
        return self._attention(q, k_cache, v_cache, block_tables, context_lens, cu_seqlens_q, scale)


register_backend("triton", TritonBackend)
