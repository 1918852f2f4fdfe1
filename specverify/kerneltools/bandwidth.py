"""This machine's memory read bandwidth, one thread, measured now: the floor a memory-bound decode
step is compared against (`specverify bench` measures it in the same run as the decode rates).

The probe streams an int64 array far larger than the caches and sums it. Integer addition is
associative, so LLVM vectorises the sum without fastmath and the loop is limited by memory, not by
an add chain (a float sum without fastmath would be). The best of `reps` passes counts.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from numba import njit

PROBE_BYTES = 512 * 2 ** 20
"""Bytes streamed per pass (well beyond any L3 here)."""
REPS = 5


@dataclass(frozen=True)
class Bandwidth:
    bytes_per_s: float          # best pass
    nbytes: int                 # bytes per pass
    reps: int

    def to_dict(self) -> dict:
        return {"GB_per_s": self.bytes_per_s / 1e9, "probe_bytes": self.nbytes, "reps": self.reps}


@njit(nogil=True, cache=True)
def _stream(a):
    s = 0
    for i in range(a.shape[0]):
        s += a[i]
    return s


def read_bandwidth(nbytes: int = PROBE_BYTES, reps: int = REPS) -> Bandwidth:
    """Single-thread read bandwidth (bytes/s), best of `reps` passes over `nbytes`."""
    a = np.ones(max(1, nbytes // 8), np.int64)
    _stream(a[:16])                                    # compile (or load from the cache) first
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        total = _stream(a)
        best = min(best, time.perf_counter() - t)
    if total != a.shape[0]:                            # the loop really read every element
        raise RuntimeError("bandwidth probe summed the wrong total")
    return Bandwidth(a.nbytes / best, int(a.nbytes), reps)


def cpu_description() -> str:
    """The CPU model and its widest vector extensions, from /proc/cpuinfo ("unknown" elsewhere):
    benchmark figures do not carry across machines, so every result says which one it came from."""
    try:
        text = open("/proc/cpuinfo").read()
    except OSError:
        return "unknown"
    model = next((ln.split(":", 1)[1].strip() for ln in text.splitlines() if ln.startswith("model name")), "unknown")
    flags = set(next((ln.split(":", 1)[1].split() for ln in text.splitlines() if ln.startswith("flags")), []))
    ext = [name for name, flag in (("AVX2", "avx2"), ("AVX-512", "avx512f"), ("AMX", "amx_tile")) if flag in flags]
    return f"{model} ({', '.join(ext) or 'no AVX2'})"
