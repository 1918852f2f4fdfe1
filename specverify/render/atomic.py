"""Write a whole folder atomically: build it in a temporary sibling folder, then swap it into place.

    with atomic_dir("reports/reference") as tmp:
        ...write every file under tmp...
    # now reports/reference is the new folder; on an exception or ^C it is untouched (old or absent)
    # and the temporary folder is gone

Replacing an existing folder uses Linux's renameat2(RENAME_EXCHANGE) when available (one atomic
swap, the old report then removed), else two renames (old -> aside, new -> in place; a reader can
see the path missing for an instant, never half-written). A folder is only replaced if it is empty
or carries the marker file this module writes (`.specverify-report`): `-o .` must never delete a
checkout.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import tempfile
import uuid
from contextlib import contextmanager

from specverify.errors import InputError

MARKER = ".specverify-report"
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2); False when the call is unavailable."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return rc == 0


def check_replaceable(path: str) -> None:
    """InputError unless `path` is absent, an empty folder, or a folder we wrote before."""
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path) or os.path.islink(path):
        raise InputError(f"{path} exists and is not a folder; choose another output path")
    if os.listdir(path) and not os.path.exists(os.path.join(path, MARKER)):
        raise InputError(f"{path} is a non-empty folder that is not a specverify report; refusing to replace it")


@contextmanager
def atomic_dir(path: str, kind: str = "report"):
    """Yield a fresh temporary folder; on normal exit it replaces `path` (see the module docstring)."""
    path = os.path.abspath(path)
    check_replaceable(path)
    parent, base = os.path.split(path)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{base}.tmp-", dir=parent)
    try:
        yield tmp
        with open(os.path.join(tmp, MARKER), "w") as f:
            f.write(f"{kind}\n")
        os.chmod(tmp, 0o755)                                       # mkdtemp makes it 0700
        check_replaceable(path)                                    # it may have appeared meanwhile
        if os.path.isdir(path):
            if not _exchange(tmp, path):                           # tmp <-> path, or two renames
                aside = os.path.join(parent, f".{base}.old-{uuid.uuid4().hex[:8]}")
                os.rename(path, aside)
                try:
                    os.rename(tmp, path)
                except BaseException:
                    os.rename(aside, path)
                    raise
                tmp = aside
            shutil.rmtree(tmp, ignore_errors=True)                 # the old report
        else:
            os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
