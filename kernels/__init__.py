"""Batch-invariant kernels (Triton, one kernel a file) and the op backends the engine runs on.

`backend.get_backend(name)` returns an object implementing the `OpBackend` interface:
"default" (plain torch ops: fast, NOT batch-invariant -- the negative control), "invariant"
(a batch-invariant torch CPU path) and "triton" (the Triton kernels; on a CPU they run under
TRITON_INTERPRET=1). This package imports torch lazily so that `specverify` works without it.
"""
