"""Progress on stderr for long runs: a status line and progress bars (tqdm), silent when stderr is not
a terminal or when --quiet is given. Library code takes a `progress` argument and never prints; the
CLI passes a `Progress` (or nothing, and the library uses `NULL`).

    progress = Progress(quiet=args.quiet)
    progress("loading the model")                      # a status line: [  3.1s] loading the model
    with progress.bar(40, "kappa sweep") as bar:       # kappa sweep [#######------] 12/40  30% 00:12<00:28, draft k=3
        for item in work:
            ...
            bar.advance(note=f"draft k={k}")
    progress.done()                                    # clear the lines

The status line stays on top; each open bar takes the next line below it (tqdm's nesting) and is
cleared when it ends. Redraws are throttled (at most ~10 per second, except a bar's last step),
so advancing a bar in a tight loop costs almost nothing. When stderr is not a terminal (CI logs, a
pipe) and --quiet is not given, there are no bars but a heartbeat: every HEARTBEAT_S seconds one
line `[ 120.0s] still running: <the last status> (<open bars' counts>)`, from a daemon thread, so a
long step with no new status still shows the run is alive. A plain callable `progress(message)` is
all the old interface was; it still works, and `as_progress(x)` turns None, a callable or a
Progress into something with `.bar`.
"""

from __future__ import annotations

import shutil
import sys
import time

from tqdm import tqdm

MIN_REDRAW_S = 0.1          # throttle: at most one redraw per this many seconds (except the last)
BAR_WIDTH = 24              # characters of the bar itself
BAR_FORMAT = "{desc} [{bar:%d}] {n_fmt}/{total_fmt} {percentage:3.0f}%% {elapsed}<{remaining}{postfix}" % BAR_WIDTH
COUNT_FORMAT = "{desc} {n_fmt} done {elapsed}{postfix}"      # a bar without a total (None or 0)
BAR_CHARS = "-#"            # tqdm's ascii bar: empty, full
FALLBACK_SIZE = (100, 20)   # columns, lines when the terminal reports no size (tqdm would draw nothing)
HEARTBEAT_S = 60.0          # seconds between heartbeat lines when stderr is not a terminal


class Bar(tqdm):
    """One progress bar: `advance(n, note=...)`; a context manager (ends itself on exit)."""

    monitor_interval = 0    # no tqdm monitor thread: a bar redraws on its own advances

    def advance(self, n: int = 1, note: str | None = None) -> None:
        if note is not None:
            self.set_postfix_str(note, refresh=False)
        self.update(n)
        if self.total is not None and self.n >= self.total:
            self.refresh()                                  # the last step is always drawn

    def set_note(self, note: str) -> None:
        self.set_postfix_str(note)


class Progress:
    """Status line and bars on `stream` (default stderr); `enabled` overrides the tty test (tests)."""

    def __init__(self, quiet: bool = False, stream=None, enabled: bool | None = None,
                 heartbeat_s: float | None = None):
        self.stream = stream or sys.stderr
        tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        if enabled is None:
            enabled = not quiet and tty
            if heartbeat_s is None and not quiet and not tty:
                heartbeat_s = HEARTBEAT_S
        self.enabled = bool(enabled) and not quiet
        self.start = time.perf_counter()
        self.status: Bar | None = None
        self.bars: list[Bar] = []
        self._last = "starting"
        self._counts: dict = {}                 # heartbeat mode: label -> [n, total] of open bars
        self._beat = None
        if heartbeat_s and not quiet:
            self._start_heartbeat(float(heartbeat_s))

    def _start_heartbeat(self, every: float) -> None:
        import threading
        stop = threading.Event()

        def beat():
            while not stop.wait(every):
                bars = ", ".join(f"{label} {n}/{total}" if total else f"{label} {n}"
                                 for label, (n, total) in list(self._counts.items()))
                line = f"[{time.perf_counter() - self.start:6.1f}s] still running: {self._last}"
                try:
                    print(line + (f" ({bars})" if bars else ""), file=self.stream, flush=True)
                except (OSError, ValueError):
                    return
        self._beat = stop
        threading.Thread(target=beat, name="specverify-heartbeat", daemon=True).start()

    def _open(self, **kw) -> Bar:
        size = shutil.get_terminal_size(FALLBACK_SIZE)
        return Bar(file=self.stream, leave=False, ncols=size.columns - 1, nrows=size.lines, mininterval=MIN_REDRAW_S,
                   ascii=BAR_CHARS, **kw)

    # -- the old interface: a status message --------------------------------------------------------
    def __call__(self, message: str) -> None:
        self._last = message
        if not self.enabled:
            return
        line = f"[{time.perf_counter() - self.start:6.1f}s] {message}"
        if self.status is None:
            self.status = self._open(bar_format="{desc}", desc=line)
        else:
            self.status.set_description_str(line)

    def bar(self, total: int | None, label: str) -> "Bar | _NullBar":
        if not self.enabled:
            if self._beat is None:
                return _NullBar()
            return _CountingBar(self._counts, label, total)
        total = None if total is None else max(0, int(total))
        b = self._open(total=total, desc=label, bar_format=BAR_FORMAT if total else COUNT_FORMAT)
        self.bars.append(b)
        return b

    def done(self) -> None:
        """Clear the lines (call once at the end of a command)."""
        for b in [*self.bars, self.status]:
            if b is not None:
                b.close()
        self.bars.clear()
        self.status = None
        if self._beat is not None:
            self._beat.set()
            self._beat = None


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


class _CountingBar(_NullBar):
    """A bar in heartbeat mode: draws nothing, keeps its count for the heartbeat line."""

    def __init__(self, counts: dict, label: str, total):
        self._counts, self._label = counts, label
        counts[label] = [0, total]

    def advance(self, n: int = 1, note: str | None = None) -> None:
        entry = self._counts.get(self._label)
        if entry is not None:
            entry[0] += n

    def close(self) -> None:
        self._counts.pop(self._label, None)

    def __exit__(self, *exc):
        self.close()
