"""`specverify invariance OPS`: is each row of an op's result independent of the launch it is in?"""

from __future__ import annotations

import argparse
import sys

from specverify.errors import InputError
from specverify.verdicts import PASS

HELP = """\
Check that ops are batch-invariant: each row's result bitwise independent of the number of rows M in
the launch, of its neighbours and of its position.

An op is a callable from a batch of rows to a batch of rows (a tensor [M, ...] -> [M, ...]): a linear
layer, a norm, an attention call, a whole forward of one position. Your factory (no arguments)
returns a RowOp, a list of RowOps or a dict of them:

    from specverify.kerneltools.op_invariance import RowOp
    def factory():
        return [RowOp("my.linear", lambda x: x @ W.T, row_shape=(576,))]

The ops run in a process of their own (as an audit's adapter): an op past --timeout is killed, a crash
is one line naming how it ended, what an op prints never reaches the output.

Each op runs on a seeded pool of 64 rows: a row alone (M = 1) is its reference; then for every M a
block of M consecutive rows and M rows drawn at random positions, every output row compared with its
reference bit for bit. A failing row names the first differing row, its position and M.

ops:
  torch-linear              torch's default fp32 linear at SmolLM2's qkv shape (the negative control: fails on a CPU)
  invariant                 our batch-invariant CPU kernels (numba): linear, rms_norm, softmax, silu_mul
  invariant-q8              our 8-bit-activation linear at SmolLM2's four Q4_1 shapes and Q8_0 head (numba)
  triton                    our Triton kernels, small shapes (TRITON_INTERPRET=1 without a GPU)
  pkg.module:factory        your ops
  path/to/file.py:factory   the same, from a file

exit codes: 0 every op is invariant, 1 an op is not, 2 usage or input error.
"""
MAX_SIZE = 4096


def parse_sizes(text: str) -> tuple:
    """'1..64' or '1,2,8' (or a mix: '1..8,16,64') as a tuple of launch sizes; InputError otherwise."""
    out = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("..")
        try:
            a, b = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise InputError(f"--sizes {text!r}: expected sizes such as 1..64 or 1,2,8") from None
        if not 1 <= a <= b <= MAX_SIZE:
            raise InputError(f"--sizes {text!r}: each size must be in [1, {MAX_SIZE}] and ranges increasing")
        out += range(a, b + 1)
    return tuple(dict.fromkeys(out))


def table(result, sizes) -> str:
    """One line per op, then the verdict line and each failing op's first differing row."""
    rows = [("op", "verdict", "rows", "launches", "seconds")]
    rows += [(c.name, c.verdict.upper(), str(c.n), str(c.data.get("launches", "")), f"{c.seconds:.2f}")
             for c in result.checks]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(v.ljust(w) if i < 2 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths))) for r in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    kind = f" ({result.deviation['text']})" if result.deviation else ""
    lines += ["", f"{result.engine}: {result.verdict.upper()}{kind} -- {len(result.checks)} ops, launch sizes "
                  f"{min(sizes)}..{max(sizes)} ({len(sizes)} sizes), seed {result.seed}, {result.seconds:.1f} s"]
    lines += [f"  FAIL {c.name}: {c.detail}" for c in result.failed()]
    return "\n".join(lines)


def register(sub) -> None:
    p = sub.add_parser("invariance", help="check that ops are batch-invariant, row by row", description=HELP,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("ops", help="the ops to check (see above)")
    p.add_argument("--sizes", default="1..64", help="launch sizes M (default 1..64; e.g. 1..8,16,64)")
    p.add_argument("--seed", type=int, default=0, help="seed of the input rows and of the launches (default 0)")
    p.add_argument("--json", metavar="PATH", help="write the result as JSON to PATH ('-' for stdout); same form as audit's")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress line and no table")
    p.add_argument("--timeout", type=float, default=None, metavar="S",
                   help="seconds one op may take (it runs in a process of its own; default: the audit's)")
    p.set_defaults(func=run)


def run(args) -> int:
    from specverify.io import check_writable, json_text, write_json
    from specverify.kerneltools.op_invariance import run as run_invariance
    from specverify.progress import Progress

    sizes = parse_sizes(args.sizes)
    if not 0 <= args.seed < 2 ** 63:
        raise InputError(f"--seed {args.seed}: must be an integer in [0, {2 ** 63 - 1}]")
    if args.timeout is not None and not 0 < args.timeout < float("inf"):
        raise InputError(f"--timeout {args.timeout:g}: must be a positive number of seconds")
    if args.json and args.json != "-":
        check_writable(args.json)
    progress = Progress(quiet=args.quiet)
    try:
        result = run_invariance(args.ops, sizes=sizes, seed=args.seed, progress=progress, timeout=args.timeout)
    finally:
        progress.done()
    if args.json:
        if args.json == "-":
            sys.stdout.write(json_text(result.to_dict()))
        else:
            write_json(args.json, result.to_dict())
    if not args.quiet and args.json != "-":
        print(table(result, sizes))
    return 0 if result.verdict == PASS else 1
