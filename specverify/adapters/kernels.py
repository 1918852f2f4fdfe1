"""Our Triton sampler kernels (`kernels/sampler/`) as an engine: `specverify audit kernels`.

On a GPU the kernels run compiled; on a CPU they run under the Triton interpreter (TRITON_INTERPRET=1,
set here before triton is first imported), which costs tens of milliseconds per request. The adapter
therefore states CPU-sized audit defaults: the exact checks (coin endpoints, batch composition, the
greedy rule) plus small chi-squared samples. The kernel tests also prove the stronger property that
the kernels' tokens equal the reference's bit for bit under the same coins.
"""

from __future__ import annotations

import os

from specverify import __version__


def _on_gpu() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


class KernelsEngine:
    name = "kernels"
    version = __version__
    capabilities = {"chain", "greedy"}

    def __init__(self):
        if not _on_gpu():
            os.environ.setdefault("TRITON_INTERPRET", "1")
            # CPU: the interpreter runs ~50-75 ms per request -- audit what fits in minutes
            self.audit_defaults = {"samples": 300, "checks": ["endpoints", "composition", "greedy"], "timeout": 1800.0}
        from specverify.kernels import sampler
        self._sampler = sampler

    def verify(self, batch, coins):
        return self._sampler.verify(batch, coins)
