"""specverify: prove a speculative-decoding implementation exact, or show where it is wrong.

Subpackages, one concern each:

- ``specverify.reference`` (folder ``reference/``): the float64 NumPy oracle of the exact rules.
- ``specverify.stats``: goodness-of-fit statistics, power, family-wise control.
- ``specverify.checks``: the audit battery, one module a check.
- ``specverify.adapters``: the engines that can be audited (the reference, ours, other engines) and plug-ins.
- ``specverify.zoo``: the bug zoo: mutants, lossy rules, the zoo run.
- ``specverify.kernels`` (folder ``kernels/``): batch-invariant Triton kernels and op backends.
- ``specverify.kerneltools``: the tools that check and measure the kernels (invariance, GPU script, bench).
- ``specverify.engine``: our speculative engine.
- ``specverify.render``: renders audit, zoo and lab results as HTML + Markdown pages (the
  top-level ``reports/`` folder holds the committed output).
"""

__version__ = "0.1.0"
