"""A Ray cluster of a few nodes on 127.0.0.1, in a network namespace whose only interface is its
loopback: for tests and measurements (tests/test_ray.py, reports/ray/two_node.py), never for real work.

    with loopback_cluster("/tmp/x", nodes=2, env={...}) as cluster:
        subprocess.run([*cluster.netns, "specverify", "audit", "reference", "--executor", f"ray:{cluster.address}"])
    assert cluster.left == []           # nothing the nodes started outlived them

Each node is a `ray start --block` with ports of its own and `cpus_per_node` CPUs (one adapter actor
each at the default --ray-cpus-per-adapter 1), started in a process group of its own. Ray 2.60's GCS
and raylet listen on every interface whatever --node-ip-address says, so the nodes (and whatever uses
them: run it under `cluster.netns`) live in a namespace made by `unshare -n` and entered with
`nsenter`: nothing they open can be reached from outside this host's 127.0.0.1 view of it. No token
auth: nothing else can reach the namespace (a real cluster: docs/ray.md).

The end: SIGTERM to each node's process group, STOP_SECONDS to end, then SIGKILL (never `ray stop`,
which ends every Ray on the host); what still runs in the namespace after that (a worker that left its
node's process group) gets REAP_SECONDS, is then killed by pid, and is listed in `cluster.left`.
`Unavailable` (with the reason) where unshare/nsenter or the right to use them are missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

START_SECONDS = 120         # a node that is not up by then ends the cluster with RuntimeError
STOP_SECONDS = 3            # a node's `ray start --block` has this long to end on SIGTERM, then is killed
REAP_SECONDS = 15           # what the nodes started has this long to exit after them
HOLDER_SECONDS = 1.0        # the namespace's holder process has this long to fail (no permission)
WORKER_PORTS = 60           # worker ports a node may use
NODE_PORTS = ("--node-manager-port", "--object-manager-port", "--runtime-env-agent-port", "--metrics-export-port",
              "--dashboard-agent-listen-port", "--dashboard-agent-grpc-port")


class Unavailable(RuntimeError):
    """This host cannot make the namespace (the reason is the message)."""


@dataclass
class LoopbackCluster:
    address: str                    # the head's GCS, 127.0.0.1:PORT (inside the namespace)
    netns: list                     # the command prefix that runs a command in the namespace
    namespace: str                  # the namespace's /proc/PID/ns/net link, 'net:[inode]'
    left: list = field(default_factory=list)    # [(pid, command)] killed at the end (should stay empty)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ports() -> list:
    """Ports of one node's own services, each free now (in the host's view; the namespace has no other user)."""
    out = []
    for name in NODE_PORTS:
        out += [name, str(free_port())]
    low = 20000 + free_port() % 20000
    return out + ["--min-worker-port", str(low), "--max-worker-port", str(low + WORKER_PORTS)]


def _node(netns: list, cpus: int, args: list, env: dict) -> subprocess.Popen:
    return subprocess.Popen([*netns, "ray", "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus",
                             str(cpus), "--disable-usage-stats", *args], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def in_namespace(namespace: str, but: int) -> list:
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


def _reap(namespace: str, holder: int) -> list:
    """What still runs in the namespace after the nodes ended, given REAP_SECONDS, then killed by pid."""
    deadline = time.monotonic() + REAP_SECONDS
    while (left := in_namespace(namespace, holder)) and time.monotonic() < deadline:
        time.sleep(0.5)
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return left


def _alive_nodes(netns: list, address: str, want: int, env: dict) -> str:
    """Wait (up to START_SECONDS) until `want` nodes are alive; the last line the probe printed."""
    probe = ("import ray, time\nray.init(address=%r, log_to_driver=False, logging_level=40)\n"
             "t = time.time()\nwhile sum(n['Alive'] for n in ray.nodes()) < %d and time.time() - t < %d: time.sleep(1)\n"
             "print(sum(n['Alive'] for n in ray.nodes()))\n") % (address, want, START_SECONDS)
    out = subprocess.run([*netns, sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=START_SECONDS + 60, env=env)
    lines = out.stdout.strip().splitlines()
    if not lines or lines[-1] != str(want):
        raise RuntimeError(f"{want} Ray nodes did not come up: {out.stderr[-2000:]}")
    return lines[-1]


@contextlib.contextmanager
def loopback_cluster(temp: str, *, nodes: int = 2, cpus_per_node: int = 1, env: dict | None = None):
    """A `LoopbackCluster` of `nodes` nodes, ended on exit (module docstring). `temp`: Ray's temp folder
    (keep it short: Ray's socket paths must stay under 108 characters); `env`: the nodes' environment
    (their workers inherit it)."""
    if shutil.which("ray") is None:
        raise Unavailable("needs ray: pip install 'specverify[ray]'")
    if not (shutil.which("unshare") and shutil.which("nsenter")):
        raise Unavailable("needs unshare and nsenter (util-linux) for a loopback-only network namespace")
    holder = subprocess.Popen(["unshare", "-n", "--", "sh", "-c", "ip link set lo up && exec sleep 86400"],
                              start_new_session=True, stderr=subprocess.PIPE)
    time.sleep(HOLDER_SECONDS)
    if holder.poll() is not None:
        raise Unavailable(f"cannot make a network namespace: {holder.stderr.read().decode()[:200]}")
    netns = ["nsenter", "-t", str(holder.pid), "-n", "--"]
    cluster = LoopbackCluster("", netns, os.readlink(f"/proc/{holder.pid}/ns/net"))
    env = dict(os.environ if env is None else env, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    port = free_port()
    cluster.address = f"127.0.0.1:{port}"
    started = [_node(netns, cpus_per_node, ["--head", "--port", str(port), "--include-dashboard", "false",
                                            "--temp-dir", temp, *_ports()], env)]
    try:
        deadline = time.monotonic() + START_SECONDS
        probe = [*netns, sys.executable, "-c",
                 f"from specverify.executors import reachable; print(reachable({cluster.address!r}, 1.0))"]
        while subprocess.run(probe, capture_output=True, text=True, timeout=60, env=env).stdout.strip() != "None":
            if time.monotonic() > deadline or started[0].poll() is not None:
                raise RuntimeError("the head Ray node did not start")
            time.sleep(1.0)
        started += [_node(netns, cpus_per_node, ["--address", cluster.address, *_ports()], env)
                    for _ in range(nodes - 1)]
        _alive_nodes(netns, cluster.address, nodes, env)
        yield cluster
    finally:
        for node in reversed(started):
            if node.poll() is None:
                os.killpg(node.pid, signal.SIGTERM)
        for node in started:
            try:
                node.wait(timeout=STOP_SECONDS)             # a node drains up to 30 s: not worth waiting for
            except subprocess.TimeoutExpired:
                os.killpg(node.pid, signal.SIGKILL)
                node.wait(timeout=30)
        cluster.left = _reap(cluster.namespace, holder.pid)
        shutil.rmtree(temp, ignore_errors=True)
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
