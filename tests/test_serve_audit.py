"""Launchers of real servers (`specverify.server.engines`) and `specverify serve-audit`.

The lifecycle is tested with two children: `specverify serve` itself (the "specverify" engine), and a
stand-in that needs no torch: `python -m http.server` serving a folder whose v1/models file is a model
list (it answers GET /v1/models like an OpenAI server), started through `sh` with a `sleep` beside it in
its process group, so that a launcher that stopped only the leader would leave an orphan. Every test
checks the child and its group are gone afterwards: on success, on an exception inside, on a child
that never becomes ready, on SIGTERM and on ^C of the process that launched it.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from specverify.errors import InputError
from specverify.server import engines
from specverify.server.engines import base

pytest.importorskip("httpx")

WAIT_S = 60.0


def gone(pid: int) -> bool:
    """True when neither the process nor its process group exists any more."""
    for fn in (os.kill, os.killpg):
        try:
            fn(pid, 0)
        except ProcessLookupError:
            continue
        except PermissionError:
            return False
        return False
    return True


@dataclass(frozen=True)
class StandIn(base.EngineLauncher):
    """`sh -c 'sleep 600 & exec python -m http.server PORT'` in FOLDER: ready at once, a grandchild beside
    it. mode "never": it never listens (only sleeps); "exit": it prints a line and exits 3."""
    folder: str = ""
    mode: str = "ready"

    def command(self, python, model, port, spec, extra=()):
        if self.mode == "never":
            return ["sh", "-c", "sleep 600 & exec sleep 600"]
        if self.mode == "exit":
            return [python, "-c", "import sys; print('stand-in: cannot load the model'); sys.exit(3)"]
        return ["sh", "-c", f"sleep 600 & exec {python} -m http.server --bind 127.0.0.1 --directory {self.folder} {port}"]

    def version(self, python):
        return "0"


def stand_in(tmp_path: Path, mode: str = "ready") -> StandIn:
    (tmp_path / "www" / "v1").mkdir(parents=True, exist_ok=True)
    (tmp_path / "www" / "v1" / "models").write_text(json.dumps({"object": "list", "data": [{"id": "stand-in"}]}))
    return StandIn(name="stand-in", install_hint="(none)", spec_kinds=("none", "ngram:N"), ready_timeout_s=30.0,
                   folder=str(tmp_path / "www"), mode=mode)


def group_members(pgid: int) -> list:
    out = subprocess.run(["ps", "-e", "-o", "pid=,pgid="], capture_output=True, text=True).stdout.split("\n")
    return [int(p) for p, g in (ln.split() for ln in out if ln.strip()) if int(g) == pgid]


# ------------------------------------------------------------------------------ the launcher's parts

def test_spec_kinds_are_checked_with_the_kinds_in_the_message():
    launcher = engines.get("mlx")
    assert base.check_spec(launcher, "draft:/m") == ("draft", "/m")
    assert base.check_spec(launcher, "none") == ("none", None)
    with pytest.raises(InputError, match="takes none, draft:PATH"):
        base.check_spec(launcher, "ngram:3")
    with pytest.raises(InputError, match="write draft:PATH"):
        base.check_spec(launcher, "draft")
    ours = engines.get("specverify")
    assert base.check_spec(ours, "draft") == ("draft", None) and base.check_spec(ours, "draft:1") == ("draft", "1")
    with pytest.raises(InputError, match="takes no argument"):
        base.check_spec(ours, "none:2")


def test_unknown_engine_is_an_input_error_listing_the_engines():
    with pytest.raises(InputError, match="not one of .*mlx.*specverify"):
        engines.get("tgi")


def test_engine_commands_bind_loopback_and_carry_the_speculation():
    mlx = engines.get("mlx").command("/v/bin/python", "/m/t", 1234, "draft:/m/d", ("--num-draft-tokens", "4"))
    assert engines.get("mlx").served_name("/m/t") == "/m/t"
    assert mlx == ["/v/bin/python", "-m", "mlx_lm.server", "--model", "/m/t", "--host", "127.0.0.1", "--port", "1234",
                   "--draft-model", "/m/d", "--num-draft-tokens", "4"]
    assert "--draft-model" not in engines.get("mlx").command("p", "/m/t", 1, "none")
    llama = engines.get("llamacpp").command("p", "/m.gguf", 9, "lookup:5")
    assert llama[:3] == ["p", "-m", "llama_cpp.server"] and "127.0.0.1" in llama
    assert llama[-4:] == ["--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", "5"]
    ours = engines.get("specverify").command("p", "tiny:4,7", 7, "draft")
    assert ours[ours.index("--spec") + 1] == "draft" and ours[ours.index("--port") + 1] == "7"


def test_a_port_taken_is_one_line_before_anything_starts(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        port = s.getsockname()[1]
        with pytest.raises(InputError, match=f"port 127.0.0.1:{port} is already taken"):
            with engines.launched(stand_in(tmp_path), sys.executable, "m", log=tmp_path / "x.log", port=port):
                pass
    assert not (tmp_path / "x.log").exists()


# ------------------------------------------------------------------------------ lifecycle (stand-in)

def test_ready_child_is_yielded_then_its_whole_group_is_stopped(tmp_path):
    import httpx
    with engines.launched(stand_in(tmp_path), sys.executable, "m", log=tmp_path / "c.log") as srv:
        assert srv.url.startswith("http://127.0.0.1:") and srv.models == ["stand-in"]
        assert httpx.get(srv.url + "/models").json()["data"][0]["id"] == "stand-in"
        assert len(group_members(srv.pid)) >= 2            # the server and the sleep beside it
        pid = srv.pid
    assert gone(pid) and group_members(pid) == []


def test_an_exception_inside_still_reaps_the_group(tmp_path):
    with pytest.raises(RuntimeError, match="inside"):
        with engines.launched(stand_in(tmp_path), sys.executable, "m", log=tmp_path / "c.log") as srv:
            pid = srv.pid
            raise RuntimeError("inside")
    assert gone(pid)


def test_a_child_that_never_becomes_ready_is_one_line_and_reaped(tmp_path, monkeypatch):
    spawned = []
    real = subprocess.Popen

    def popen(*a, **k):
        spawned.append(real(*a, **k))
        return spawned[-1]

    monkeypatch.setattr(base.subprocess, "Popen", popen)
    t = time.monotonic()
    with pytest.raises(base.LaunchError, match=r"did not answer GET .*/v1/models within 1.5 s"):
        with engines.launched(stand_in(tmp_path, "never"), sys.executable, "m", log=tmp_path / "c.log",
                              ready_timeout_s=1.5):
            pass
    assert time.monotonic() - t < 1.5 + base.STOP_GRACE_S
    assert gone(spawned[0].pid) and spawned[0].returncode is not None


def test_a_child_that_exits_is_one_line_with_its_code_and_last_log_line(tmp_path):
    with pytest.raises(base.LaunchError, match=r"exited with code 3 .*cannot load the model"):
        with engines.launched(stand_in(tmp_path, "exit"), sys.executable, "m", log=tmp_path / "c.log"):
            pass


SCRIPT = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    sys.path.insert(0, {tests!r})
    from test_serve_audit import stand_in
    from specverify.server import engines
    tmp = Path({tmp!r})
    launcher = stand_in(tmp) if {kind!r} == "stand-in" else engines.get("specverify")
    model = "m" if {kind!r} == "stand-in" else "tiny:4,7"
    spec = "none" if {kind!r} == "stand-in" else "draft"
    with engines.launched(launcher, sys.executable, model, spec, log=tmp / "child.log") as srv:
        (tmp / "pid").write_text(str(srv.pid))
        time.sleep(600)
""")


@pytest.mark.parametrize("kind,sig", [("stand-in", signal.SIGTERM), ("stand-in", signal.SIGINT),
                                      ("specverify", signal.SIGTERM)])
def test_sigterm_and_ctrl_c_of_the_launching_process_reap_the_server(tmp_path, kind, sig):
    """The launching process is killed (SIGTERM) or interrupted (SIGINT, a ^C); the server it launched
    (our `specverify serve` too) and its whole process group are gone once it has exited."""
    script = SCRIPT.format(tests=str(Path(__file__).parent), tmp=str(tmp_path), kind=kind)
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + WAIT_S * 3
        while not (tmp_path / "pid").exists():
            assert proc.poll() is None, "the launching process died before the server was ready"
            assert time.monotonic() < deadline, "the server was not ready in time"
            time.sleep(0.1)
        child = int((tmp_path / "pid").read_text())
        assert not gone(child)
        proc.send_signal(sig)
        proc.wait(WAIT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert gone(child), f"server {child} outlived the launching process"


# ------------------------------------------------------------------------------ serve-audit (the CLI)

def test_cli_bad_input_is_one_line_exit_2(tmp_path, capsys):
    from specverify.cli import main
    for argv, message in [
        (["serve-audit", "tgi", "--python", sys.executable, "--model", "m", "--spec", "none"], "engine 'tgi'"),
        (["serve-audit", "mlx", "--python", sys.executable, "--model", "m", "--spec", "ngram:3"], "takes none, draft:PATH"),
        (["serve-audit", "specverify", "--python", str(tmp_path / "nope"), "--model", "tiny:4,7", "--spec", "draft"],
         "not an executable file"),
        (["serve-audit", "specverify", "--python", sys.executable, "--model", "tiny:4,7", "--spec", "none", "--plain"],
         "both servers would be plain"),
    ]:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], err


def test_cli_a_server_that_never_becomes_ready_is_exit_2_and_reaped(tmp_path, monkeypatch, capsys):
    from specverify.cli import main
    monkeypatch.setitem(engines.ENGINES, "stand-in", stand_in(tmp_path, "never"))
    spawned = []
    real = subprocess.Popen
    monkeypatch.setattr(base.subprocess, "Popen", lambda *a, **k: spawned.append(real(*a, **k)) or spawned[-1])
    rc = main(["serve-audit", "stand-in", "--python", sys.executable, "--model", "m", "--spec", "ngram:2",
               "--ready-timeout", "1", "--out", str(tmp_path / "report")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "did not answer" in err[0]
    assert spawned and all(gone(p.pid) for p in spawned)
    assert not (tmp_path / "report").exists()


@pytest.mark.slow
def test_serve_audit_of_our_server_passes_and_writes_the_report(tmp_path, capsys):
    """`specverify serve-audit specverify --checks server` end to end (about a minute on 2 shared cores):
    both servers launched, the four server rows and nothing else run, every one PASS (exact server; Holm at alpha 1e-3, seeds fixed), the report holds
    the commands and the logs, and no child is left."""
    from specverify.cli import main
    out = tmp_path / "report"
    rc = main(["serve-audit", "specverify", "--python", sys.executable, "--model", "tiny:4,7", "--spec", "draft",
               "--plain", "--samples", "10000", "--checks", "server", "--out", str(out), "-q"])
    assert rc == 0, capsys.readouterr()
    launch = json.loads((out / "launch.json").read_text())
    assert launch["spec"]["argv"][launch["spec"]["argv"].index("--spec") + 1] == "draft"
    assert launch["plain"]["argv"][launch["plain"]["argv"].index("--spec") + 1] == "none"
    assert "listening on" in (out / "logs" / "spec.log").read_text()
    audit = json.loads((out / "audit.json").read_text())
    verdicts = {c["name"].split("[")[0]: c["verdict"] for c in audit["checks"]}
    assert set(verdicts) == {"server.greedy_bitwise", "server.needle", "server.law", "server.spec_vs_plain"}
    assert set(verdicts.values()) == {"pass"}
    assert "```sh" in (out / "README.md").read_text()


@pytest.mark.slow
def test_serve_audit_of_the_broken_server_fails_the_law(tmp_path, capsys):
    """The negative control through the launcher: --engine-args passes `--variant recovered-from-p` to
    both servers; server.law fails (p ~1e-26 at this budget in tests/test_server.py)."""
    from specverify.cli import main
    rc = main(["serve-audit", "specverify", "--python", sys.executable, "--model", "tiny:4,7", "--spec", "draft",
               "--engine-args", "--variant recovered-from-p", "--samples", "20000", "--no-report"])
    out = capsys.readouterr().out
    assert rc == 1, out
    assert any(line.startswith("server.law[") and "FAIL" in line for line in out.splitlines()), out


def test_transformers_lookup_is_set_in_a_copy_of_the_folders_generation_config(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / "generation_config.json").write_text(json.dumps({"do_sample": True, "prompt_lookup_num_tokens": 9}))
    launcher = engines.get("transformers")
    spec_dir = Path(launcher.prepare(str(folder), "lookup:3", tmp_path / "spec-model"))
    plain_dir = Path(launcher.prepare(str(folder), "none", tmp_path / "plain-model"))
    assert json.loads((spec_dir / "generation_config.json").read_text()) == {"do_sample": True,
                                                                             "prompt_lookup_num_tokens": 3}
    assert json.loads((plain_dir / "generation_config.json").read_text()) == {"do_sample": True}
    assert (spec_dir / "model.safetensors").is_symlink() and (spec_dir / "model.safetensors").read_bytes() == b"weights"
    assert json.loads((folder / "generation_config.json").read_text())["prompt_lookup_num_tokens"] == 9   # untouched
    with pytest.raises(InputError, match="takes a transformers folder"):
        launcher.prepare(str(tmp_path), "none", tmp_path / "x")
