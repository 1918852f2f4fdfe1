"""Batch-invariant kernels and the op backends the engine runs on.

`backend.get_backend(name)` returns an object implementing the op interface documented in
`backend.py`: "default" (plain torch ops: fast, NOT batch-invariant -- the negative control),
"invariant" (`cpu_backend.py`, over the batch-invariant numba CPU kernels `cpu_*.py`: the fast CPU
path) and "triton" (`triton_backend.py`, over the Triton kernels `triton_*.py`, one kernel a file
with its launcher; on a CPU they run under TRITON_INTERPRET=1, see `triton_common.py`).
`registry.py` lists the ops, each with a seeded input maker, its float64 reference and error bound
(`accuracy.py`) and the shapes to check it at. `sampler.verify` / `sampler.tree_verify` run the
float64 sampler kernels (`sampler_*.py`) with the reference's contracts. The tools that check and
measure all this live in `specverify.kerneltools`. Design: README.md.
This package imports torch lazily so that `specverify` works without it (`accuracy` and
`registry`, which the engine does not need to register a backend, import it).
"""
