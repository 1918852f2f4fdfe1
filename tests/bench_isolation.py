"""What the process boundary of `specverify.isolation` costs (a script, not a test: no timed asserts).

    python tests/bench_isolation.py            one battery-sized reference verify: in this process,
                                               through an in-process handle, through a worker
    python tests/bench_isolation.py --audit    also the whole reference battery, the adapter in this
                                               process vs behind a worker (the checks unchanged: the
                                               handle stands in for the adapter, its calls made
                                               directly as the wiring will: no harness thread),
                                               results compared; wall and CPU seconds (the machine
                                               may be shared: CPU time is the steadier measure)

The verify batch is the battery's: harness.CHUNK requests of one Dirichlet problem, V = 8, kappa = 4.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time

import numpy as np

from specverify.adapters.reference import ReferenceEngine
from specverify.audit import Context, run_audit
from specverify.battery import harness
from specverify.battery.problems import Problem
from specverify.isolation import AdapterHandle, inprocess, open_adapter
from specverify.reference.batch import Coins

VOCAB, KAPPA = 8, 4
CALLS = 20          # timed calls per way (after one warm-up call)


def battery_batch(seed: int = 0):
    rng = np.random.default_rng(seed)
    p = Problem("bench", rng.dirichlet(np.full(VOCAB, 0.7), KAPPA + 1), rng.dirichlet(np.full(VOCAB, 0.7), KAPPA))
    batch = harness.replicate(p, p.sample_drafts(harness.CHUNK, rng))
    return batch, Coins(rng.random(harness.CHUNK * KAPPA), rng.random(harness.CHUNK))


def median_ms(fn) -> float:
    fn()
    times = []
    for _ in range(CALLS):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def bench_verify() -> None:
    batch, coins = battery_batch()
    mb = (batch.target_probs.nbytes + batch.draft_probs.nbytes) / 1e6
    print(f"verify: {harness.CHUNK} requests, V = {VOCAB}, kappa = {KAPPA}, {mb:.1f} MB of rows; median of {CALLS}")
    engine = ReferenceEngine()
    direct = median_ms(lambda: engine.verify(batch, coins))
    print(f"  adapter in this process      {direct:8.2f} ms")
    for isolated in (False, True):
        with open_adapter("reference", timeout=120, isolated=isolated) as h:
            ms = median_ms(lambda: h.verify(batch, coins))
        label = "handle, worker process " if isolated else "handle, in-process     "
        print(f"  {label}      {ms:8.2f} ms   x{ms / direct:.2f}")


def rows(result) -> list:
    """The rows to compare; without `contract.inputs_unchanged`, which only an audit through a handle
    has (the handle is what checks the inputs)."""
    return [(c.name, c.verdict, c.statistic, c.p_value, c.n, c.detail) for c in result.checks
            if c.name != "contract.inputs_unchanged"]


def cpu_seconds() -> float:
    """CPU time of this process and of its reaped children (a closed worker's included)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def untimed(fn, *args, timeout, what):
    """harness.call_with_timeout for a handle, which times its calls itself: no thread in between."""
    return fn(*args)


def timed_call(adapter, method, *args, **kwargs):
    """adapter.<method>(...) and the seconds it took, measured where the adapter lives."""
    t0 = time.perf_counter()
    value = getattr(adapter, method)(*args, **kwargs)
    return value, time.perf_counter() - t0


class Overhead:
    """What each adapter call costs beyond the adapter's own time, summed over an audit: for the
    in-process adapter the handoff to the shared timed thread (`isolation.inprocess.SHARED`), for the worker the process
    boundary (AdapterHandle.call through `timed_call`, called directly as the wiring will)."""

    def __init__(self, worker: bool):
        self.worker, self.calls, self.seconds = worker, 0, 0.0

    def __enter__(self):
        self.timed, self.plain = inprocess.SHARED.run, AdapterHandle.call
        overhead = self

        def handoff(fn, what, timeout):
            inside = []

            def inner():
                t0 = time.perf_counter()
                value = fn()
                inside.append(time.perf_counter() - t0)
                return value

            t0 = time.perf_counter()
            value = overhead.timed(inner, what, timeout)
            overhead.add(time.perf_counter() - t0 - inside[0])
            return value

        def boundary(handle, method, *args, what=None, **kwargs):
            t0 = time.perf_counter()
            value, inside = handle.run(timed_call, method, *args, what=what, **kwargs)
            overhead.add(time.perf_counter() - t0 - inside)
            return value

        if self.worker:
            AdapterHandle.call = boundary
        else:
            inprocess.SHARED.run = handoff
        return self

    def add(self, seconds: float) -> None:
        self.calls += 1
        self.seconds += seconds

    def __exit__(self, *exc):
        inprocess.SHARED.__dict__.pop("run", None)
        AdapterHandle.call = self.plain


def warm(adapter) -> None:
    """Nothing, in the worker: the first `run` there loads this script, which is not the boundary."""


def audit(way: str, seed: int, overhead: Overhead | None = None):
    """One reference battery, the adapter in this process or behind a worker (handle calls direct)."""
    if way == "in-process":
        return run_audit(ReferenceEngine(), Context(seed=seed), factory=ReferenceEngine)
    timed, harness.call_with_timeout = harness.call_with_timeout, untimed
    try:
        with open_adapter("reference", timeout=120) as h:
            if overhead is not None:
                h.run(warm)
            return run_audit(h, Context(seed=seed), factory=h.fresh)
    finally:
        harness.call_with_timeout = timed


def bench_audit(seed: int, repeat: int) -> None:
    """The battery `repeat` times each way, alternating (a shared machine drifts), the best of each;
    then once more each way measuring what a call costs beyond the adapter's own time."""
    ways = ("in-process", "worker")
    walls, cpus = ({w: [] for w in ways} for _ in range(2))
    results = {}
    for _ in range(repeat):
        for way in ways:
            t0, c0 = time.perf_counter(), cpu_seconds()
            results[way] = audit(way, seed)
            walls[way].append(time.perf_counter() - t0)
            cpus[way].append(cpu_seconds() - c0)
            print(f"  audit {way:10s}  wall {walls[way][-1]:6.1f} s   CPU {cpus[way][-1]:6.1f} s", flush=True)
    local, isolated = results["in-process"], results["worker"]
    same = rows(local) == rows(isolated) and local.verdict == isolated.verdict
    w, c = ({k: min(v) for k, v in d.items()} for d in (walls, cpus))
    print(f"audit reference --seed {seed}, best of {repeat} (worker start included): wall x{w['worker'] / w['in-process']:.2f} "
          f"({w['in-process']:.1f} s -> {w['worker']:.1f} s), CPU x{c['worker'] / c['in-process']:.2f} "
          f"({c['in-process']:.1f} s -> {c['worker']:.1f} s); results {'IDENTICAL' if same else 'DIFFER'}")
    per_call = {}
    for way in ways:
        with Overhead(worker=way == "worker") as o:
            audit(way, seed, o)
        per_call[way] = (o.seconds, o.calls)
    (hs, hn), (bs, bn) = per_call["in-process"], per_call["worker"]
    print(f"beyond the adapter's own time: {hs:.2f} s over {hn} calls ({1e3 * hs / hn:.2f} ms a call) in the "
          f"harness's thread handoff, {bs:.2f} s over {bn} calls ({1e3 * bs / bn:.2f} ms a call) through the worker")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audit", action="store_true", help="also time the whole reference battery")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2, help="audits each way, alternating (default 2)")
    args = parser.parse_args()
    bench_verify()
    if args.audit:
        bench_audit(args.seed, args.repeat)


if __name__ == "__main__":
    main()
