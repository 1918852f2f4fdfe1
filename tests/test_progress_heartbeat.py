"""Progress when stderr is not a terminal: no bars, a heartbeat line every HEARTBEAT_S seconds that
names the last status and the open bars' counts, and nothing after done()."""

import io
import time

from specverify import progress as progress_mod
from specverify.progress import Progress


def test_a_pipe_gets_heartbeats_naming_the_last_status_and_bars():
    out = io.StringIO()                                   # not a terminal
    p = Progress(stream=out, heartbeat_s=0.05)
    p("greedy bitwise: invariant backend")
    with p.bar(10, "kappa sweep") as bar:
        bar.advance(3)
        time.sleep(0.3)
    p.done()
    lines = out.getvalue().splitlines()
    assert lines and all("still running: greedy bitwise: invariant backend" in ln for ln in lines)
    assert any("(kappa sweep 3/10)" in ln for ln in lines)
    n = len(lines)
    time.sleep(0.2)
    assert len(out.getvalue().splitlines()) == n           # done() stopped the heartbeat


def test_quiet_and_terminals_get_no_heartbeat(monkeypatch):
    monkeypatch.setattr(progress_mod, "HEARTBEAT_S", 0.05)
    quiet = io.StringIO()
    p = Progress(quiet=True, stream=quiet)
    p("x")
    time.sleep(0.2)
    p.done()
    assert quiet.getvalue() == ""
    forced_off = io.StringIO()
    p = Progress(stream=forced_off, enabled=False)        # explicit: neither bars nor heartbeat
    p("x")
    time.sleep(0.2)
    p.done()
    assert forced_off.getvalue() == ""


def test_the_default_pipe_heartbeat_is_the_module_constant(monkeypatch):
    monkeypatch.setattr(progress_mod, "HEARTBEAT_S", 0.05)
    out = io.StringIO()
    p = Progress(stream=out)
    p("loading")
    time.sleep(0.25)
    p.done()
    assert "still running: loading" in out.getvalue()
