"""Tools over the kernels (`specverify.kernels`): they check and measure the ops, and none is
imported by the engine.

- ``invariance``: the batch-invariance harness and its battery (`python -m specverify.kerneltools.invariance`).
- ``compile_check``: every Triton kernel compiled ahead of time for a CUDA target, on any machine.
- ``gpu_check``: the one script to run on a CUDA machine (`python -m specverify.kerneltools.gpu_check`).
- ``bench``: the engine's model timed on the "invariant" and "default" backends (`python -m specverify.kerneltools.bench`).
"""
