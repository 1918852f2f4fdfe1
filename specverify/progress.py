"""Progress on stderr for long runs: one self-overwriting line, silent when stderr is not a terminal
or when --quiet is given."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, quiet: bool = False, stream=None):
        self.stream = stream or sys.stderr
        self.enabled = not quiet and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.start = time.perf_counter()
        self.width = 0

    def __call__(self, message: str) -> None:
        if not self.enabled:
            return
        line = f"[{time.perf_counter() - self.start:6.1f}s] {message}"
        pad = max(0, self.width - len(line))
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self.width = len(line)

    def done(self) -> None:
        if self.enabled and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0
