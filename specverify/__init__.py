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

# The Python API, imported on first use (`import specverify` stays light for the command line):
#   specverify.audit(engine, samples=..., checks=..., ...) -> AuditResult   (`specverify.api`)
# `specverify.audit` is also the module `specverify/audit.py` (callable: `specverify.audit.prepare`
# and `from specverify.audit import run_audit` keep working).
_LAZY = {
    "audit": ("specverify.audit", None),
    "AuditResult": ("specverify.audit", "AuditResult"),
    "InputError": ("specverify.errors", "InputError"),
    "AdapterError": ("specverify.errors", "AdapterError"),
    "PASS": ("specverify.verdicts", "PASS"),
    "FAIL": ("specverify.verdicts", "FAIL"),
    "SKIP": ("specverify.verdicts", "SKIP"),
    "ERROR": ("specverify.verdicts", "ERROR"),
    "WARN": ("specverify.verdicts", "WARN"),
    "SETTINGS": ("specverify.api", "SETTINGS"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name):
    if name not in _LAZY:
        raise AttributeError(f"module 'specverify' has no attribute {name!r}")
    import importlib

    module, attr = _LAZY[name]
    mod = importlib.import_module(module)
    return mod if attr is None else getattr(mod, attr)


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
