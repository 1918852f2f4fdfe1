"""The Ray executor (issue 31): `--executor ray[:ADDRESS]` gives the rows of the local executor, an actor
lost mid-audit is run again (or named in one line), a missing ray or an unreachable cluster is exit 2
before any work.

The cluster tests start a two-node cluster on 127.0.0.1 (a head and a second node joining it, each
`ray start --block` with ports of its own, one CPU each: two adapter actors), bound in time and ended
by killing the process groups this module started (never `ray stop`, which ends every Ray on the host).
Ray 2.60's GCS and raylet listen on every interface whatever --node-ip-address says, so the cluster and
the audits that use it run in a network namespace of their own (`unshare -n`, entered with `nsenter`)
whose only interface is its loopback: nothing the test starts can be reached from outside the host's
127.0.0.1 view of it. Without unshare/nsenter (or the right to use them) the cluster tests skip.
They are slow (a cluster start and three or four audits); `pytest -m slow tests/test_ray.py` runs them,
docs/ray.md has the measurement. Without ray they skip with the install line."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from specverify.cli import main
from specverify.executors import parse, reachable
from specverify.errors import InputError

HAVE_RAY = shutil.which("ray") is not None and __import__("importlib").util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="needs ray: pip install 'specverify[ray]'")
START_SECONDS = 120         # a node that is not up by then fails the fixture
STOP_SECONDS = 3            # a node's `ray start --block` has this long to end on SIGTERM, then is killed
REAP_SECONDS = 15           # what the nodes started has this long to exit after them
ROWS = ("name", "verdict", "statistic", "p_value", "dof", "n", "min_detectable_tv", "detail", "exact")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_executor_specs_are_checked_before_any_work():
    assert str(parse("local")) == "local" and str(parse("ray")) == "ray"
    assert parse("ray:127.0.0.1:6379", gpus_per_adapter=0.5).gpus_per_adapter == 0.5
    for bad in ("spark", "ray:", "ray:nohost", "ray:127.0.0.1:99999", "local:x"):
        with pytest.raises(InputError, match="--executor"):
            parse(bad)
    with pytest.raises(InputError, match="need --executor ray"):
        parse("local", gpus_per_adapter=1)
    with pytest.raises(InputError, match="--ray-gpus-per-adapter -1"):
        parse("ray", gpus_per_adapter=-1)


def test_without_ray_the_ray_executor_is_one_line_with_the_install_command(monkeypatch, capsys):
    from specverify import extras
    monkeypatch.setattr(extras, "missing", lambda modules: [m for m in modules if m == "ray"])
    assert main(["audit", "reference", "--executor", "ray"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["specverify: error: --executor ray needs ray, which is not installed: pip install "
                   "'specverify[ray]' (ray==2.60.0)"]


@needs_ray
def test_an_unreachable_cluster_is_exit_2_before_any_work(capsys, monkeypatch):
    port = free_port()                                  # nothing listens there
    built = []
    import specverify.audit as audit_module
    monkeypatch.setattr(audit_module, "open_adapter", lambda *a, **k: built.append(a))
    assert main(["audit", "reference", "--executor", f"ray:127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"specverify: error: --executor ray:127.0.0.1:{port}: no Ray cluster "
                                               f"answers at 127.0.0.1:{port} (")
    assert built == []                                  # no adapter was built


# ------------------------------------------------------------------------------------ the cluster

def _node(netns: list, args: list, env: dict) -> subprocess.Popen:
    return subprocess.Popen([*netns, "ray", "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1",
                             "--disable-usage-stats", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _ports(prefix: str = "") -> list:
    """Ports of one node's own services, each free now."""
    names = ["--node-manager-port", "--object-manager-port", "--runtime-env-agent-port", "--metrics-export-port",
             "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port"]
    out = []
    for name in names:
        out += [name, str(free_port())]
    low = free_port()
    return out + ["--min-worker-port", str(20000 + low % 20000), "--max-worker-port", str(20000 + low % 20000 + 60)]


def _in_namespace(namespace: str, but: int) -> list:
    """[(pid, command)] of the processes in the network namespace `namespace`, other than `but`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == but:
            continue
        try:
            if os.readlink(f"/proc/{entry}/ns/net") != namespace:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                out.append((int(entry), f.read().replace(b"\0", b" ").decode(errors="replace")[:120]))
        except OSError:             # gone meanwhile, or not ours to read
            continue
    return out


def _reap_namespace(namespace: str, holder: int) -> list:
    """After the nodes' process groups ended: what still runs in the test's namespace (a worker that
    left its node's process group), given REAP_SECONDS to exit, then killed one by one by pid. Returns
    what had to be killed, for the fixture to fail on."""
    deadline = time.monotonic() + REAP_SECONDS
    while (left := _in_namespace(namespace, holder)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(address, die_dir): a two-node Ray cluster on 127.0.0.1, ended after the module."""
    if not HAVE_RAY:
        pytest.skip("needs ray: pip install 'specverify[ray]'")
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        pytest.skip("needs unshare and nsenter (util-linux) for a loopback-only network namespace")
    holder = subprocess.Popen(["unshare", "-n", "--", "sh", "-c", "ip link set lo up && exec sleep 3600"],
                              start_new_session=True, stderr=subprocess.PIPE)
    time.sleep(1.0)
    if holder.poll() is not None:
        pytest.skip(f"cannot make a network namespace: {holder.stderr.read().decode()[:200]}")
    netns = ["nsenter", "-t", str(holder.pid), "-n", "--"]
    namespace = os.readlink(f"/proc/{holder.pid}/ns/net")       # 'net:[inode]': what the test started runs there
    left = []
    root = tmp_path_factory.mktemp("ray")
    die_dir = root / "die"
    die_dir.mkdir()
    # no token auth: the cluster lives in a namespace nothing else can reach (a real one: docs/ray.md)
    env = dict(os.environ, SPECVERIFY_TEST_DIE_DIR=str(die_dir), RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled",
               PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    temp = f"/tmp/sv-ray-{os.getpid()}"                  # a short folder: Ray's socket paths must stay short
    port = free_port()
    address = f"127.0.0.1:{port}"
    nodes = [_node(netns, ["--head", "--port", str(port), "--include-dashboard", "false", "--temp-dir", temp,
                    *_ports()], env)]
    try:
        deadline = time.monotonic() + START_SECONDS
        probe = [*netns, sys.executable, "-c", f"from specverify.executors import reachable; print(reachable({address!r}, 1.0))"]
        while subprocess.run(probe, capture_output=True, text=True, timeout=60).stdout.strip() != "None":
            assert time.monotonic() < deadline and nodes[0].poll() is None, "the head node did not start"
            time.sleep(1.0)
        nodes.append(_node(netns, ["--address", address, *_ports()], env))
        probe = ("import ray, time\nray.init(address=%r, log_to_driver=False, logging_level=40)\n"
                 "t = time.time()\nwhile sum(n['Alive'] for n in ray.nodes()) < 2 and time.time() - t < %d: time.sleep(1)\n"
                 "print(sum(n['Alive'] for n in ray.nodes()))\n") % (address, START_SECONDS)
        out = subprocess.run([*netns, sys.executable, "-c", probe], capture_output=True, text=True,
                             timeout=START_SECONDS + 60)
        assert out.stdout.strip().endswith("2"), out.stderr[-2000:]
        yield address, die_dir, netns
    finally:
        for node in reversed(nodes):
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGTERM)
        for node in nodes:
            try:
                node.wait(timeout=STOP_SECONDS)             # a node drains up to 30 s: not worth waiting for
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(timeout=30)
        left = _reap_namespace(namespace, holder.pid)
        shutil.rmtree(temp, ignore_errors=True)
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
    assert left == [], f"processes the cluster left in its namespace after its nodes ended: {left}"


def start_audit(tmp_path, name: str, *args, netns=()) -> tuple:
    """(process, json path) of `specverify audit ARGS` started in the background."""
    path = tmp_path / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if k != "SPECVERIFY_TEST_DIE_DIR"}
    process = subprocess.Popen([*netns, sys.executable, "-m", "specverify", "audit", *args, "--quiet", "--json",
                                str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return process, path


def finish_audit(started: tuple, timeout: float = 900) -> dict:
    """The JSON of an audit `start_audit` began (its stderr under "stderr"); killed if over `timeout`."""
    process, path = started
    try:
        _, err = process.communicate(timeout=timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.communicate()
    assert process.returncode in (0, 1), err[-3000:]
    result = json.loads(path.read_text())
    result["stderr"] = err
    return result


def audit_json(tmp_path, name: str, *args, netns=()) -> dict:
    return finish_audit(start_audit(tmp_path, name, *args, netns=netns))


def rows(result) -> list:
    return [tuple(json.dumps(c.get(k), sort_keys=True) for k in ROWS) for c in result["checks"]]


TINY = ["--checks", "endpoints,rare_event", "--seed", "3"]     # one check group, one rare_event shard a level


def test_a_tiny_audit_on_a_two_node_cluster_gives_the_local_rows(cluster, tmp_path):
    """CI's small version of the cluster tests (about 60 s on a loaded machine, with the cluster's start): the exact
    endpoint rows (a check-group task) and both rare_event rows (6,905 draws a level, a shard task each)
    on two adapter actors, one a node, give the local executor's rows; the fixture then ends both nodes
    and fails if anything they started is left in the test's namespace."""
    address, _, netns = cluster
    remote = start_audit(tmp_path, "ray", "reference", *TINY, "--executor", f"ray:{address}", netns=netns)
    local = start_audit(tmp_path, "local", "reference", *TINY, "--jobs", "1")     # side by side: most of a
    remote, local = finish_audit(remote, 300), finish_audit(local, 300)          # Ray run is waiting for actors
    assert "executor" not in local
    where = remote["executor"]          # the three tasks ran on the cluster's two adapter actors, one a node
    assert where["name"] == f"ray:{address}" and where["actors"] == 2 and where["tasks"] == 3
    assert len(where["tasks_per_node"]) == 2 and sum(where["tasks_per_node"].values()) == 3
    assert local["verdict"] == remote["verdict"] == "pass" and remote["errors"] == []
    assert rows(local) == rows(remote) and len(rows(local)) > 10
    rare = {c["name"]: c for c in remote["checks"] if "rare_event" in c["name"]}
    assert sorted(rare) == ["engine.rare_event[toy V=4 L=4]", "seeded.rare_event[V=16 kappa=0,2]"]
    assert all(c["n"] == 6905 and c["data"]["events"] == 0 for c in rare.values())


SMALL = ["--checks", "endpoints,composition,rng_discipline,reproducibility,rare_event", "--samples", "2000",
         "--seed", "7"]


@pytest.mark.slow
def test_reference_on_a_two_node_cluster_gives_the_local_rows(cluster, tmp_path):
    address, _, netns = cluster
    local = audit_json(tmp_path, "local", "reference", *SMALL, "--jobs", "1")
    remote = audit_json(tmp_path, "ray", "reference", *SMALL, "--executor", f"ray:{address}", netns=netns)
    assert local["verdict"] == remote["verdict"] == "pass" and remote["errors"] == []
    assert rows(local) == rows(remote) and len(rows(local)) > 20
    assert {c["name"] for c in remote["checks"]} >= {"seeded.rare_event[V=16 kappa=0,2]", "engine.rare_event[toy V=4 L=4]"}


SHARDED = ["--checks", "rare_event", "--rare-rate", "3e-6", "--seed", "2"]      # 2,302,582 draws: three shards


@pytest.mark.slow
def test_an_actor_killed_mid_audit_is_run_again_and_counted_once(cluster, tmp_path):
    address, die_dir, netns = cluster
    for f in die_dir.glob("died.*"):
        f.unlink()
    (die_dir / "times").write_text("1")
    spec = "tests/plugins/dies_in_ray.py:DiesInRay"
    local = audit_json(tmp_path, "local", spec, *SHARDED)
    remote = audit_json(tmp_path, "ray", spec, *SHARDED, "--executor", f"ray:{address}", netns=netns)
    assert sorted(p.name for p in die_dir.glob("died.*")) == ["died.0"]      # one actor was killed
    assert len(remote["errors"]) == 1 and remote["errors"][0].startswith("rare_event seeded shard ")
    assert "its adapter actor was lost" in remote["errors"][0]
    assert rows(local) == rows(remote)
    row = remote["checks"][0]
    assert row["n"] == 2_302_582 and row["data"]["events"] == 0 and row["data"]["shards"] == 3


@pytest.mark.slow
def test_a_shard_whose_actor_is_lost_twice_is_one_line_naming_it(cluster, tmp_path):
    address, die_dir, netns = cluster
    for f in die_dir.glob("died.*"):
        f.unlink()
    (die_dir / "times").write_text("8")                # more deaths than tries: some shard loses twice
    path = tmp_path / "out.json"
    env = {k: v for k, v in os.environ.items() if k != "SPECVERIFY_TEST_DIE_DIR"}
    out = subprocess.run([*netns, sys.executable, "-m", "specverify", "audit", "tests/plugins/dies_in_ray.py:DiesInRay",
                          *SHARDED, "--executor", f"ray:{address}", "--json", str(path)],
                         capture_output=True, text=True, timeout=900, env=env)
    (die_dir / "times").write_text("0")
    assert out.returncode == 2 and not path.exists()
    # Ray's C++ core warns on stderr that it finds no external route from inside the namespace
    err = [line for line in out.stderr.strip().splitlines() if "] network_util.cc:" not in line]
    assert len(err) == 1 and err[0].startswith("specverify: error: rare_event seeded shard "), out.stderr[-2000:]
    assert "its adapter actor was lost 2 times, nothing of it was counted" in err[0]
