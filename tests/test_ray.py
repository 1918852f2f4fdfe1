"""The Ray executor (issue 31): `--executor ray[:ADDRESS]` gives the rows of the local executor, an actor
lost mid-audit is run again (or named in one line), a missing ray or an unreachable cluster is exit 2
before any work.

The cluster tests share a two-node cluster on 127.0.0.1 (`specverify.executors.loopback`: a head and a
second node, one CPU each, so two adapter actors, one a node) in a network namespace whose only
interface is its loopback (Ray 2.60 listens on every interface whatever --node-ip-address says), bound
in time and ended by killing the process groups it started (never `ray stop`, which ends every Ray on
the host); the fixture fails if anything it started is left in the namespace. Without unshare/nsenter
(or the right to use them) the cluster tests skip, naming why; without ray, with the install line.
One of them is CI's small version (a tiny audit, about a minute with the cluster's start); the rest
are slow (`pytest -m slow tests/test_ray.py`). docs/ray.md has the measurement."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from specverify.cli import main
from specverify.executors import loopback, parse, reachable
from specverify.executors.loopback import free_port
from specverify.errors import InputError

HAVE_RAY = shutil.which("ray") is not None and __import__("importlib").util.find_spec("ray") is not None
needs_ray = pytest.mark.skipif(not HAVE_RAY, reason="needs ray: pip install 'specverify[ray]'")
ROWS = ("name", "verdict", "statistic", "p_value", "dof", "n", "min_detectable_tv", "detail", "exact")


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

@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """(address, die_dir, netns): a two-node Ray cluster on 127.0.0.1 in a loopback-only namespace
    (`specverify.executors.loopback`), ended after the module; fails if anything it started outlived it."""
    if not HAVE_RAY:
        pytest.skip("needs ray: pip install 'specverify[ray]'")
    die_dir = tmp_path_factory.mktemp("ray") / "die"
    die_dir.mkdir()
    env = dict(os.environ, SPECVERIFY_TEST_DIE_DIR=str(die_dir),
               PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    temp = f"/tmp/sv-ray-{os.getpid()}"                  # a short folder: Ray's socket paths must stay short
    try:
        with loopback.loopback_cluster(temp, nodes=2, cpus_per_node=1, env=env) as made:
            yield made.address, die_dir, made.netns
    except loopback.Unavailable as why:
        pytest.skip(str(why))
    assert made.left == [], f"processes the cluster left in its namespace after its nodes ended: {made.left}"


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
    """CI's small version of the cluster tests (52-84 s at load 11-16, with the cluster's start): the exact
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


DECISIVE = ["--checks", "marginal,endpoints", "--stop", "decisive", "--seed", "5"]


@pytest.mark.slow
@pytest.mark.parametrize("engine, verdict", [("reference", "pass"), ("lossy:threshold_acc=0.9", "fail")])
def test_a_decisive_audit_runs_whole_in_one_actor_with_the_local_rows(cluster, tmp_path, engine, verdict):
    """--stop decisive is not split (its rounds run one check after another on one adapter, as locally):
    on Ray it runs whole in one adapter actor, and gives the local rows and stopping record, for an
    exact rule (passes) and a lossy one (fails)."""
    address, _, netns = cluster
    local = audit_json(tmp_path, "local", engine, *DECISIVE)
    remote = audit_json(tmp_path, "ray", engine, *DECISIVE, "--executor", f"ray:{address}", netns=netns)
    assert local["verdict"] == remote["verdict"] == verdict and remote["errors"] == []
    assert rows(local) == rows(remote) and local["stop"] == remote["stop"] and local["stop"]["rounds"] >= 1
    assert remote["executor"]["actors"] == 1 and remote["executor"]["tasks"] == 1 and "executor" not in local
