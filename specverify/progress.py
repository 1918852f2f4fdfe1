"""Progress on stderr for long runs: a status line and progress bars, silent when stderr is not a
terminal or when --quiet is given. Library code takes a `progress` argument and never prints; the
CLI passes a `Progress` (or nothing, and the library uses `NULL`).

    progress = Progress(quiet=args.quiet)
    progress("loading the model")                      # a status line: [  3.1s] loading the model
    with progress.bar(40, "kappa sweep") as bar:       # kappa sweep [#######------]  12/40  30%  0:12<0:28  draft k=3
        for item in work:
            ...
            bar.advance(note=f"draft k={k}")
    progress.done()                                    # clear the line

Bars nest: an inner bar replaces the outer one on the line while it runs, and the outer one is
redrawn when it ends. Redraws are throttled (at most ~10 per second), so advancing a bar in a tight
loop costs almost nothing. A plain callable `progress(message)` is all the old interface was; it
still works, and `as_progress(x)` turns None, a callable or a Progress into something with `.bar`.
"""

from __future__ import annotations

import shutil
import sys
import time

MIN_REDRAW_S = 0.1          # throttle: at most one redraw per this many seconds (except the last)
BAR_WIDTH = 24              # characters of the bar itself (shrunk on narrow terminals)


def _clock(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Bar:
    """One progress bar: `advance(n, note=...)`; a context manager (ends itself on exit)."""

    def __init__(self, owner: "Progress", total: int | None, label: str):
        self.owner = owner
        self.total = None if total is None else max(0, int(total))
        self.label = label
        self.count = 0
        self.note = ""
        self.start = time.perf_counter()
        self.closed = False

    def advance(self, n: int = 1, note: str | None = None) -> None:
        self.count += n
        if note is not None:
            self.note = note
        self.owner._draw(force=self.total is not None and self.count >= self.total)

    def set_note(self, note: str) -> None:
        self.note = note
        self.owner._draw()

    def render(self, width: int) -> str:
        elapsed = time.perf_counter() - self.start
        if self.total:
            frac = min(1.0, self.count / self.total)
            eta = elapsed * (1 - frac) / frac if frac > 0 else None
            bar_w = max(8, min(BAR_WIDTH, width // 4))
            full = int(round(frac * bar_w))
            bar = "[" + "#" * full + "-" * (bar_w - full) + "]"
            times = f"{_clock(elapsed)}<{_clock(eta)}" if eta is not None else f"{_clock(elapsed)}<?"
            line = f"{self.label} {bar} {self.count}/{self.total} {frac:4.0%} {times}"
        else:
            line = f"{self.label} {self.count} done {_clock(elapsed)}"
        if self.note:
            line += f"  {self.note}"
        return line[:width - 1] if width > 1 else line

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.owner._pop(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Progress:
    """Status line and bars on `stream` (default stderr); `enabled` overrides the tty test (tests)."""

    def __init__(self, quiet: bool = False, stream=None, enabled: bool | None = None):
        self.stream = stream or sys.stderr
        if enabled is None:
            enabled = not quiet and hasattr(self.stream, "isatty") and self.stream.isatty()
        self.enabled = bool(enabled) and not quiet
        self.start = time.perf_counter()
        self.width = 0
        self.message = ""
        self.bars: list[Bar] = []
        self.last_draw = 0.0

    # -- the old interface: a status message --------------------------------------------------------
    def __call__(self, message: str) -> None:
        self.message = message
        self._draw(force=True)

    def bar(self, total: int | None, label: str) -> Bar:
        b = Bar(self, total, label)
        self.bars.append(b)
        self._draw(force=True)
        return b

    def done(self) -> None:
        """Clear the line (call once at the end of a command)."""
        self.bars.clear()
        self.message = ""
        if self.enabled and self.width:
            self.stream.write("\r" + " " * self.width + "\r")
            self.stream.flush()
            self.width = 0

    # -- drawing ------------------------------------------------------------------------------------
    def _pop(self, bar: Bar) -> None:
        if bar in self.bars:
            self.bars.remove(bar)
        self._draw(force=True)

    def _columns(self) -> int:
        try:
            return shutil.get_terminal_size((100, 20)).columns
        except (OSError, ValueError):
            return 100

    def _draw(self, force: bool = False) -> None:
        if not self.enabled:
            return
        now = time.perf_counter()
        if not force and now - self.last_draw < MIN_REDRAW_S:
            return
        self.last_draw = now
        width = self._columns()
        if self.bars:
            line = self.bars[-1].render(width)
        elif self.message:
            line = f"[{now - self.start:6.1f}s] {self.message}"[:max(1, width - 1)]
        else:
            line = ""
        pad = max(0, self.width - len(line))
        self.stream.write("\r" + line + " " * pad)
        self.stream.flush()
        self.width = len(line)


class _NullBar:
    def advance(self, n: int = 1, note: str | None = None) -> None:
        pass

    def set_note(self, note: str) -> None:
        pass

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


class NullProgress:
    """Does nothing (library default)."""

    enabled = False

    def __call__(self, message: str) -> None:
        pass

    def bar(self, total, label) -> _NullBar:
        return _NullBar()

    def done(self) -> None:
        pass


NULL = NullProgress()


class _CallableProgress(NullProgress):
    """Wraps a plain callable(str): bars become status messages at their start and end."""

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, message: str) -> None:
        self.fn(message)

    def bar(self, total, label):
        self.fn(f"{label} ({total} steps)")
        return _NullBar()


def as_progress(progress) -> "Progress | NullProgress":
    """None -> NULL; a Progress (or anything with .bar) -> itself; a plain callable -> wrapped."""
    if progress is None:
        return NULL
    if hasattr(progress, "bar"):
        return progress
    if callable(progress):
        return _CallableProgress(progress)
    raise TypeError(f"not a progress reporter: {type(progress).__name__}")
