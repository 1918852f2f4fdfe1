"""Exact integer block sums of a panel of 32 output columns against 32 activations, as numba
intrinsics written in LLVM vector IR: the inner loop of `cpu_linear_q8`.

    block_q8_0(x, i, ldx, w, j, isum, R, MODE)   isum[32 r + c] = sum_{t<32} x[i + r ldx + t] * u_c[t]
    block_q4_1(x, i, ldx, nib, j, isum, R, MODE)  (the same)

for the 32 columns c of one panel, one block of 32 weights along K and R <= 4 rows r of x (R a
compile-time constant: each weight quad is loaded and unpacked once for the R rows). x holds the
rows' 8-bit activations (int8, C-contiguous, flat offset i of row 0's block, ldx between rows);
isum is an int32[32 R] buffer (`stack_i32`). u is the weight as stored, an UNSIGNED byte: Q4_1's
nibble 0..15 (its weight), Q8_0's q + 128 (0..255; `cpu_linear_q8` subtracts 128 * sum_t x[t],
an exact integer, to get sum x q). The weights sit at flat offset j of the panel layouts
`cpu_linear_q8.pack` builds, k-quads interleaved per column so that one 128-byte load holds four
consecutive weights of all 32 columns:

    Q8_0  w   [P, K/32, 8, 32, 4] uint8  w[p, b, s, c, e]   = q(weight 32 b + 4 s + e of column c) + 128
    Q4_1  nib [P, K/32, 4, 32, 4] uint8  nib[p, b, s, c, e] = GGUF byte 4 s + e of column c's block:
                                          low nibble weight 32 b + 4 s + e, high 32 b + 16 + 4 s + e

Each k-quad step multiplies the 128 unsigned weight bytes by the broadcast signed activation quad
(x[k] .. x[k+3]) and adds each column's four products into its int32 lane. MODE (a compile-time
constant) picks how:

    MODE_VNNI     the AVX-512 VNNI instruction `vpdpbusd` (u8 x s8, four products summed into an
                  int32 lane), named as the LLVM intrinsic llvm.x86.avx512.vpdpbusd.512: 2
                  instructions a quad step and row; only where the host has AVX-512 VNNI (HOST_MODE)
    MODE_GENERIC  plain LLVM vector IR (widen, multiply, add the four strided products): compiles
                  on any target

Both give the same integers, as does any order of addition: every product is at most 255 * 128
and a block sum at most 32 * 255 * 128 < 2^21 in magnitude, so nothing wraps or saturates in
int32 (vpdpbusd does not saturate). Nothing here is floating point.

Why IR and not a numba loop: numba types an integer product as int64 and its loops over int8
weights stayed scalar or on narrow lanes (6-25x slower than the fp32 kernel at the head's shape);
explicit vector types give LLVM the instructions directly (see them with
`cpu_linear_q8._q8_0_serial.inspect_asm(sig)`).
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils, errors
from numba.extending import intrinsic

PANEL_N = 32
"""Output columns per panel (the vector width of the block sums)."""
BLOCK = 32
"""Weights per block along K."""
QUAD = 4
"""Consecutive weights of a column one vpdpbusd lane sums."""
QUAD_STEPS = BLOCK // QUAD
"""k-quads per block."""
Q8_0_OFFSET = 128
"""Added to a Q8_0 quant in the packed layout (an unsigned byte for vpdpbusd)."""
PREFETCH_BYTES = 4096
"""How far ahead of the block being summed its panel's weights are prefetched (the step streams
~100 MB of weights from memory once; 4 KB ahead measured best of 1, 2, 4 KB here)."""
MAX_ROWS = 4
"""Most rows of x one call takes: each loaded weight quad is used by all of them (ROW_BLOCK)."""
MODE_GENERIC = 0
MODE_VNNI = 1


def _host_mode() -> int:
    """MODE_VNNI where numba compiles for this host and it has AVX-512 VNNI (and BW), else generic."""
    import llvmlite.binding as ll
    from numba.core import config
    if config.CPU_NAME not in (None, "", "host"):
        return MODE_GENERIC                          # a fixed target (e.g. a portable cache)
    try:
        f = ll.get_host_cpu_features()
    except RuntimeError:
        return MODE_GENERIC
    return MODE_VNNI if all(f.get(x, False) for x in ("avx512f", "avx512bw", "avx512vnni")) else MODE_GENERIC


HOST_MODE = _host_mode()
"""The MODE `cpu_linear_q8` compiles with on this machine."""

_I8, _I32 = ir.IntType(8), ir.IntType(32)
_W_BYTES = ir.VectorType(_I8, QUAD * PANEL_N)        # one k-quad of the 32 columns
_W_I32 = ir.VectorType(_I32, QUAD * PANEL_N)
_ACC = ir.VectorType(_I32, PANEL_N)
_HALF = ir.VectorType(_I32, PANEL_N // 2)            # one zmm: 16 columns
_SPLAT = ir.Constant(_ACC, [0] * PANEL_N)
_LANES = [ir.Constant(_ACC, list(range(e, QUAD * PANEL_N, QUAD))) for e in range(QUAD)]
_LO = ir.Constant(_HALF, list(range(PANEL_N // 2)))
_HI = ir.Constant(_HALF, list(range(PANEL_N // 2, PANEL_N)))
_JOIN = ir.Constant(_ACC, list(range(PANEL_N)))


def _ptr(context, builder, aryty, ary, offset):
    """Pointer to flat element `offset` of a C-contiguous array value."""
    return builder.gep(context.make_array(aryty)(context, builder, ary).data, [offset])


def _x_quad(builder, x_ptr, k):
    """<32 x i32>: the four int8 activations x[k .. k+3] as one int32, in every lane."""
    quad = builder.load(builder.bitcast(builder.gep(x_ptr, [ir.Constant(_I32, k)]), _I32.as_pointer()), align=1)
    lane = builder.insert_element(ir.Constant(_ACC, ir.Undefined), quad, ir.Constant(_I32, 0))
    return builder.shuffle_vector(lane, lane, _SPLAT)


def _quad_generic(builder, acc, w, xq):
    """acc <32 x i32> + for each column c: sum_e u[4c + e] * x[e] (w: <128 x i8> unsigned)."""
    prod = builder.mul(builder.zext(w, _W_I32), builder.sext(builder.bitcast(xq, _W_BYTES), _W_I32))
    for e in range(QUAD):
        acc = builder.add(acc, builder.shuffle_vector(prod, prod, _LANES[e]))
    return acc


def _vpdpbusd(builder):
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_HALF, [_HALF, _HALF, _HALF]),
                                        "llvm.x86.avx512.vpdpbusd.512")
    return fn


def _quad_vnni(builder, acc, w, xq):
    """(lo, hi) <16 x i32> accumulators + vpdpbusd(unsigned w, signed x quad) on each half."""
    fn = _vpdpbusd(builder)
    w32 = builder.bitcast(w, _ACC)
    x16 = builder.shuffle_vector(xq, xq, _LO)
    lo = builder.call(fn, [acc[0], builder.shuffle_vector(w32, w32, _LO), x16])
    hi = builder.call(fn, [acc[1], builder.shuffle_vector(w32, w32, _HI), x16])
    return (lo, hi)


def _prefetch(builder, w_ptr, nbytes):
    """Hint the cache lines PREFETCH_BYTES past this block's weights (the panel's next blocks: the
    weights stream from memory once per step). A hint only: no effect on any value, and no fault
    past the array's end."""
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), _I32, _I32, _I32]), "llvm.prefetch.p0")
    base = builder.bitcast(w_ptr, ir.IntType(8).as_pointer())
    for line in range(0, nbytes, 64):
        builder.call(fn, [builder.gep(base, [ir.Constant(_I32, PREFETCH_BYTES + line)]), ir.Constant(_I32, 0),
                          ir.Constant(_I32, 3), ir.Constant(_I32, 1)])


def _load_quad(builder, w_ptr, step):
    return builder.load(builder.bitcast(builder.gep(w_ptr, [ir.Constant(_I32, QUAD * PANEL_N * step)]),
                                        _W_BYTES.as_pointer()), align=1)


def _typed(x, i, ldx, w, j, isum, rows, mode):
    for lit in (rows, mode):
        if not isinstance(lit, types.IntegerLiteral):
            raise errors.RequireLiteralValue(lit)
    if not (isinstance(x, types.Array) and x.dtype == types.int8 and isinstance(w, types.Array)
            and w.dtype == types.uint8 and all(isinstance(v, types.Integer) for v in (i, ldx, j))
            and isum == types.CPointer(types.int32) and 1 <= rows.literal_value <= MAX_ROWS
            and mode.literal_value in (MODE_GENERIC, MODE_VNNI)):
        return None
    return types.void(x, i, ldx, w, j, isum, rows, mode)


def _block(context, builder, sig, args, steps, block_bytes):
    """Shared codegen: `steps(builder, pw)` yields the weight quads (w <128 x i8> unsigned, k) of
    the block; every row r of the `rows` rows (x offset i + r * ldx) takes each quad once it is
    loaded, into its own accumulator, stored to isum[32 r .. 32 r + 31]."""
    rows, mode = sig.args[6].literal_value, sig.args[7].literal_value
    x_ary = context.make_array(sig.args[0])(context, builder, args[0])
    px = [builder.gep(x_ary.data, [builder.add(args[1], builder.mul(args[2], ir.Constant(args[2].type, r)))])
          for r in range(rows)]
    pw = _ptr(context, builder, sig.args[3], args[3], args[4])
    _prefetch(builder, pw, block_bytes)
    if mode == MODE_VNNI:
        zero = ir.Constant(_HALF, [0] * (PANEL_N // 2))
        acc = [(zero, zero) for _ in range(rows)]
        step = _quad_vnni
    else:
        acc = [ir.Constant(_ACC, [0] * PANEL_N) for _ in range(rows)]
        step = _quad_generic
    for w, k in steps(builder, pw):
        for r in range(rows):
            acc[r] = step(builder, acc[r], w, _x_quad(builder, px[r], k))
    out = builder.bitcast(args[5], _ACC.as_pointer())
    for r in range(rows):
        a = builder.shuffle_vector(acc[r][0], acc[r][1], _JOIN) if mode == MODE_VNNI else acc[r]
        builder.store(a, builder.gep(out, [ir.Constant(_I32, r)]), align=4)
    return context.get_dummy_value()


def _q8_0_steps(builder, pw):
    for s in range(QUAD_STEPS):
        yield _load_quad(builder, pw, s), QUAD * s


def _q4_1_steps(builder, pw):
    low_mask = ir.Constant(_W_BYTES, [0x0F] * (QUAD * PANEL_N))
    shift = ir.Constant(_W_BYTES, [4] * (QUAD * PANEL_N))
    for s in range(QUAD_STEPS // 2):
        w = _load_quad(builder, pw, s)
        yield builder.and_(w, low_mask), QUAD * s                     # weights 4s .. 4s+3
        yield builder.lshr(w, shift), BLOCK // 2 + QUAD * s           # 16+4s .. 19+4s


@intrinsic
def block_q8_0(typingctx, x, i, ldx, w, j, isum, rows, mode):
    """isum[32 r + c] = the exact int32 sums sum_t x * (q + 128) of a Q8_0 panel block for `rows`
    rows (module docstring)."""
    sig = _typed(x, i, ldx, w, j, isum, rows, mode)
    if sig is None:
        return None
    return sig, lambda context, builder, sig, args: _block(context, builder, sig, args, _q8_0_steps, QUAD * PANEL_N * QUAD_STEPS)


@intrinsic
def block_q4_1(typingctx, x, i, ldx, nib, j, isum, rows, mode):
    """isum[32 r + c] = the exact int32 sums of a Q4_1 panel block for `rows` rows (docstring)."""
    sig = _typed(x, i, ldx, nib, j, isum, rows, mode)
    if sig is None:
        return None
    return sig, lambda context, builder, sig, args: _block(context, builder, sig, args, _q4_1_steps, QUAD * PANEL_N * QUAD_STEPS // 2)


_HALFS = ir.VectorType(ir.HalfType(), PANEL_N)
_F32S = ir.VectorType(ir.FloatType(), PANEL_N)


@intrinsic
def widen_f16(typingctx, h, j, out):
    """out[0 .. 31] = float32(h[j .. j+31]): 32 IEEE half-precision scales (h a uint16 array of
    their bits) widened to float32 -- exact, every half is a float32 (`fpext`, `vcvtph2ps` with
    F16C). The packed scales stay at the file's 2 bytes each: a step streams fewer bytes."""
    if not (isinstance(h, types.Array) and h.dtype == types.uint16 and isinstance(j, types.Integer)
            and out == types.CPointer(types.float32)):
        return None

    def codegen(context, builder, sig, args):
        src = builder.bitcast(_ptr(context, builder, sig.args[0], args[0], args[1]), _HALFS.as_pointer())
        wide = builder.fpext(builder.load(src, align=2), _F32S)
        builder.store(wide, builder.bitcast(args[2], _F32S.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(h, j, out), codegen


@intrinsic
def stack_i32(typingctx, n):
    """An int32 scratch buffer of compile-time size n on the stack (see `cpu_common.stack_f32`)."""
    if not isinstance(n, types.IntegerLiteral):
        raise errors.RequireLiteralValue(n)
    size = n.literal_value

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, context.get_value_type(types.int32), size=size)
    return types.CPointer(types.int32)(n), codegen
