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
import uuid
from contextlib import contextmanager

from specverify.errors import InputError, OutputError

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


def _written(folder: str) -> set:
    """The files (relative paths) under `folder`, the marker left out."""
    out = set()
    for root, _, files in os.walk(folder):
        for name in files:
            rel = os.path.relpath(os.path.join(root, name), folder)
            if rel != MARKER:
                out.add(rel.replace(os.sep, "/"))
    return out


def check_replaceable(path: str) -> None:
    """InputError unless `path` is absent, an empty folder, or a folder we wrote before and nobody has
    added a file to since (the marker lists what we wrote: a user's file inside an earlier report is
    never deleted silently)."""
    if not os.path.lexists(path):
        return
    if not os.path.isdir(path) or os.path.islink(path):
        raise InputError(f"{path} exists and is not a folder; choose another output path")
    if not os.listdir(path):
        return
    marker = os.path.join(path, MARKER)
    if not os.path.exists(marker):
        raise InputError(f"{path} is a non-empty folder that is not a specverify report; refusing to replace it")
    try:
        with open(marker, encoding="utf-8", errors="replace") as f:
            listed = f.read().splitlines()[1:]
    except OSError as exc:
        raise InputError(f"{path}: cannot read its {MARKER} ({exc.strerror or exc})") from None
    if listed:                           # markers before the manifest list nothing: nothing to compare
        added = sorted(_written(path) - set(listed))
        if added:
            more = f" and {len(added) - 1} more file(s)" if len(added) > 1 else ""
            raise InputError(f"{path} is an earlier report that now also holds {added[0]!r}{more}, not written by "
                             "specverify; move it or choose another output folder")


STAGING = ".{base}.tmp-{pid}-"         # a staging folder's name: its owner's pid, so a later run can
                                        # remove one whose owner was killed


def _remove_stale(parent: str, base: str) -> None:
    """Remove staging folders of `base` left by runs that were killed (their owner pid is gone)."""
    head = f".{base}.tmp-"
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        if not name.startswith(head):
            continue
        pid = name[len(head):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(os.path.join(parent, name), ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def atomic_dir(path: str, kind: str = "report"):
    """Yield a fresh temporary folder; on normal exit it replaces `path` (see the module docstring). A
    folder that cannot be made or written (no permission, a full disk, a folder replaced by a file
    meanwhile) is an OutputError naming `path`: one line, exit 2."""
    path = os.path.abspath(path)
    check_replaceable(path)
    parent, base = os.path.split(path)
    try:
        os.makedirs(parent, exist_ok=True)
        _remove_stale(parent, base)
    except OSError as exc:
        raise OutputError(f"{path}: the report folder cannot be written ({exc.strerror or exc})") from None
    # The name is chosen before the folder exists and the folder is made inside the try below, so a ^C
    # landing anywhere after the mkdir removes it (mkdtemp makes the folder and then returns: a ^C
    # between the two left a staging folder behind, seen once in CI).
    tmp = os.path.join(parent, STAGING.format(base=base, pid=os.getpid()) + uuid.uuid4().hex[:12])
    try:
        try:
            os.mkdir(tmp, 0o700)
        except OSError as exc:
            raise OutputError(f"{path}: the report folder cannot be written ({exc.strerror or exc})") from None
        yield tmp
        with open(os.path.join(tmp, MARKER), "w") as f:
            f.write(f"{kind}\n" + "".join(f"{rel}\n" for rel in sorted(_written(tmp))))
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
    except OSError as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        raise OutputError(f"{path}: the report could not be written ({exc.strerror or exc})") from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
