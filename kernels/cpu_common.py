"""Shared pieces of the numba CPU kernels (the "invariant" backend).

The CPU kernels are compiled by numba *without* fastmath. LLVM must then keep IEEE semantics: it
may not reassociate a sum or fuse a multiply and an add, so the arithmetic of every output
element is exactly the sequence of rounded operations the Python source spells out, whatever the
launch shape, the element's position, the vector lane it lands in, or the thread that computes it.
That is what makes these kernels batch-invariant by construction; the docstring of each kernel
states its sequence. Transcendentals (exp, log, cos, sin) are libm calls on every element (numba
vectorises them only through Intel SVML, which `assert_no_svml` rules out).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numba
from numba import types
from numba.core import cgutils, errors
from numba.extending import intrinsic

JIT = dict(fastmath=False, boundscheck=False, nogil=True, cache=True)
"""The numba options every CPU kernel uses (fastmath stays off: see the module docstring)."""


def drop_stale_cache(module_file: str, *dependencies: str) -> bool:
    """Numba keys a module's on-disk kernel cache (`__pycache__/<module>.*.nbi|nbc`) on that module's own
    file only, not on the files whose functions and constants its kernels compile in: after an edit of a
    dependency alone (cpu_intdot.py under cpu_linear_q8.py) it would load the old machine code. Call at
    the top of such a module, before its kernels are defined: when the dependencies' sources differ from
    those the cache was written with (a marker file named by their digest), the module's cached kernels
    are removed and numba compiles them again. True if it removed anything. A cache that cannot be
    written (read-only install) is left alone: numba then keeps nothing on disk there either."""
    digest = hashlib.sha256(b"".join(Path(d).read_bytes() for d in dependencies)).hexdigest()[:16]
    pycache = Path(module_file).parent / "__pycache__"
    stem = Path(module_file).stem
    marker = pycache / f"{stem}.deps-{digest}"
    if marker.exists():
        return False
    removed = False
    try:
        pycache.mkdir(exist_ok=True)
        for old in [*pycache.glob(f"{stem}.*.nbi"), *pycache.glob(f"{stem}.*.nbc"), *pycache.glob(f"{stem}.deps-*")]:
            old.unlink(missing_ok=True)
            removed = removed or not old.name.startswith(f"{stem}.deps-")
        marker.touch()
    except OSError:
        return False
    return removed


@intrinsic
def stack_f32(typingctx, n):
    """A float32 scratch buffer of compile-time size n on the stack (an LLVM alloca); returns a
    pointer. Unlike np.empty (a heap allocation LLVM cannot see through) a stack buffer indexed with
    constants after unrolling is promoted to registers: the micro-kernels keep their accumulators
    in vector registers this way. Use as `numba.carray(stack_f32(N), (R, C))`."""
    if not isinstance(n, types.IntegerLiteral):
        raise errors.RequireLiteralValue(n)
    size = n.literal_value
    sig = types.CPointer(types.float32)(n)

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, context.get_value_type(types.float32), size=size)

    return sig, codegen


def assert_no_svml() -> None:
    """The CPU kernels rely on libm for exp/log/cos/sin on every element; with Intel SVML present
    numba could vectorise some of those calls with a different implementation than the scalar
    remainder loop, which would make an element's value depend on its position."""
    from numba.core import config
    if config.USING_SVML:
        raise RuntimeError("numba is using Intel SVML; set NUMBA_DISABLE_INTEL_SVML=1 for the invariant backend")


carray = numba.carray
