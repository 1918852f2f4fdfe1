"""The "triton" op backend: the batch-invariant Triton kernels behind the `backend.py` interface.

On a CUDA GPU the kernels compile for it (pass CUDA tensors). On a CPU they run under Triton's
interpreter, which must be chosen before the kernel modules are imported: set TRITON_INTERPRET=1
in the environment before starting Python (the test suite's conftest does). Without either, the
backend refuses with a one-line InputError. The interpreter is slow (`python -m
specverify.kerneltools.bench` times it on a small shape): it is for checking the kernels, the
"invariant" backend is the fast CPU path.
"""

from __future__ import annotations

from .backend import register_backend
from .quant import QuantizedWeight
from .triton_common import require_triton


class TritonBackend:
    """Batch-invariant ops on the Triton kernels (`triton_*.py`, one kernel a file)."""

    name = "triton"
    batch_invariant = True

    def __init__(self):
        require_triton()
        from . import (triton_attention, triton_linear, triton_linear_q, triton_linear_q8, triton_rms_norm, triton_rotary,
                       triton_silu_mul, triton_softmax)
        self._linear = triton_linear.linear
        self._linear_q = triton_linear_q.linear
        self._linear_q8 = triton_linear_q8.linear
        self._rms_norm = triton_rms_norm.rms_norm
        self._softmax = triton_softmax
        self._rotary = triton_rotary.rotary
        self._silu_mul = triton_silu_mul.silu_mul
        self._attention = triton_attention.attention

    def linear(self, x, weight):
        lead = x.shape[:-1]
        if isinstance(weight, QuantizedWeight):
            y = self._linear_q(x.reshape(-1, x.shape[-1]), weight)
            return (y if x.dtype == y.dtype else y.to(x.dtype)).reshape(*lead, weight.n)
        if weight.dtype != x.dtype:
            weight = weight.to(x.dtype)
        return self._linear(x.reshape(-1, x.shape[-1]), weight).reshape(*lead, weight.shape[0])

    def linear_q8(self, x, weight):
        if not isinstance(weight, QuantizedWeight):
            return self.linear(x, weight)
        lead = x.shape[:-1]
        y = self._linear_q8(x.reshape(-1, x.shape[-1]), weight)
        return (y if x.dtype == y.dtype else y.to(x.dtype)).reshape(*lead, weight.n)

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
