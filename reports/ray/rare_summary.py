"""The rare-event run's figures (issue 31): `python reports/ray/rare_summary.py RUN.json LOAD.log [OUT.json]`.

RUN.json: the JSON of the documented run (docs/ray.md, "The 30-minute rare-event run"):

    specverify audit reference --checks rare_event --rare-rate 3e-7 --seed 0 --jobs 1 --json RUN.json

LOAD.log: lines `ISO-TIME LOADAVG-1 LOADAVG-5 LOADAVG-15 ...` (/proc/loadavg sampled each minute during
the run). Writes, per level: the draws, the row's seconds, draws/s for the one worker, the bound reached
(Clopper-Pearson at the run's alpha) and the workers that 1e9 draws in 10 minutes need at that rate
(a calculation, not a cluster run); and the load's range over the run.
"""

import json
import math
import sys

from specverify.io import write_json

TARGET_DRAWS = 1e9          # the projection: this many draws ...
TARGET_SECONDS = 600.0      # ... in this many seconds


def summary(run: dict, load_lines: list) -> dict:
    levels = {}
    for row in run["checks"]:
        if "rare_event" not in row["name"]:
            continue
        data = row["data"]
        rate = row["n"] / row["seconds"]
        levels[row["name"]] = {
            "verdict": row["verdict"], "draws": row["n"], "unit": data["unit"], "events": data["events"],
            "shards": data["shards"], "seconds": round(row["seconds"], 1), "draws_per_s_per_worker": round(rate),
            "rate_upper": data["rate_upper"], "alpha": data["alpha"],
            "workers_for_1e9_in_10_min": math.ceil(TARGET_DRAWS / TARGET_SECONDS / rate)}
    loads = [float(line.split()[1]) for line in load_lines if line.strip()]
    return {"command": "specverify audit reference --checks rare_event --rare-rate "
                       f"{run['checks'][0]['data']['target_rate']:g} --seed {run['seed']} --jobs 1",
            "wall_s_audit": run["seconds"], "verdict": run["verdict"], "levels": levels,
            "load_1min": {"min": min(loads), "max": max(loads), "mean": round(sum(loads) / len(loads), 1),
                          "samples": len(loads)} if loads else None,
            "projection": f"{TARGET_DRAWS:.0e} draws in {TARGET_SECONDS:.0f} s = {TARGET_DRAWS / TARGET_SECONDS:.3g} "
                          "draws/s; workers = ceil(that / draws_per_s_per_worker), at this machine's per-worker rate"}


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        run = json.load(f)
    with open(sys.argv[2]) as f:
        lines = f.read().splitlines()
    doc = summary(run, lines)
    if len(sys.argv) > 3:
        write_json(sys.argv[3], doc)
    print(json.dumps(doc, indent=1))
