"""The two-node overhead (issue 31): `python reports/ray/two_node.py [OUT.json] [AUDIT ARGS...]`.

In one run: a two-node Ray cluster on 127.0.0.1 in a loopback-only namespace
(`specverify.executors.loopback`, one CPU a node: two adapter actors), then the same audit
(`specverify audit reference` with AUDIT ARGS, default: the reference's default checks at the default
budget, seed 0) three times, one after the other: local with --jobs 2 (two adapter processes, as many
workers as the cluster has actors), on the cluster (--executor ray:ADDRESS), local with --jobs 1.
Each audit is a fresh `specverify` process, timed from its start to its exit (imports, adapter
start-up and, on Ray, connecting and the actors' start-up included). Records the wall times, the
ratios to the local runs, whether the rows are identical, the cluster's start time and the load average
before and after each step. The machine is shared: the ratio is the figure, not the seconds.
"""

import json
import os
import platform
import subprocess
import sys
import tempfile
import time

from specverify.executors import loopback
from specverify.io import write_json

ROWS = ("name", "verdict", "statistic", "p_value", "dof", "n", "min_detectable_tv", "detail", "exact")
DEFAULT_ARGS = ["--seed", "0"]
AUDIT_SECONDS = 1800        # one audit that takes longer ends the run


def rows(result: dict) -> list:
    return [tuple(json.dumps(c.get(k), sort_keys=True) for k in ROWS) for c in result["checks"]]


def audit(folder: str, name: str, args: list, prefix=()) -> dict:
    path = os.path.join(folder, f"{name}.json")
    load = os.getloadavg()
    start = time.perf_counter()
    out = subprocess.run([*prefix, sys.executable, "-m", "specverify", "audit", "reference", *args, "--quiet",
                          "--json", path], capture_output=True, text=True, timeout=AUDIT_SECONDS)
    wall = time.perf_counter() - start
    if out.returncode not in (0, 1):
        raise SystemExit(f"two_node: the {name} audit exited {out.returncode}: {out.stderr[-2000:]}")
    with open(path) as f:
        result = json.load(f)
    return {"wall_s": round(wall, 2), "audit_seconds": result["seconds"], "verdict": result["verdict"],
            "rows": len(result["checks"]), "executor": result.get("executor"), "errors": result["errors"],
            "load_before": load, "load_after": os.getloadavg(), "_rows": rows(result)}


def cpu_model() -> str:
    with open("/proc/cpuinfo") as f:
        return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), platform.machine())


def main(out: str, args: list) -> None:
    runs = {}
    with tempfile.TemporaryDirectory(prefix="sv-two-node-") as folder:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
        load = os.getloadavg()
        start = time.perf_counter()
        with loopback.loopback_cluster(f"/tmp/sv-ray-two-{os.getpid()}", nodes=2, cpus_per_node=1, env=env) as cluster:
            started = {"start_s": round(time.perf_counter() - start, 2), "load_before": load,
                       "load_after": os.getloadavg()}
            runs["local_jobs2"] = audit(folder, "local2", [*args, "--jobs", "2"])
            runs["ray_two_nodes"] = audit(folder, "ray", [*args, "--executor", f"ray:{cluster.address}"],
                                          prefix=cluster.netns)
            runs["local_jobs1"] = audit(folder, "local1", [*args, "--jobs", "1"])
    identical = runs["local_jobs2"]["_rows"] == runs["ray_two_nodes"]["_rows"] == runs["local_jobs1"]["_rows"]
    for run in runs.values():
        del run["_rows"]
    ray_wall = runs["ray_two_nodes"]["wall_s"]
    doc = {"what": "specverify audit reference " + " ".join(args) + ": local (--jobs 2, --jobs 1) vs a two-node "
                   "Ray cluster on 127.0.0.1 (two adapter actors), one after the other in one run",
           "machine": f"{cpu_model()}, {os.cpu_count()} cores (shared)", "ray": __import__("ray").__version__,
           "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cluster": started, "runs": runs,
           "rows_identical": identical, "left_running": cluster.left,
           "ratio_ray_to_local_jobs2": round(ray_wall / runs["local_jobs2"]["wall_s"], 3),
           "ratio_ray_to_local_jobs1": round(ray_wall / runs["local_jobs1"]["wall_s"], 3)}
    write_json(out, doc)
    print(json.dumps(doc, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "reports/ray/two_node.json", sys.argv[2:] or DEFAULT_ARGS)
