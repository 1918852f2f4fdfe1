"""Exact integer block sums of a panel of 32 output columns against 32 activations, as numba
intrinsics written in LLVM vector IR: the inner loop of `cpu_linear_q8`.

    block_q8_0(x16, i, ldx, q, j, isum, R)    isum[32 r + c] = sum_{t<32} x16[i + r ldx + t] * w_c[t]
    block_q4_1(x16, i, ldx, nib, j, isum, R)  (the same; Q8_0: w int8, Q4_1: w in 0..15)

for the 32 columns c of one panel, one block of 32 weights along K and R <= 4 rows r of x (R a
compile-time constant: the weights are loaded once for the R rows). x16 holds the rows' 8-bit
activations widened to int16 (C-contiguous, flat offset i of row 0's block, ldx between rows);
isum is an int32[32 R] buffer (`stack_i32`). The weights sit at flat offset j of the panel layouts
`cpu_linear_q8.pack` builds, k-pairs interleaved per column so that one 64-byte load holds two
consecutive weights of all 32 columns:

    Q8_0  q   [P, K/32, 16, 32, 2] int8   q[p, b, s, c, e]   = weight 32 b + 2 s + e of column c
    Q4_1  nib [P, K/32,  8, 32, 2] uint8  nib[p, b, s, c, e] = GGUF byte 2 s + e of column c's block:
                                          low nibble weight 32 b + 2 s + e, high 32 b + 16 + 2 s + e

Each k-pair step is: widen the 64 weight bytes to int16, broadcast the activation pair
(x[k], x[k+1]) as one int32, multiply to int32 and add the even and odd products. That is the
pattern LLVM lowers to `vpmaddwd` (`vpdpwssd` where the CPU has AVX-512 VNNI or AVX-VNNI): no
x86 intrinsic is named, so the IR compiles on any target, and the instructions chosen never change
the result: every product is at most 128 * 127 and a block sum below 32 * 128 * 127 < 2^19 in
magnitude, so the int32 sums are exact, the same integers in any order of addition. Nothing here
is floating point.

Why IR and not a numba loop: numba types an integer product as int64 and its loops over int8
weights stayed scalar or on narrow lanes (the int32 and int16-pair loops measured 6-25x slower
than the fp32 kernel at the head's shape); the explicit vector types give LLVM the form it maps to
`vpmaddwd` directly (see it with `cpu_linear_q8._q8_0_serial.inspect_asm(sig)`).
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
PAIR_STEPS = BLOCK // 2
"""k-pairs per block."""
PREFETCH_BYTES = 4096
"""How far ahead of the block being summed its panel's weights are prefetched (the step streams
~100 MB of weights from memory once; 4 KB ahead measured best of 1, 2, 4 KB here)."""
MAX_ROWS = 4
"""Most rows of x one call takes: each loaded weight pair is used by all of them (ROW_BLOCK)."""

_I8, _I16, _I32 = ir.IntType(8), ir.IntType(16), ir.IntType(32)
_W_BYTES = ir.VectorType(_I8, 2 * PANEL_N)          # one k-pair of the 32 columns
_W_I16 = ir.VectorType(_I16, 2 * PANEL_N)
_W_I32 = ir.VectorType(_I32, 2 * PANEL_N)
_ACC = ir.VectorType(_I32, PANEL_N)
_EVEN = ir.Constant(_ACC, list(range(0, 2 * PANEL_N, 2)))
_ODD = ir.Constant(_ACC, list(range(1, 2 * PANEL_N, 2)))
_SPLAT = ir.Constant(_ACC, [0] * PANEL_N)


def _ptr(context, builder, aryty, ary, offset):
    """Pointer to flat element `offset` of a C-contiguous array value."""
    return builder.gep(context.make_array(aryty)(context, builder, ary).data, [offset])


def _pair_sum(builder, w16, x16_ptr, k):
    """<32 x i32>: for each column c, w16[2c] * x[k] + w16[2c+1] * x[k+1] (x16_ptr: int16*)."""
    pair = builder.load(builder.bitcast(builder.gep(x16_ptr, [ir.Constant(_I32, k)]), _I32.as_pointer()), align=2)
    lane = builder.insert_element(ir.Constant(_ACC, ir.Undefined), pair, ir.Constant(_I32, 0))
    xs = builder.bitcast(builder.shuffle_vector(lane, lane, _SPLAT), _W_I16)      # x[k], x[k+1], x[k], ..
    prod = builder.mul(builder.sext(w16, _W_I32), builder.sext(xs, _W_I32))
    return builder.add(builder.shuffle_vector(prod, prod, _EVEN), builder.shuffle_vector(prod, prod, _ODD))


def _prefetch(builder, w_ptr, nbytes):
    """Hint the cache lines PREFETCH_BYTES past this block's weights (the panel's next blocks: the
    weights stream from memory once per step). A hint only: no effect on any value, and no fault
    past the array's end."""
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [ir.IntType(8).as_pointer(), _I32, _I32, _I32]), "llvm.prefetch.p0")
    base = builder.bitcast(w_ptr, ir.IntType(8).as_pointer())
    for line in range(0, nbytes, 64):
        builder.call(fn, [builder.gep(base, [ir.Constant(_I32, PREFETCH_BYTES + line)]), ir.Constant(_I32, 0),
                          ir.Constant(_I32, 3), ir.Constant(_I32, 1)])


def _load_pair(builder, w_ptr, step):
    return builder.load(builder.bitcast(builder.gep(w_ptr, [ir.Constant(_I32, 2 * PANEL_N * step)]),
                                        _W_BYTES.as_pointer()), align=1)


def _typed(x16, i, ldx, w, j, isum, rows, wdtype):
    if not isinstance(rows, types.IntegerLiteral):
        raise errors.RequireLiteralValue(rows)
    if not (isinstance(x16, types.Array) and x16.dtype == types.int16 and isinstance(w, types.Array)
            and w.dtype == wdtype and all(isinstance(v, types.Integer) for v in (i, ldx, j))
            and isum == types.CPointer(types.int32) and 1 <= rows.literal_value <= MAX_ROWS):
        return None
    return types.void(x16, i, ldx, w, j, isum, rows)


def _block(context, builder, sig, args, steps, block_bytes):
    """Shared codegen: `steps(builder, pw, pair_sum)` yields the weight pairs (w16 <64 x i16>, k) of
    the block; every row r of the `rows` rows (x16 offset i + r * ldx) multiplies each pair once it
    is loaded, into its own accumulator, stored to isum[32 r .. 32 r + 31]."""
    rows = sig.args[6].literal_value
    x_ary = context.make_array(sig.args[0])(context, builder, args[0])
    px = [builder.gep(x_ary.data, [builder.add(args[1], builder.mul(args[2], ir.Constant(args[2].type, r)))])
          for r in range(rows)]
    pw = _ptr(context, builder, sig.args[3], args[3], args[4])
    _prefetch(builder, pw, block_bytes)
    acc = [ir.Constant(_ACC, [0] * PANEL_N) for _ in range(rows)]
    for w16, k in steps(builder, pw):
        for r in range(rows):
            acc[r] = builder.add(acc[r], _pair_sum(builder, w16, px[r], k))
    out = builder.bitcast(args[5], _ACC.as_pointer())
    for r in range(rows):
        builder.store(acc[r], builder.gep(out, [ir.Constant(_I32, r)]), align=4)
    return context.get_dummy_value()


def _q8_0_steps(builder, pw):
    for s in range(PAIR_STEPS):
        yield builder.sext(_load_pair(builder, pw, s), _W_I16), 2 * s


def _q4_1_steps(builder, pw):
    low_mask = ir.Constant(_W_BYTES, [0x0F] * (2 * PANEL_N))
    shift = ir.Constant(_W_BYTES, [4] * (2 * PANEL_N))
    for s in range(PAIR_STEPS // 2):
        w = _load_pair(builder, pw, s)
        yield builder.zext(builder.and_(w, low_mask), _W_I16), 2 * s                 # weights 2s, 2s+1
        yield builder.zext(builder.lshr(w, shift), _W_I16), BLOCK // 2 + 2 * s       # 16+2s, 17+2s


@intrinsic
def block_q8_0(typingctx, x16, i, ldx, q, j, isum, rows):
    """isum[32 r + c] = the exact int32 sums of a Q8_0 panel block for `rows` rows (docstring)."""
    sig = _typed(x16, i, ldx, q, j, isum, rows, types.int8)
    if sig is None:
        return None
    return sig, lambda context, builder, sig, args: _block(context, builder, sig, args, _q8_0_steps, 2 * PANEL_N * PAIR_STEPS)


@intrinsic
def block_q4_1(typingctx, x16, i, ldx, nib, j, isum, rows):
    """isum[32 r + c] = the exact int32 sums of a Q4_1 panel block for `rows` rows (docstring)."""
    sig = _typed(x16, i, ldx, nib, j, isum, rows, types.uint8)
    if sig is None:
        return None
    return sig, lambda context, builder, sig, args: _block(context, builder, sig, args, _q4_1_steps, PANEL_N * PAIR_STEPS)


@intrinsic
def stack_i32(typingctx, n):
    """An int32 scratch buffer of compile-time size n on the stack (see `cpu_common.stack_f32`)."""
    if not isinstance(n, types.IntegerLiteral):
        raise errors.RequireLiteralValue(n)
    size = n.literal_value

    def codegen(context, builder, signature, args):
        return cgutils.alloca_once(builder, context.get_value_type(types.int32), size=size)
    return types.CPointer(types.int32)(n), codegen
