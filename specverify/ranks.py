"""Run an adapter on every rank of a torch.distributed process group (gloo), started by the harness.

`run_ranks(ref, func, args, worlds, timeout)` starts max(worlds) Python processes (torch's import
is most of a rank's cost, so they serve every world size in turn, largest first). For each world
size W, ranks 0..W-1 initialise the default process group (backend "gloo", a file store in a fresh
temporary folder, RANK and WORLD_SIZE also in the environment, as torchrun sets them), build their
own adapter from `ref` (how `specverify.isolation` names a factory: `adapter_ref`), call
`func(adapter, *args)` -- `func` a module-level function -- send back what it returned (pickled)
and destroy the group; the other ranks are done. A tensor-parallel adapter sees
`torch.distributed.get_rank()` / `get_world_size()` as in its engine and may use collectives.

Returns {W: [the ranks' results, rank order]}. A rank that raises, dies or runs past `timeout`
is an AdapterError naming the rank and its last output line; every rank process is gone when this
returns or raises.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tempfile
import time

from specverify.errors import AdapterError

BACKEND = "gloo"
POLL_S = 0.05
SETTLE_S = 1.0          # s to let the other ranks fail after one did, before naming the first
_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from specverify.ranks import serve_rank; serve_rank(sys.argv[2], int(sys.argv[3]), json.loads(sys.argv[4]))")
# one thread per rank process: `world` ranks share the machine's cores
RANK_ENV = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def adapter_ref(engine, fallback=None):
    """How a rank process builds the adapter `engine` is (a handle's factory reference, else a
    module-level class of the engine, else `fallback`), or None when it cannot be rebuilt there."""
    from specverify import isolation
    ref = getattr(getattr(engine, "_backend", None), "ref", None)
    if ref is not None:
        return ref
    for candidate in (getattr(getattr(engine, "_backend", None), "factory", None), fallback, type(engine)):
        if candidate is None or candidate in (isolation.AdapterHandle,):
            continue
        try:
            return isolation._factory_ref(candidate)
        except AdapterError:
            continue
    return None


def run_ranks(ref, func, args: tuple, worlds, *, timeout: float, what: str) -> dict:
    """func(adapter, *args) on each rank of each world size (module docstring): {W: results by rank}."""
    worlds = sorted({int(w) for w in worlds}, reverse=True)
    world = worlds[0]
    with tempfile.TemporaryDirectory(prefix="specverify-ranks-") as tmp:
        job = os.path.join(tmp, "job.pkl")
        with open(job, "wb") as f:
            pickle.dump((ref, func.__module__, func.__qualname__, args), f)
        procs, logs = [], []
        env = {**os.environ, **RANK_ENV}
        try:
            for rank in range(world):
                log = open(os.path.join(tmp, f"rank{rank}.log"), "w+b")
                logs.append(log)
                procs.append(subprocess.Popen([sys.executable, "-c", _BOOT, json.dumps(sys.path), tmp, str(rank),
                                               json.dumps(worlds)], stdin=subprocess.DEVNULL, stdout=log,
                                              stderr=subprocess.STDOUT, env=env))
            deadline = time.monotonic() + timeout
            while any(p.poll() is None for p in procs):
                if any(p.poll() not in (None, 0) for p in procs):
                    time.sleep(SETTLE_S)              # the others fail in turn: name the one that failed first
                    raise AdapterError(f"{what}: {_first_failure(tmp, procs, logs, world)}")
                if time.monotonic() > deadline:
                    raise AdapterError(f"{what}: no answer from every rank of {world} within {timeout:g} s; "
                                       f"the rank processes were killed")
                time.sleep(POLL_S)
            if any(p.returncode != 0 for p in procs):
                raise AdapterError(f"{what}: {_first_failure(tmp, procs, logs, world)}")
            results = {}
            for w in worlds:
                results[w] = []
                for rank in range(w):
                    with open(os.path.join(tmp, f"world{w}.rank{rank}.out"), "rb") as f:
                        results[w].append(pickle.load(f))
            return results
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                p.wait()
            for log in logs:
                log.close()


def _first_failure(tmp, procs, logs, world) -> str:
    """What the rank that failed first said: its recorded exception (earliest time), else its exit."""
    errors = []
    for rank in range(len(procs)):
        path = os.path.join(tmp, f"rank{rank}.err")
        if os.path.exists(path):
            with open(path) as f:
                stamp, _, text = f.read().partition("\n")
            errors.append((float(stamp), rank, text))
    if errors:
        _, rank, text = min(errors)
        return f"rank {rank} of {world} raised {text}"
    rank = next(r for r, p in enumerate(procs) if p.poll() not in (None, 0))
    return f"rank {rank} of {world} {_died(procs[rank], logs[rank])}"


def _died(proc, log) -> str:
    log.seek(0)
    lines = [x for x in log.read().decode(errors="replace").splitlines() if x.strip()]
    last = lines[-1][:200] if lines else "(no output)"
    return f"exited with status {proc.returncode}: {last}"


def serve_rank(tmp: str, rank: int, worlds: list) -> None:
    """A rank process: for each world size it belongs to, join its group, build the adapter, run the
    job, write the result, leave the group."""
    import importlib

    import torch.distributed as dist

    from specverify import isolation
    with open(os.path.join(tmp, "job.pkl"), "rb") as f:
        ref, module, qualname, args = pickle.load(f)
    func = importlib.import_module(module)
    for part in qualname.split("."):
        func = getattr(func, part)
    for world in worlds:
        if rank >= world:
            return
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(world))
        dist.init_process_group(BACKEND, init_method=f"file://{os.path.join(tmp, f'store{world}')}", rank=rank,
                                world_size=world)
        try:
            adapter = isolation._resolve_ref(ref)()
            out = func(adapter, *args)
            dist.barrier()
        except Exception as exc:
            with open(os.path.join(tmp, f"rank{rank}.err"), "w") as f:
                f.write(f"{time.time()!r}\n{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
            raise
        finally:
            dist.destroy_process_group()
        path = os.path.join(tmp, f"world{world}.rank{rank}.out")
        with open(path + ".tmp", "wb") as f:
            pickle.dump(out, f)
        os.replace(path + ".tmp", path)
