"""Atomic file output: a result or report is either fully written or not there at all."""

from __future__ import annotations

import json
import os
import tempfile

from specverify.format import json_safe


def write_atomic(path: str, data: str | bytes) -> None:
    """Write `data` to `path` via a temporary file in the same folder and an atomic rename."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    mode = "wb" if isinstance(data, bytes) else "w"
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=folder)
    try:
        with os.fdopen(fd, mode) as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def json_text(obj) -> str:
    """The JSON text of a result (NaN and infinities as null), as `write_json` writes it."""
    return json.dumps(json_safe(obj), indent=2, sort_keys=False, allow_nan=False) + "\n"


def write_json(path: str, obj) -> None:
    write_atomic(path, json_text(obj))
