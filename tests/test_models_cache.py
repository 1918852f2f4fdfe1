"""The model cache's build lock: two processes that need the same folder build it once, and neither
replaces the folder while the other may be reading it (the test suite runs on two xdist workers)."""

import multiprocessing as mp
import time
from pathlib import Path

from specverify.models import cache


def _need(target: str, log: str, go) -> None:
    target = Path(target)
    go.wait()
    with cache.building(target):
        if (target / "done").exists():
            return
        with open(log, "a") as f:
            f.write("built\n")
        with cache.atomic_folder(target) as tmp:
            time.sleep(0.3)                       # a slow build: the other process arrives meanwhile
            (tmp / "done").write_text("x")


def test_two_processes_build_a_folder_once(tmp_path):
    ctx = mp.get_context("spawn")
    go = ctx.Event()
    log = tmp_path / "log"
    procs = [ctx.Process(target=_need, args=(str(tmp_path / "model"), str(log), go)) for _ in range(2)]
    for p in procs:
        p.start()
    go.set()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert log.read_text().splitlines() == ["built"]
    assert (tmp_path / "model" / "done").read_text() == "x"


def test_the_lock_is_released_when_the_block_raises(tmp_path):
    target = tmp_path / "model"
    try:
        with cache.building(target):
            raise RuntimeError("build failed")
    except RuntimeError:
        pass
    with cache.building(target):                  # would block forever if the lock were still held
        pass
