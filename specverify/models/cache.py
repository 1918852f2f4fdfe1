"""Where built models are kept, and how a model folder is written so that no reader sees half of it.

`root()` is the cache root: $SPECVERIFY_CACHE, else ~/.cache/specverify. Each model family keeps its
folders under a subfolder of it (`tiny-llama`, `openvino`, `vllm-cpu-engine`, ...).

`atomic_folder(target)` is the one way a folder is built: the caller writes into a fresh temporary
folder next to `target` (same file system), and only when the block ends without an error is it
renamed into place (`os.replace`), replacing an older `target`. A build that fails or is interrupted
leaves `target` as it was and no temporary folder behind.

`building(target)` serialises builders of one folder across processes (an exclusive `flock` on a lock
file beside it): a caller checks inside it whether `target` is already built, so two processes that
need the same model (two test workers, two audits) build it once and never replace a folder the other
is reading.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

ENV = "SPECVERIFY_CACHE"


def root() -> Path:
    """The cache root: $SPECVERIFY_CACHE, else ~/.cache/specverify."""
    return Path(os.environ.get(ENV) or Path.home() / ".cache" / "specverify")


@contextlib.contextmanager
def atomic_folder(target, built: str | None = None):
    """Yield a temporary folder next to `target`; on a clean exit it replaces `target` (see module).
    With `built`, the tool writes its result into the subfolder `built` of the temporary folder (beside
    whatever it staged there) and that subfolder becomes `target`."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.replace(tmp / built if built else tmp, target)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def building(target):
    """Hold the build lock of `target` (see module): an exclusive `flock` on `.<name>.lock` beside it,
    released when the block ends (or the process dies)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield target
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
