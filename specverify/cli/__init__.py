"""The `specverify` command line: one module a subcommand.

Each module in `COMMANDS` provides `register(subparsers)`, which adds its parser and sets
`func=run` on it, and `run(args) -> int` (the exit code). Exit codes are the same everywhere:
0 the audited thing passes, 1 it fails, 2 a usage or input error (one line on stderr, no traceback).
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from specverify import __version__
from specverify.errors import AdapterError, InputError

COMMANDS = ["audit", "zoo", "generate", "bench", "report", "lab", "invariance", "findings", "serve", "serve_audit",
            "models"]

EPILOG = """\
exit codes: 0 pass, 1 fail (a check found a deviation), 2 usage or input error.
examples:
  specverify audit reference                 audit the exact float64 rules (must pass)
  specverify audit lossy:threshold_acc=0.9   audit a lossy rule (must fail)
  specverify audit reference --json out.json machine-readable result
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="specverify",
        description="Prove a speculative-decoding implementation exact, or show where it is wrong.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"specverify {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        try:
            mod = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as exc:
            if exc.name == f"{__name__}.{name}":
                continue
            raise
        mod.register(sub)
    return parser


class Terminated(BaseException):
    """SIGTERM, raised where the program is, so that cleanup (staging folders, temporary files,
    adapter processes) runs as it does for ^C."""


def _terminate(signum, frame):
    raise Terminated


def main(argv=None) -> int:
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    try:                                   # ^C while the subcommands import is an interrupt too
        parser = build_parser()
        args = parser.parse_args(argv)
        if not getattr(args, "func", None):
            parser.print_help(sys.stderr)
            return 2
        return int(args.func(args))
    except (InputError, AdapterError) as exc:
        print(f"specverify: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specverify: interrupted", file=sys.stderr)
        return 130
    except Terminated:
        print("specverify: terminated", file=sys.stderr)
        return 143


if __name__ == "__main__":
    sys.exit(main())
