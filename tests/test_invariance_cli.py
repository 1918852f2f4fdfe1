"""`specverify invariance OPS`: torch's default fp32 linear fails with the first differing row and M,
our invariant and Triton (interpreted) backends pass, a user's ops from a file are checked the same
way, and every bad input is one line and exit 2."""

import json
import re
import os
import subprocess
import sys
import textwrap

import pytest

from specverify.kerneltools import op_invariance

USER_OPS = textwrap.dedent('''
    import torch
    from specverify.kerneltools.op_invariance import RowOp

    def good():
        return {"affine": RowOp("affine", lambda x: 2 * x + 1, (8,)),
                "rowsum": RowOp("rowsum", lambda x: x.sum(dim=1, keepdim=True), (5, 3))}

    def centred():                       # subtracts the launch's mean: depends on the neighbours
        return [RowOp("centred", lambda x: x - x.mean(dim=0), (8,))]

    def raises():
        raise RuntimeError("no GPU\\nsecond line")

    def not_ops():
        return 3

    def op_raises():
        return RowOp("boom", lambda x: x[:, 99], (4,))

    def _hog(x):
        return sum(range(10**15))        # one C call holding the GIL: ignores ^C and SIGTERM in-process

    def hangs():
        return RowOp("hog", _hog, (4,))

    def _segv(x):
        import ctypes
        ctypes.string_at(0)

    def segfaults():
        return RowOp("segv", _segv, (4,))

    def _exit3(x):
        import os
        os._exit(3)

    def exits():
        return RowOp("exit3", _exit3, (4,))

    def _sysexit(x):
        raise SystemExit(4)

    def system_exit():
        return RowOp("sysexit", _sysexit, (4,))

    def _chatty(x):
        print("chatter on stdout")
        return 2 * x

    def chatty():
        return RowOp("chatty", _chatty, (4,))
''')


def cli(*args, timeout=300):
    return subprocess.run([sys.executable, "-m", "specverify", "invariance", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ})


def one_line_exit_2(proc, needle):
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def user_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("ops") / "my_ops.py"
    path.write_text(USER_OPS)
    return str(path)


def test_torch_default_linear_fails_with_first_row_and_m(tmp_path):
    out = tmp_path / "r.json"
    proc = cli("torch-linear", "--sizes", "1..16", "--json", str(out), "--quiet")
    assert proc.returncode == 1, proc.stderr
    res = json.loads(out.read_text())
    assert res["verdict"] == "fail" and res["deviation"]["kind"] == op_invariance.BATCH_VARIANT
    (row,) = res["checks"]
    assert row["name"] == "invariance[torch.linear[576->960]]" and row["exact"] and row["verdict"] == "fail"
    first = row["data"]["first"]
    assert first["size"] >= 2 and first["max_abs_diff"] > 0 and row["data"]["diff_sizes"]
    assert f"first: row {first['row']} at position {first['position']} of a launch of M = {first['size']}" in row["detail"]


def test_invariant_backend_passes_every_m_up_to_64():
    proc = cli("invariant", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    res = json.loads(proc.stdout)
    assert res["verdict"] == "pass" and len(res["checks"]) == 4
    assert all(c["verdict"] == "pass" and c["data"]["sizes"][-1] == 64 and c["n"] == 4160 for c in res["checks"])


@pytest.mark.slow
def test_triton_backend_passes_interpreted():
    proc = cli("triton", "--sizes", "1..3,16,17,33,64", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    assert {c["verdict"] for c in json.loads(proc.stdout)["checks"]} == {"pass"}


def test_user_ops_from_a_file(user_file):
    good = cli(f"{user_file}:good", "--sizes", "1..64")
    assert good.returncode == 0 and "invariance[rowsum]" in good.stdout and "PASS" in good.stdout, good.stderr
    bad = cli(f"{user_file}:centred", "--sizes", "1..4")
    assert bad.returncode == 1 and "FAIL invariance[centred]" in bad.stdout
    assert "of a launch of M = 2" in bad.stdout           # M = 1 is each row alone: the first launch that can differ


@pytest.mark.parametrize("args, needle", [
    (["nope.module:factory"], "ops 'nope.module:factory': no module named 'nope'"),
    (["/no/such/file.py:f"], "no such file"),
    (["justaname"], "expected pkg.module:factory"),
    (["{file}:missing"], "has no attribute 'missing'"),
    (["{file}:raises"], "raises() raised RuntimeError: no GPU"),
    (["{file}:not_ops"], "the factory must return a RowOp"),
    (["{file}:op_raises"], "op 'boom' raised IndexError"),
    (["invariant", "--sizes", "0..4"], "--sizes '0..4': each size must be in [1, 4096]"),
    (["invariant", "--sizes", "a"], "expected sizes such as 1..64"),
    (["invariant", "--seed", "-1"], "--seed -1: must be an integer"),
    (["invariant", "--json", "/proc/x.json"], "/proc"),
])
def test_bad_input_is_one_line_and_exit_2(user_file, args, needle):
    one_line_exit_2(cli(*[a.format(file=user_file) for a in args]), needle)


@pytest.mark.parametrize("factory, needle", [
    ("hangs", "op 'hog': no answer within 3 s; the adapter process was killed"),
    ("segfaults", "op 'segv': the adapter process died of SIGSEGV"),
    ("exits", "op 'exit3': the adapter process exited with status 3"),
    ("system_exit", "op 'sysexit': raised SystemExit: 4"),
])
def test_an_op_that_hangs_or_dies_is_one_line_and_exit_2(user_file, factory, needle):
    # ran in-process: a GIL-holding op ignored ^C and SIGTERM with no timeout, a segfault, os._exit or
    # SystemExit ended the command silently (139/3/4, empty stderr)
    proc = cli(f"{user_file}:{factory}", "--sizes", "1..2", "--timeout", "3", timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and needle in lines[0] and "Traceback" not in proc.stderr, proc.stderr


def test_what_an_op_prints_never_reaches_json_on_stdout(user_file):
    proc = cli(f"{user_file}:chatty", "--sizes", "1..2", "--json", "-")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["verdict"] == "pass" and "chatter" not in proc.stdout


def test_help_names_the_ops_and_exit_codes():
    proc = cli("--help")
    assert proc.returncode == 0
    for word in ("torch-linear", "invariant", "triton", "pkg.module:factory", "RowOp", "exit codes"):
        assert word in proc.stdout


def test_a_deterministic_nan_is_invariant_and_a_launch_dependent_one_is_not():
    # torch.equal calls NaN != NaN: an op that returns the same NaN row every time read "depends on the launch"
    import torch
    from specverify.kerneltools.op_invariance import RowOp, check_op
    same = check_op(RowOp("nan", lambda x: torch.full_like(x, float("nan")), (4,)), sizes=(1, 2, 3))
    assert same.verdict == "pass", same.detail
    moves = check_op(RowOp("nan-after-1", lambda x: x if x.shape[0] == 1 else torch.full_like(x, float("nan")), (4,)),
                     sizes=(1, 2, 3))
    assert moves.verdict == "fail"


def test_an_op_returning_another_number_of_rows_is_an_adapter_error():
    import torch
    from specverify.errors import AdapterError
    from specverify.kerneltools.op_invariance import RowOp, check_op
    with pytest.raises(AdapterError, match=r"op 'extra': a launch of 1 row\(s\) returned \(2, 4\)"):
        check_op(RowOp("extra", lambda x: torch.cat([x, x[:1]]), (4,)), sizes=(1, 2))
    with pytest.raises(AdapterError, match="returned float"):
        check_op(RowOp("scalar", lambda x: 1.0, (4,)), sizes=(1, 2))


@pytest.mark.parametrize("op_kw, needle", [
    (dict(row_shape=8), "row_shape 8 must be a tuple of positive integers"),
    (dict(row_shape=(True,)), "row_shape (True,) must be a tuple"),
    (dict(row_shape=(0,)), "must be a tuple of positive integers"),
    (dict(row_shape=(1 << 30,)), "is too large"),
    (dict(row_shape=(4,), dtype="float32"), "dtype 'float32' must be a torch floating dtype"),
    (dict(row_shape=(4,), dtype=int), "must be a torch floating dtype"),
    (dict(row_shape=(4,), name=None), "an op's name must be a non-empty string"),
])
def test_bad_op_declarations_are_one_line_adapter_errors(op_kw, needle):
    from specverify.errors import AdapterError
    from specverify.kerneltools.op_invariance import RowOp, _ops_of
    kw = {"name": "op", "fn": lambda x: x, **op_kw}
    with pytest.raises(AdapterError, match=re.escape(needle)):
        _ops_of(RowOp(**kw), "f.py:ops")


def test_ctrl_c_ends_a_gil_holding_op_and_its_process(user_file):
    # in-process, an op holding the GIL ignored ^C and SIGTERM: now it runs in a worker the CLI kills
    import signal
    import time
    proc = subprocess.Popen([sys.executable, "-m", "specverify", "invariance", f"{user_file}:hangs", "--sizes", "1..2",
                             "--timeout", "300"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        children = []
        while time.monotonic() < deadline and not children:
            out = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
            children = [int(c) for c in out]
            time.sleep(0.2)
        assert children, "no worker started"
        time.sleep(8.0)                          # loaded, inside the op
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
        assert time.monotonic() - sent < 20.0    # the op hangs until --timeout 300: this shows ^C ended it
        assert proc.returncode == 130 and err.strip().endswith("specverify: interrupted"), err
        time.sleep(0.5)
        for pid in children:
            assert not os.path.exists(f"/proc/{pid}") or "zombie" in open(f"/proc/{pid}/status").read().lower()
    finally:
        proc.kill()
