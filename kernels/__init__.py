"""Batch-invariant kernels (Triton, one kernel a file) and the op backends the engine runs on.

`backend.get_backend(name)` returns an object implementing the op interface documented in
`backend.py`: "default" (plain torch ops: fast, NOT batch-invariant -- the negative control),
"invariant" (batch-invariant numba CPU kernels, `cpu_*.py`: the fast CPU path) and "triton" (the
Triton kernels, `triton_*.py`; on a CPU they run under TRITON_INTERPRET=1). `sampler.verify` /
`sampler.tree_verify` run the float64 sampler kernels with the reference's contracts. The tools that
check and measure them live in `specverify.kerneltools`. Design: README.md.
This package imports torch lazily so that `specverify` works without it.
"""
