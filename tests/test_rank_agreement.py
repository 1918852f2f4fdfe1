"""Rank agreement under torch.distributed (gloo, world sizes 2 and 4, ranks started by the harness):
the reference sampler and our engine's sampler emit the same tokens on every rank; the two zoo
mutants -- an unsynchronised generator per rank, a rank-dependent reduction order before the argmax --
fail, and the row names the call, the request and both ranks' tokens. The check is exact: no false
alarm is possible for an implementation whose tokens do not depend on the rank."""

import os
import subprocess
import sys

import pytest

from specverify.adapters.reference import ReferenceEngine
from specverify.adapters.specverify_engine import SpecverifyEngine
from specverify.audit import Context, run_audit
from specverify.checks import rank_agreement
from specverify.errors import AdapterError
from specverify.ranks import run_ranks
from specverify.zoo import TARGETS, make
from specverify.zoo.ranks import rank_and_world


def rows_of(engine, factory=None):
    result = run_audit(engine, Context(), ["rank_agreement"], factory=factory)
    return result, {r.name: r for r in result.checks if r.check == "rank_agreement"}


@pytest.mark.parametrize("engine", [ReferenceEngine, SpecverifyEngine])
def test_exact_samplers_agree_on_every_rank(engine):
    result, rows = rows_of(engine(), engine)
    assert set(rows) == {"rank.agreement[world=2]", "rank.agreement[world=4]"}
    assert all(r.verdict == "pass" and r.exact for r in rows.values()), [r.detail for r in rows.values()]
    assert rows["rank.agreement[world=4]"].n == rank_agreement.CALLS * rank_agreement.B * 3
    assert result.verdict == "pass"


@pytest.mark.parametrize("name, kind", [("rank-own-generator", "random"), ("rank-order-reduce", "greedy")])
def test_both_mutants_fail_at_both_world_sizes(name, kind):
    assert TARGETS[name] == ("rank_agreement",)
    result, rows = rows_of(make(name), lambda: make(name))
    assert result.verdict == "fail" and result.deviation["kind"] == "ranks-disagree"
    for world in rank_agreement.WORLD_SIZES:
        r = rows[f"rank.agreement[world={world}]"]
        assert r.verdict == "fail" and f"({kind})" in r.detail and r.data["rank0"] != r.data["other"]
        assert r.data["rank"] >= 1 and "differ from rank 0" in r.detail


def test_mutants_are_exact_on_one_process():
    assert rank_and_world() == (0, 1)
    batches, seeds = rank_agreement.problems(Context().rng("rank_agreement"))
    ref = ReferenceEngine()
    for name in ("rank-own-generator", "rank-order-reduce"):
        m = make(name)
        assert all((m.verify_seeded(b, seeds) == ReferenceEngine().verify_seeded(b, seeds)).all() for b in batches[:1])
    assert ref.verify_seeded(batches[0], seeds).shape[0] == rank_agreement.B


def _raise_on_rank_1(adapter):
    import torch.distributed as dist
    if dist.get_rank() == 1:
        raise ValueError("rank one is broken")
    return dist.get_world_size()


def _world(adapter):
    import os

    import torch.distributed as dist
    return dist.get_rank(), dist.get_world_size(), os.environ["RANK"], os.environ["WORLD_SIZE"]


def test_the_harness_starts_the_groups_and_names_a_failing_rank():
    got = run_ranks(("name", "reference"), _world, (), (2, 4), timeout=120, what="t")
    assert got[4] == [(r, 4, str(r), "4") for r in range(4)] and got[2] == [(r, 2, str(r), "2") for r in range(2)]
    with pytest.raises(AdapterError, match=r"^t: rank 1 of 2 raised ValueError: rank one is broken$"):
        run_ranks(("name", "reference"), _raise_on_rank_1, (), (2,), timeout=120, what="t")


def _addresses(adapter):
    import os

    import psutil
    return os.environ.get("GLOO_SOCKET_IFNAME"), sorted({c.laddr.ip for c in psutil.Process().net_connections("inet")})


def test_ranks_listen_and_connect_on_loopback_only():
    # gloo bound the address the host name resolves to (seen non-loopback where the host name maps there)
    import ipaddress
    pytest.importorskip("psutil")
    got = run_ranks(("name", "reference"), _addresses, (), (2,), timeout=120, what="t")
    for ifname, ips in got[2]:
        assert ifname and ifname.startswith("lo"), ifname
        assert ips and all(ipaddress.ip_address(ip).is_loopback for ip in ips), ips


def test_an_adapter_that_cannot_be_rebuilt_is_not_covered():
    class Local(ReferenceEngine):
        pass
    result = run_audit(Local(), Context(samples=2000), ["greedy", "rank_agreement"])
    assert "rank_agreement" in result.not_covered and "cannot be rebuilt" in result.not_covered["rank_agreement"]


def _group(pgid: int) -> list[int]:
    """The live processes of a process group (from /proc)."""
    pids = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == pgid and fields[0] != "Z":
                pids.append(int(entry))
    return pids


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="no /proc to list a process group with")
def test_no_rank_process_outlives_the_audit():
    """The rank fork server and its ranks end with the audit, not a second or two after it."""
    proc = subprocess.Popen([sys.executable, "-m", "specverify", "audit", "reference", "--checks", "rank_agreement",
                             "--jobs", "1", "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        left = _group(proc.pid)                   # the audit led its own group: what is left of it
        assert left == [], f"still running after the audit ended: {left}"
    finally:
        for pid in _group(proc.pid):
            os.kill(pid, 9)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="no /proc to list a process group with")
def test_an_audit_killed_while_the_fork_server_starts_leaves_no_rank_and_no_folder(tmp_path):
    """The audit SIGKILLed while the fork server still imports torch: the server then forks the rank it
    was asked for and cannot answer its pid. That rank, waiting for a second rank that never comes,
    ran for minutes with its folder; it must end with the server, and the folder go."""
    import json
    import pickle
    import tempfile
    import time

    from specverify import ranks
    tmp = tempfile.mkdtemp(prefix=ranks.RANKS_PREFIX)
    with open(os.path.join(tmp, "job.pkl"), "wb") as f:
        pickle.dump((list(sys.path), ("name", "reference"), __name__, "_world", ()), f)
    server = subprocess.Popen([sys.executable, "-c", ranks._SERVER_BOOT, json.dumps(sys.path)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True,
                              env={**os.environ, **ranks.RANK_ENV})
    try:
        server.stdin.write(json.dumps([tmp, 0, [2]]) + "\n")     # rank 0 of 2: it waits for rank 1
        server.stdin.flush()
        server.stdout.close()                                      # the audit is gone: no one reads the pid
        server.stdin.close()
        deadline = time.monotonic() + 120
        while (_group(server.pid) or os.path.exists(tmp)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _group(server.pid) == [] and not os.path.exists(tmp), (_group(server.pid), os.listdir(tmp))
    finally:
        for pid in _group(server.pid):
            os.kill(pid, 9)
        server.wait(10)
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
