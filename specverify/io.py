"""Atomic file output: a result or report is either fully written or not there at all."""

from __future__ import annotations

import json
import os
import uuid

from specverify.format import json_safe


def umask_mode(mode: int = 0o666) -> int:
    """`mode` as the process's umask leaves it (what open() would create)."""
    mask = os.umask(0)
    os.umask(mask)
    return mode & ~mask


def write_atomic(path: str, data: str | bytes) -> None:
    """Write `data` to `path` via a temporary file in the same folder and an atomic rename; the file
    gets the permissions open() would give it (the temporary file is made 0600). A failed write (full disk, a folder
    replaced by a file meanwhile, no permission) is an OutputError naming the path: one line, exit 2."""
    from specverify.errors import OutputError

    folder = os.path.dirname(os.path.abspath(path))
    mode = "wb" if isinstance(data, bytes) else "w"
    tmp = None
    try:
        os.makedirs(folder, exist_ok=True)
        # The name is chosen before the file exists, so a ^C at any bytecode after the create still finds
        # it in `tmp` and removes it (mkstemp creates, then returns: a ^C in between leaked the file).
        tmp = os.path.join(folder, f".tmp-{uuid.uuid4().hex}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, mode) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, umask_mode())
        os.replace(tmp, path)
    except OSError as exc:
        _remove(tmp)
        raise OutputError(f"{path}: could not be written ({exc.strerror or exc})") from None
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp) -> None:
    if tmp is not None:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def json_text(obj) -> str:
    """The JSON text of a result (NaN and infinities as null), as `write_json` writes it."""
    return json.dumps(json_safe(obj), indent=2, sort_keys=False, allow_nan=False) + "\n"


def write_json(path: str, obj) -> None:
    write_atomic(path, json_text(obj))


def check_writable(path: str, *, folder: bool = False) -> None:
    """InputError (one line) unless `path` can be written later: a file path that is not a folder
    (folder=False), or a folder path that is not a file; either way its nearest existing ancestor
    must take a new file (tried with a temporary one, removed at once). Checked before any work, so
    that a long run never ends in a traceback at the write."""
    from specverify.errors import InputError

    path = os.path.abspath(path)
    if not folder and os.path.isdir(path):
        raise InputError(f"{path} is a folder; give a file path")
    if folder and os.path.lexists(path) and not os.path.isdir(path):
        raise InputError(f"{path} exists and is not a folder")
    ancestor = path if folder and os.path.isdir(path) else os.path.dirname(path)
    while not os.path.lexists(ancestor):
        ancestor = os.path.dirname(ancestor)
    if not os.path.isdir(ancestor):
        raise InputError(f"{path}: {ancestor} is not a folder")
    probe = os.path.join(ancestor, f".specverify-probe-{uuid.uuid4().hex}")
    try:
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        finally:
            _remove(probe)
    except OSError as exc:
        raise InputError(f"{path}: cannot write in {ancestor} ({exc.strerror or exc})") from None
    if not folder and os.path.exists(path) and not os.access(path, os.W_OK):
        raise InputError(f"{path}: the file is not writable")
