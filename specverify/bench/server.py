"""Throughput of the server level's harness against a server: requests/s and samples/s at 1 and 16 in
flight, and the share of the wall time the client (this process) spends on the CPU.

    python -m specverify.bench.server [--url URL --model NAME] [--serve tiny:4,7] [--spec draft]
                                      [--requests 200] [--runs-per-request 50] [--json]

Without --url it starts `specverify serve --model SERVE --spec SPEC` as a child process on a free
loopback port (reaped at the end). Each setting sends `requests` completions of `max_tokens` tokens
through `ServerClient.many` -- the same client, probe and request shapes the server rows use:

    single       n = 1 per request (greedy_bitwise / needle style)
    batched      n = runs-per-request seeded choices per request (how server.law and
                 server.spec_vs_plain draw their runs)

samples/s counts runs (choices) returned; client share = this process's CPU seconds (all its threads:
the openai client, JSON parsing, the row bookkeeping) / wall seconds -- the rest of the wall time the
client waits on the server. Client and server share this machine's cores, so the ratios between the
settings, measured in one run, are what carries over; the absolute figures are this machine's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

IN_FLIGHT = (1, 16)
STARTUP_S = 120.0
REAP_S = 10.0


def measure(client, prompt, requests: int, in_flight: int, n: int, max_tokens: int, seed0: int = 0) -> dict:
    """One setting: wall and client CPU seconds for `requests` completions of n choices each."""
    reqs = [dict(prompt=prompt, max_tokens=max_tokens, temperature=1.0, n=n, seed=seed0 + i) for i in range(requests)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    out = client.many(reqs, in_flight)
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    samples = sum(len(c) for c in out)
    return {"in_flight": in_flight, "n": n, "requests": requests, "samples": samples, "wall_s": wall,
            "requests_per_s": requests / wall, "samples_per_s": samples / wall, "client_cpu_s": cpu,
            "client_share": cpu / wall}


def run_bench(url: str, model: str | None, requests: int = 200, runs_per_request: int = 50, max_tokens: int = 4) -> dict:
    from specverify.server.client import ServerClient
    client = ServerClient(url, model, timeout=600.0)
    support = client.probe()
    prompt = (1,) if support.prompt_kind == "ids" else "Hello"
    measure(client, prompt, 8, 4, 1, max_tokens, seed0=10**6)           # warm-up: connections, first steps
    rows = []
    for in_flight in IN_FLIGHT:
        rows.append(dict(measure(client, prompt, requests, in_flight, 1, max_tokens), setting="single"))
        rows.append(dict(measure(client, prompt, max(4, requests // 10), in_flight, runs_per_request, max_tokens),
                         setting="batched"))
    return {"url": url, "model": client.model, "server": client.version(), "max_tokens": max_tokens, "rows": rows,
            "cpu": cpu_model()}


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def start_server(model: str, spec: str):
    """(process, url) of `specverify serve` on a free loopback port; the caller reaps it (`stop_server`)."""
    folder = tempfile.mkdtemp(prefix="specverify-bench-")
    ready = Path(folder) / "url"
    proc = subprocess.Popen([sys.executable, "-m", "specverify", "serve", "--model", model, "--spec", spec,
                             "--port", "0", "--ready-file", str(ready)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    deadline = time.monotonic() + STARTUP_S
    while not ready.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError("the benchmark's server did not start")
        time.sleep(0.1)
    return proc, ready.read_text().strip()


def stop_server(proc) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(REAP_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(REAP_S)


def table(result: dict) -> str:
    lines = [f"server {result['url']} ({result['model']}), {result['max_tokens']} tokens a run, CPU {result['cpu']}",
             f"{'setting':<8} {'in flight':>9} {'n':>4} {'requests/s':>11} {'samples/s':>10} {'client share':>13}"]
    for r in result["rows"]:
        lines.append(f"{r['setting']:<8} {r['in_flight']:>9} {r['n']:>4} {r['requests_per_s']:>11.1f} "
                     f"{r['samples_per_s']:>10.1f} {r['client_share']:>13.2f}")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m specverify.bench.server", description=__doc__.split("\n\n")[0])
    p.add_argument("--url", help="an OpenAI-compatible server (default: start specverify serve)")
    p.add_argument("--model", help="the model to ask for (default: the server's only model)")
    p.add_argument("--serve", default="tiny:4,7", help="the model of the server started without --url")
    p.add_argument("--spec", default="draft", help="its --spec (default draft)")
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--runs-per-request", type=int, default=50)
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    proc = None
    try:
        url = args.url
        if url is None:
            proc, url = start_server(args.serve, args.spec)
        result = run_bench(url, args.model, args.requests, args.runs_per_request, args.max_tokens)
    finally:
        if proc is not None:
            stop_server(proc)
    print(json.dumps(result, indent=1) if args.json else table(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
