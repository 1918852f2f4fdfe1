"""Tools over the kernels (`specverify.kernels`): they check and measure the ops, and nothing in
the kernels or the engine imports them. They iterate the op registry (`kernels/registry.py`), the
compile check every kernel module's COMPILE, so a new op needs no change here.

- ``invariance``: the batch-invariance harness and its battery (`python -m specverify.kerneltools.invariance`).
- ``accuracy_check``: every op against its float64 reference and error bound.
- ``compile_check``: every Triton kernel compiled ahead of time for a CUDA target, on any machine.
- ``gpu_check``: the one script to run on a CUDA machine (`python -m specverify.kerneltools.gpu_check`).
- ``bench``: the engine's model timed on the "invariant" and "default" backends (`python -m specverify.kerneltools.bench`).
"""
