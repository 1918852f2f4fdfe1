"""Failed writes (`specverify.io`): a full disk or a folder replaced by a file during a run is one line
and exit 2 (OutputError), never a traceback and exit 1 after an audit that passed; files written
follow the umask (mkstemp's 0600 did not)."""

import errno
import os
import stat

import pytest

from specverify.errors import OutputError
from specverify.io import write_atomic, write_json


def test_a_folder_replaced_by_a_file_is_an_output_error(tmp_path):
    (tmp_path / "out").write_text("a file where the folder was")
    with pytest.raises(OutputError, match="r.json: could not be written"):
        write_json(str(tmp_path / "out" / "r.json"), {"a": 1})


def test_a_full_disk_is_an_output_error_and_leaves_nothing(tmp_path, monkeypatch):
    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OutputError, match="No space left on device"):
        write_atomic(str(tmp_path / "r.json"), "x" * 100)
    assert os.listdir(tmp_path) == []


def test_written_files_follow_the_umask(tmp_path):
    old = os.umask(0o022)
    try:
        write_atomic(str(tmp_path / "r.json"), "{}")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "r.json").st_mode) == 0o644


def test_an_audit_whose_json_cannot_be_written_ends_in_one_line_exit_2(tmp_path, monkeypatch, capsys):
    from specverify.cli import main
    real = os.fsync

    def full(fd):
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith(".tmp-"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd)
    monkeypatch.setattr(os, "fsync", full)                  # the disk fills up while the audit runs
    code = main(["audit", "reference", "--samples", "2000", "--checks", "marginal", "--json",
                 str(tmp_path / "r.json"), "-q"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "No space left on device" in err, err


def test_a_ctrl_c_just_after_the_temporary_file_is_made_leaves_nothing(tmp_path, monkeypatch):
    """The ^C lands right after the create returns (mkstemp/mkdtemp used to create and then return, so
    an interrupt between the two leaked the temporary file or staging folder: seen once in CI)."""
    from specverify.render.atomic import atomic_dir
    real_open, real_mkdir = os.open, os.mkdir

    def open_then_interrupt(path, *a, **k):
        fd = real_open(path, *a, **k)
        os.close(fd)
        raise KeyboardInterrupt

    def mkdir_then_interrupt(path, *a, **k):
        real_mkdir(path, *a, **k)
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "open", open_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        write_atomic(str(tmp_path / "r.json"), "{}")
    assert os.listdir(tmp_path) == []
    monkeypatch.setattr(os, "open", real_open)
    monkeypatch.setattr(os, "mkdir", mkdir_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(str(tmp_path / "rep")):
            pass
    assert os.listdir(tmp_path) == []
