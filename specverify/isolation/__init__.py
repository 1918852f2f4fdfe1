"""Adapters under audit in a process of their own: a hang, a crash, stray output or an input changed in
place becomes a one-line AdapterError or a named finding, never a wedged or corrupted audit.

    with open_adapter("reference", timeout=120.0) as engine:     # or a zero-argument factory
        out = engine.call("verify", batch, coins, what="reference.verify (chain.marginal)")
        engine.last_mutated              # [] or e.g. ["batch.target_probs"]: inputs the call changed

`open_adapter(spec, timeout=, isolated=True)` returns an `AdapterHandle`. `spec` is an engine name the
registry resolves (`reference`, `mutant:keep-tail`, `pkg.module:factory`, `path/file.py:factory`) or a
zero-argument factory (a module-level function or class: it is sent by module and qualified name and
imported by the worker with the audit's sys.path). The handle holds the adapter's attributes the battery
reads as plain data fetched once (name, version as str, capabilities, and audit_defaults, row_dtype,
models where the adapter has them), `methods` (which of METHODS it has; each is also a method of the
handle, so `hasattr(handle, "verify_trees")` answers as for the adapter), and:

    call(method, *args, what=...)   adapter.<method>(*args) in the worker
    run(func, *args, what=...)      func(adapter, *args) in the worker: compound calls (the per-request
                                    verify_tree loop); func is a module-level function (sent by name)
    fresh(what=...)                 a handle on a new adapter built by the factory again, in the same
                                    worker (the seeded checks replay calls on fresh adapters)
    close()                         ends the worker (the handle is a context manager too)
    timeout                         seconds one call may take (settable: an adapter's audit_defaults
                                    may raise it once built)

The worker is a fresh interpreter (`sys.executable -c`, never a fork: the audit may run torch or numba
threads) in its own session, SIGINT ignored: a terminal's ^C reaches only the audit, whose
KeyboardInterrupt kills the worker before it propagates (and an audit that dies anyhow closes a pipe
whose end makes the worker exit). The worker's stdout and stderr -- file descriptors 1 and 2, so C code
printing is caught too -- go to one anonymous temporary file, never to the audit's terminal or its
`--json -` output; its last lines are part of the error messages. Python output is unbuffered there;
what C code leaves in its stdio buffers is lost if the worker is killed.

Arguments and results cross a socket as pickles, their numpy arrays through shared memory instead:
the arrays of the arguments (found through dataclass fields, public attributes, tuples, lists and dicts:
the VerifyBatch / TreeBatch / Coins fields) are copied into an argument arena, the result's arrays
come back through a result arena -- each an anonymous memory file (memfd) passed by descriptor, so no
named segment can outlive a killed process, reused across calls and replaced by a bigger one when a
call needs more. The adapter sees writable views into the argument arena, which the worker maps
privately: a page the adapter writes becomes the worker's own copy, the audit's bytes stay as they
were, and after the call the worker finds the pages written (/proc/self/pagemap), compares just the
arrays on them with the audit's bytes and puts the pages back. The names of the arrays that changed
are `handle.last_mutated` (a list, [] when the adapter left its inputs alone); where there is no
pagemap the worker maps the arena shared and the audit compares every array with its own after the
call. The audit's own arrays are never handed to the adapter, so it goes on judging with them. An
adapter that keeps a view of an input after a call returns is noticed (the view keeps its arena slot
alive): the arena is then left to it and the next call gets a new one. Toy models cross without their
memo (`reference.toy.ToyModel._cache`), the torch form of a toy model (`adapters.torchtoy`) as its toy
model, rebuilt on the other side; results come back as plain data (arrays; tensors as arrays; an
object with `tokens` as a namespace of tokens and the step counts). A callable argument (a progress
callback) stays in the audit and is called there when the worker calls it. OpenMP threads in the
worker wait passively between parallel regions unless the audit's environment says otherwise
(`process.WORKER_ENV`).

Failures, each an AdapterError whose first line starts with the call's `what`:
    no answer within `timeout`  "<what>: no answer within T s; the adapter process was killed"
                                (SIGKILL at once: a busy loop holding the GIL ignores anything gentler)
    the worker died             "<what>: the adapter process died of SIGSEGV" / "exited with status 3" /
                                "was killed by SIGKILL (out of memory?)", then its last output lines
    the adapter raised          "<what>: raised Type: message" (first line only); an AdapterError raised
                                inside keeps its own message, an InputError resolving an engine name too
After a kill or a death every handle on that worker raises AdapterError on use, naming what happened;
there is no silent restart (a restarted adapter would have lost its seeded generators): open a new one.

In-process mode (`isolated=False`, for debugging): the adapter is built in the audit's process and each
call runs in a long-lived daemon thread with the old semantics -- a call past the timeout is
AdapterError "<what>: no answer within T s (hung?)", the thread is abandoned (it may keep running) and
the next call gets a new one. Arguments are copied the same way (arrays into private copies, compared
with the originals after the call), so `last_mutated` means the same in both modes. Output is not
captured. `spec` may also be an adapter instance there (then `fresh` raises AdapterError).

Cost, measured with `python tests/bench_isolation.py --audit` on 2 CPU cores shared with four other
busy users (so every figure moved by 20-40% from run to run): one reference `verify` of a battery-sized
batch (32768 requests, V = 8, kappa = 4: 18.9 MB of rows) took x1.05-1.46 its in-process time (about
1.2 ms to copy the rows into the arena, the rest waiting for a core); the whole reference battery
through the worker (the checks unchanged, the handle standing in for the adapter, its 714 calls made
directly) took x1.04-1.24 the wall time of the in-process audit (e.g. 14.4 s -> 17.9 s, 18.7 s -> 19.3
s) and +0.6-2.5 s of CPU (best of two runs each way), every verdict, statistic and p-value identical.
The fixed part is the worker's start (interpreter, numpy, the adapter's imports: about 0.45 s of CPU);
the rest is the arena copies (1.7 GB over the battery) and a round trip per call (0.1 ms median for an
empty call; 2-5 ms on average for the battery's calls here, mostly waiting for a core, against 0.6-1 ms
for the thread handoff the in-process path pays).
"""

from __future__ import annotations

import functools
import inspect
import weakref

from specverify.errors import AdapterError

from .inprocess import InProcess
from .process import Process
from .wire import METHODS, factory_ref, label

# parameter names of the protocol methods (`adapters.protocol`): they name the arrays in last_mutated
PARAMS = {
    "verify": ("batch", "coins"),
    "verify_block": ("batch", "coins"),
    "verify_trees": ("batch", "coins"),
    "verify_tree": ("tree", "target_probs", "draft_probs", "coins", "final_coin"),
    "verify_seeded": ("batch", "seeds"),
    "generate": ("target", "draft", "prompt", "kappa", "transform", "seed", "n", "length"),
}


def open_adapter(spec, *, timeout: float, isolated: bool = True) -> "AdapterHandle":
    """A handle on a new adapter built from `spec` (an engine name or a zero-argument factory) in a
    worker process (or in this process when not `isolated`); building it may take `timeout` s."""
    what = f"{label(spec)}: building the adapter"
    # an unsendable factory fails here, before a process is started
    backend = Process(factory_ref(spec)) if isolated else InProcess(spec)
    try:
        info = backend.build(0, what, timeout)
    except BaseException:
        backend.close()
        raise
    return AdapterHandle(backend, 0, info, timeout, owner=True)


class AdapterHandle:
    """An adapter under audit, reached through `call` / `run` (module docstring). Attributes: name,
    version (str or None), capabilities (set), methods (frozenset of METHODS present), the ATTRIBUTES
    the adapter has, isolated, timeout, last_mutated, pid."""

    def __init__(self, backend, iid: int, info: dict, timeout: float, owner: bool):
        self._backend, self._iid, self._owner = backend, iid, owner
        self.timeout = float(timeout)
        self.isolated = isinstance(backend, Process)
        self.name = info["name"]
        self.version = info["version"]
        self.capabilities = set(info["capabilities"])
        self.methods = frozenset(info["methods"])
        for key, value in info["attributes"].items():
            setattr(self, key, value)
        self.last_mutated: list[str] = []
        self.closed = False

    def __getattr__(self, attr):
        # only reached for names the instance lacks: the adapter's methods, bound to `call`
        if attr in METHODS and attr in self.__dict__.get("methods", ()):
            return functools.partial(self.call, attr)
        raise AttributeError(f"{type(self).__name__} of {self.__dict__.get('name')!r} has no attribute {attr!r}")

    def call(self, method: str, *args, what: str | None = None, **kwargs):
        """adapter.<method>(*args, **kwargs); sets last_mutated; AdapterError on any failure."""
        what = what or f"{self.name}.{method}"
        names = PARAMS.get(method, ())
        return self._invoke(("call", method), args, kwargs, names, what)

    def run(self, func, *args, what: str | None = None, **kwargs):
        """func(adapter, *args, **kwargs) where the adapter lives; func must be a module-level function."""
        what = what or f"{self.name}: {getattr(func, '__name__', func)}"
        try:
            names = tuple(inspect.signature(func).parameters)[1:]
        except (TypeError, ValueError):
            names = ()
        return self._invoke(("run", func), args, kwargs, names, what)

    def fresh(self, what: str | None = None) -> "AdapterHandle":
        """A handle on a new adapter from the same factory (in the same worker)."""
        what = what or f"{self.name}: building a fresh adapter"
        self._check_open(what)
        iid = self._backend.new_id()
        info = self._backend.build(iid, what, self.timeout)
        handle = AdapterHandle(self._backend, iid, info, self.timeout, owner=False)
        # a fresh handle dropped unclosed (the seeded checks make many) frees its adapter all the same
        handle._dropper = weakref.finalize(handle, self._backend.drop, iid)
        return handle

    def close(self) -> None:
        """End the worker (the handle open_adapter returned) or drop this fresh adapter."""
        if self.closed:
            return
        self.closed = True
        if self._owner:
            self._backend.close()
        else:
            self._dropper()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def pid(self) -> int | None:
        """The worker's process id (None in-process)."""
        return self._backend.proc.pid if self.isolated else None

    def __repr__(self):
        where = "isolated" if self.isolated else "in-process"
        return f"<AdapterHandle {self.name!r} ({where}{', closed' if self.closed else ''})>"

    def _check_open(self, what):
        if self.closed:
            raise AdapterError(f"{what}: the adapter handle is closed")

    def _invoke(self, target, args, kwargs, names, what):
        self._check_open(what)
        self.last_mutated = []
        value, mutated = self._backend.invoke(self._iid, target, args, kwargs, names, what, self.timeout)
        self.last_mutated = mutated
        return value
