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
models, processors where the adapter has them), `methods` (which of METHODS it has; each is also a method of the
handle, so `hasattr(handle, "verify_trees")` answers as for the adapter), and:

    call(method, *args, what=...)   adapter.<method>(*args) in the worker
    run(func, *args, what=...)      func(adapter, *args) in the worker: compound calls (the per-request
                                    verify_tree loop); func is a module-level function (sent by name)
    fresh(what=...)                 a handle on a new adapter built by the factory again, in the same
                                    worker (the seeded checks replay calls on fresh adapters)
    buffer(shape, dtype)            an empty array in memory the worker maps: C-contiguous arrays in it
                                    are handed to calls without a copy (a plain array in-process)
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
call needs more -- except arrays the audit built in a shared buffer (`handle.buffer(shape, dtype)`: a
memory file of its own, mapped by the worker the same private way), which cross without a copy: the
real-vocabulary rows (64 MiB a batch, the same rows for every batch of a problem) and the battery's
replicated rows (`checks.harness.replicated_rows`). The adapter sees writable views into the argument arena, which the worker maps
privately: a page the adapter writes becomes the worker's own copy, the audit's bytes stay as they
were, and after the call the worker finds the pages written (/proc/self/pagemap), compares just the
arrays on them with the audit's bytes and puts the pages back. The names of the arrays that changed
are `handle.last_mutated` (a list, [] when the adapter left its inputs alone); where there is no
pagemap the worker maps the arena shared and the audit compares every array with its own after the
call. The audit's own arrays are never handed to the adapter, so it goes on judging with them. An
adapter that keeps a view of an input after a call returns is noticed (the view keeps its arena slot
alive): the arena is then left to it and the next call gets a new one; a kept view of a shared
buffer has its pages made the worker's own copies as they are then (the audit goes on writing the
buffer for later calls, which get a new mapping of it). Toy models cross without their
memo (`reference.toy.ToyModel._cache`), the torch form of a toy model (`reference.torch_toy`) as its toy
model, rebuilt on the other side; results come back as plain data (arrays; tensors as arrays; an
object with `tokens` as a namespace of tokens and the step counts). A callable argument (a progress
callback) stays in the audit and is called there when the worker calls it. OpenMP threads in the
worker wait passively between parallel regions unless the audit's environment says otherwise
(WORKER_ENV).

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

Cost, measured with `python tests/bench_isolation.py --audit` (the checks unchanged, the handle standing
in for the adapter; 2 idle cores): the whole reference audit takes x1.18 the time of the adapter called
directly in a warm process (11.9 s -> 14.0 s, every verdict, statistic and p-value equal): 1.35 ms a call
beyond the adapter's own time (a 64 MiB batch in a shared buffer: ~1 ms of finding written pages, ~1 ms
of round trip and pickling) and ~0.6 s to start the worker and load its kernels. Against the in-process
handle, which copies and compares every input, the worker is faster (whole commands: x0.69).
"""

from __future__ import annotations

import ctypes
import dataclasses
import faulthandler
import functools
import gc
import importlib
import importlib.util
import inspect
import io
import json
import mmap
import os
import pickle
import queue
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
import weakref
from multiprocessing.connection import Connection

import numpy as np

from specverify.adapters.bitwise_level import BitwiseInfo, GreedyResult
from specverify.reference.torch_toy import as_torch
from specverify.errors import AdapterError, InputError
from specverify.reference.toy import ToyModel

# the adapter methods the battery may call: each present one is mirrored as a method of the handle
METHODS = ("verify", "verify_block", "verify_trees", "verify_tree", "verify_seeded", "generate", "bitwise_info",
           "decode_greedy", "own_models")
# attributes copied from the adapter when it has them (name, version and capabilities always are)
ATTRIBUTES = ("audit_defaults", "row_dtype", "models", "processors")
# parameter names of the protocol methods (`adapters.protocol`): they name the arrays in last_mutated
PARAMS = {
    "verify": ("batch", "coins"),
    "verify_block": ("batch", "coins"),
    "verify_trees": ("batch", "coins"),
    "verify_tree": ("tree", "target_probs", "draft_probs", "coins", "final_coin"),
    "verify_seeded": ("batch", "seeds"),
    "generate": ("target", "draft", "prompt", "kappa", "transform", "seed", "n", "length", "processors"),
    "decode_greedy": ("request",),
    "own_models": ("vocab", "seed"),
}
BITWISE_DATA = (GreedyResult, BitwiseInfo)     # results sent back as themselves (`adapters.bitwise_level`)
WALK_DEPTH = 4              # how deep into the arguments arrays are looked for (batch.target_probs: 1)
ALIGN = 64                  # bytes: every array starts at a multiple of this in the arena
MIN_ARENA = 1 << 20         # bytes: the smallest arena
POLL_SLICE = 0.5            # s: a waiting audit checks this often whether the worker still exists
CLOSE_WAIT = 2.0            # s a closing worker gets to exit on its own before it is killed
REAP_WAIT = 5.0             # s to wait for a killed or dead worker's exit status
TAIL_LINES = 8              # last lines of the worker's output quoted in an error
TAIL_BYTES = 8192           # how much of the end of the output is read for them
LINE_CHARS = 200            # each quoted line clipped to this
THREAD_NAME = "specverify-adapter"
# the worker's environment where the audit's does not say otherwise: OpenMP threads that spin between
# parallel regions (libgomp's default) take, while the worker waits for the next call, the CPU the audit
# needs to prepare it -- the reference battery (numba prange kernels) took 2.5x the CPU without this
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}

# the worker's first words: the audit's sys.path, then serve() on the socket and lifeline descriptors
_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from specverify.isolation import serve; serve(int(sys.argv[2]), int(sys.argv[3]))")


# ------------------------------------------------------------------------------------- the handle

def open_adapter(spec, *, timeout: float, isolated: bool = True) -> "AdapterHandle":
    """A handle on a new adapter built from `spec` (an engine name or a zero-argument factory) in a
    worker process (or in this process when not `isolated`); building it may take `timeout` s."""
    what = f"{_label(spec)}: building the adapter"
    # an unsendable factory fails here, before a process is started
    backend = _Process(_factory_ref(spec)) if isolated else _InProcess(spec)
    try:
        info = backend.build(0, what, timeout)
    except BaseException:
        backend.close()
        raise
    return AdapterHandle(backend, 0, info, timeout, owner=True)


class AdapterHandle:
    """An adapter under audit, reached through `call` / `run` (module docstring); `local` is the adapter
    object itself in in-process mode (for code that reaches past the protocol). Attributes: name,
    version (str or None), capabilities (set), methods (frozenset of METHODS present), the ATTRIBUTES
    the adapter has, isolated, timeout, last_mutated, pid."""

    def __init__(self, backend, iid: int, info: dict, timeout: float, owner: bool):
        self._backend, self._iid, self._owner = backend, iid, owner
        self.timeout = float(timeout)
        self.isolated = isinstance(backend, _Process)
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

    def buffer(self, shape, dtype=np.float64) -> np.ndarray:
        """An empty array the audit may fill and hand to calls without a copy: in isolated mode it lives
        in shared memory the worker maps privately, so a C-contiguous array inside it (a slice, a
        reshape) reaches the adapter as it is, and what the adapter writes there stays the worker's
        (found and reported in last_mutated as for any input). Where the worker cannot map it so (no
        pagemap) and in-process, a plain array (its contents copied per call, as any input's)."""
        self._check_open(f"{self.name}: a shared buffer")
        return self._backend.buffer(tuple(int(n) for n in np.atleast_1d(shape)), np.dtype(dtype))

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

    def kill(self) -> None:
        """End the worker at once (SIGKILL, no grace), for an audit that is being interrupted; then close."""
        if self._owner and self.isolated and not self.closed:
            self._backend.kill()
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def local(self):
        """The adapter object (in-process mode only: an isolated adapter lives in its worker)."""
        if self.isolated:
            raise AdapterError(f"{self.name}: the adapter lives in its worker process; open it with isolated=False")
        return self._backend.instances[self._iid]

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


def _label(spec) -> str:
    if isinstance(spec, str):
        return spec
    return getattr(spec, "__qualname__", None) or getattr(spec, "name", None) or type(spec).__name__


# ------------------------------------------------------------------------------ what crosses over

def _named_arrays(names, args, kwargs) -> list[tuple[str, np.ndarray]]:
    """(name, array) of every plain numpy array reachable from the arguments through dataclass fields,
    public attributes, tuples, lists and dicts, each array once, named by its first path."""
    found: dict[int, tuple[str, np.ndarray]] = {}
    seen: set[int] = set()

    def walk(obj, path, depth):
        if type(obj) is np.ndarray:
            if not obj.dtype.hasobject:
                found.setdefault(id(obj), (path, obj))
            return
        if depth >= WALK_DEPTH or id(obj) in seen or isinstance(obj, (str, bytes, int, float, type, types.ModuleType)):
            return
        seen.add(id(obj))
        if isinstance(obj, (tuple, list)):
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]", depth + 1)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{path}[{k!r}]", depth + 1)
        elif dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                if not f.name.startswith("_"):
                    walk(getattr(obj, f.name, None), f"{path}.{f.name}", depth + 1)
        elif hasattr(obj, "__dict__") and not callable(obj):
            for k, v in vars(obj).items():
                if not k.startswith("_"):
                    walk(v, f"{path}.{k}", depth + 1)

    for i, arg in enumerate(args):
        walk(arg, names[i] if i < len(names) else f"args[{i}]", 0)
    for key, arg in kwargs.items():
        walk(arg, key, 0)
    return list(found.values())


def _callbacks(args, kwargs) -> list:
    """The callable arguments (functions, bound methods, partials): they stay on the audit's side."""
    kinds = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)
    return [v for v in (*args, *kwargs.values()) if isinstance(v, kinds)]


class _Encoder(pickle.Pickler):
    """Pickles the arguments with the named arrays and callbacks replaced by tokens ("a", i) / ("c", j),
    toy models without their memo and torch toy models as their toy model; for the worker
    (`worker`), functions and classes of the audit's main script as its file and qualified name."""

    def __init__(self, file, arrays, callbacks, worker: bool):
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.worker = worker
        self.tokens = {id(a): ("a", i) for i, (_, a) in enumerate(arrays)}
        self.tokens.update({id(f): ("c", j) for j, f in enumerate(callbacks)})

    def persistent_id(self, obj):
        return self.tokens.get(id(obj))

    def reducer_override(self, obj):
        cls = type(obj)
        if self.worker and isinstance(obj, (types.FunctionType, type)) and obj.__module__ == "__main__" \
                and "<" not in obj.__qualname__:
            main = getattr(sys.modules["__main__"], "__file__", None)
            if main:
                return _resolve_ref, (("ref", "__main__", obj.__qualname__, os.path.abspath(main)),)
        if cls is ToyModel:
            return toy_model, (obj.vocab_size, obj.seed, obj.scale, obj.zero_frac, obj.base, obj.noise)
        if cls.__module__ == as_torch.__module__ and hasattr(obj, "toy"):
            return as_torch, (obj.toy,)
        return NotImplemented


@functools.lru_cache(maxsize=64)
def toy_model(*args) -> ToyModel:
    """The worker's one ToyModel per distinct toy: its memo of computed rows then lives across calls
    (a toy rebuilt for every call recomputed every row it was asked for)."""
    return ToyModel(*args)


def _encode(obj, arrays, callbacks, worker: bool) -> bytes:
    buf = io.BytesIO()
    _Encoder(buf, arrays, callbacks, worker).dump(obj)
    return buf.getvalue()


class _Decoder(pickle.Unpickler):
    """Unpickles what `_Encoder` wrote, tokens resolved to `arrays[i]` and `callback(j, ...)`."""

    def __init__(self, data: bytes, arrays, callback):
        super().__init__(io.BytesIO(data))
        self.arrays, self.callback = arrays, callback

    def persistent_load(self, token):
        kind, i = token
        return self.arrays[i] if kind == "a" else functools.partial(self.callback, i)


def _libc_memcmp():
    """libc's memcmp (2-3x faster than numpy's comparison, no temporary), or None where there is none."""
    try:
        memcmp = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError):
        return None
    memcmp.restype = ctypes.c_int
    memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return memcmp


_MEMCMP = _libc_memcmp()


def _same_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two arrays of one shape and dtype hold the same bytes (-0.0 differs from 0.0; NaN is NaN)."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    if x.nbytes == 0:
        return True
    if _MEMCMP is not None:
        return _MEMCMP(x.__array_interface__["data"][0], y.__array_interface__["data"][0], x.nbytes) == 0
    return bool(np.array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8)))


def _portable(value):
    """A result as plain data the audit can unpickle without the adapter's modules: tensors and other
    array-likes as arrays, an object with `tokens` (an engine's generate result) as a namespace."""
    if isinstance(value, (np.ndarray, np.generic, str, bytes, int, float, bool, type(None))):
        return value
    if isinstance(value, list):
        return [_portable(v) for v in value]
    if isinstance(value, tuple):                     # a named tuple as a plain one
        return tuple(_portable(v) for v in value)
    if isinstance(value, dict):
        return {k: _portable(v) for k, v in value.items()}
    if isinstance(value, BITWISE_DATA):             # the bitwise level's own records: fields made plain
        return dataclasses.replace(value, **{f.name: _portable(getattr(value, f.name))
                                             for f in dataclasses.fields(value)})
    if hasattr(value, "tokens"):
        keep = ("tokens", "num_steps", "num_drafted", "num_accepted")
        return types.SimpleNamespace(**{k: _portable(getattr(value, k)) for k in keep if hasattr(value, k)})
    if hasattr(value, "__array__"):
        try:
            return np.asarray(value)
        except Exception:  # noqa: BLE001 - e.g. a tensor on a device: sent as it is
            return value
    return value


def describe(adapter) -> dict:
    """The adapter's attributes the battery reads, as plain data (the same in both modes)."""
    name = getattr(adapter, "name", None)
    version = getattr(adapter, "version", None)
    attributes = {}
    for key in ATTRIBUTES:
        if hasattr(adapter, key):
            value = getattr(adapter, key)
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 - an attribute that cannot cross is sent as text
                value = str(value)
            attributes[key] = value
    return {
        "name": None if name is None else str(name),
        "version": None if version is None else str(version),
        "capabilities": sorted(str(c) for c in (getattr(adapter, "capabilities", None) or ())),
        "methods": [m for m in METHODS if hasattr(adapter, m)],
        "attributes": attributes,
    }


def _failure(exc: BaseException) -> tuple[str, str]:
    """(kind, message) of an exception raised building or calling the adapter: "adapter" (its own
    AdapterError message), "input" (an InputError naming a bad engine), "what" (prefixed with the
    call's what by the audit)."""
    if isinstance(exc, AdapterError):
        return "adapter", str(exc)
    return "what", f"raised {type(exc).__name__}: {exc}"


def _raise(kind: str, message: str, what: str):
    if kind == "adapter":
        raise AdapterError(message)
    if kind == "input":
        raise InputError(message)
    raise AdapterError(f"{what}: {message}".splitlines()[0])


# ------------------------------------------------------------------------------------- factories

def _factory_ref(spec):
    """How the worker gets the factory: ("name", spec), ("ref", module, qualname, file) for a
    module-level function or class, ("pickle", bytes) for other picklable callables."""
    if isinstance(spec, str):
        return ("name", spec)
    hint = ('pass it as "pkg.module:factory" or "path/to/file.py:factory", or audit it in-process '
            "(isolated=False)")
    if not callable(spec) or hasattr(spec, "capabilities") and not inspect.isclass(spec):
        raise AdapterError(f"{_label(spec)}: an adapter instance cannot be moved to an adapter process; {hint}")
    module, qualname = getattr(spec, "__module__", None), getattr(spec, "__qualname__", "")
    if inspect.isfunction(spec) or inspect.isclass(spec):
        if not module or "<" in qualname:
            raise AdapterError(f"factory {qualname or spec!r}: a local function, lambda or class cannot be "
                               f"imported by the adapter process; {hint}")
        file = getattr(sys.modules.get(module), "__file__", None)
        file = file and os.path.abspath(file)
        if module == "__main__" and not file:
            raise AdapterError(f"factory {qualname}: defined in an interactive __main__; {hint}")
        return ("ref", module, qualname, file)
    try:
        return ("pickle", pickle.dumps(spec))
    except Exception as exc:  # noqa: BLE001
        raise AdapterError(f"factory {_label(spec)}: cannot be sent to the adapter process "
                           f"({type(exc).__name__}: {exc}); {hint}".splitlines()[0]) from exc


def _resolve_ref(ref):
    """The callable a `_factory_ref` names, in the worker: the factory, or a script's function run()
    is given (`_Encoder`)."""
    kind = ref[0]
    if kind == "name":
        from specverify.adapters.registry import factory
        return factory(ref[1])
    if kind == "pickle":
        return pickle.loads(ref[1])
    _, module, qualname, file = ref
    mod = None
    if module != "__main__":
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module or not file:
                raise
    if mod is None:
        name = "__mp_main__" if module == "__main__" else module   # a script's main guard stays off
        mod = sys.modules.get(name)
        if getattr(mod, "__file__", None) != file:                # executed once per worker
            spec = importlib.util.spec_from_file_location(name, file)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# -------------------------------------------------------------------------------- in-process mode

class _Thread:
    """One long-lived daemon thread that runs calls; one stuck in the adapter is abandoned."""

    def __init__(self):
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self.loop, daemon=True, name=THREAD_NAME).start()

    def loop(self):
        while True:
            fn, box, done = self.jobs.get()
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - an adapter may raise anything
                box["error"] = exc
            done.set()


class _InProcess:
    """The adapters live in this process; calls run in a `_Thread` under the timeout."""

    def __init__(self, spec):
        if isinstance(spec, str):
            from specverify.adapters.registry import factory
            self.factory, self.first = factory(spec), None
        elif callable(spec) and (inspect.isclass(spec) or not hasattr(spec, "capabilities")):
            self.factory, self.first = spec, None
        else:
            self.factory, self.first = None, spec                # an adapter instance: no fresh copies
        self.instances: dict = {}
        self.thread: _Thread | None = None
        self.count = 0

    def new_id(self) -> int:
        self.count += 1
        return self.count

    def _timed(self, fn, what, timeout):
        if threading.current_thread().name == THREAD_NAME:       # nested: already timed
            return fn()
        if self.thread is None:
            self.thread = _Thread()
        box: dict = {}
        done = threading.Event()
        self.thread.jobs.put((fn, box, done))
        if not done.wait(timeout):
            self.thread = None                  # stuck in the adapter: the next call gets a new thread
            raise AdapterError(f"{what}: no answer within {timeout:g} s (hung?)")
        if "error" in box:
            exc = box.pop("error")
            kind, message = _failure(exc)
            try:
                _raise(kind, message, what)
            except AdapterError as err:
                raise err from exc
        return box["value"]

    def build(self, iid, what, timeout) -> dict:
        if iid == 0 and self.first is not None:
            adapter = self.first
        elif self.factory is None:
            raise AdapterError(f"{what}: the adapter was given as an instance: there is no factory to build "
                               "fresh ones with")
        else:
            adapter = self._timed(self.factory, what, timeout)
        self.instances[iid] = adapter
        return describe(adapter)

    def invoke(self, iid, target, args, kwargs, names, what, timeout):
        arrays = _named_arrays(names, args, kwargs)
        callbacks = _callbacks(args, kwargs)
        copies = [a.copy() for _, a in arrays]
        op, fn = target
        adapter = self.instances[iid]
        a2, k2 = _Decoder(_encode((args, kwargs), arrays, callbacks, worker=False), copies,
                          lambda j, *a, **k: callbacks[j](*a, **k)).load()
        call = (lambda: getattr(adapter, fn)(*a2, **k2)) if op == "call" else (lambda: fn(adapter, *a2, **k2))
        try:
            value = self._timed(call, what, timeout)
        finally:
            mutated = [name for (name, a), c in zip(arrays, copies) if not _same_bytes(a, c)]
        return value, mutated

    def drop(self, iid):
        self.instances.pop(iid, None)

    def buffer(self, shape, dtype):
        return np.empty(shape, dtype)

    def close(self):
        self.instances.clear()


# ------------------------------------------------------------------------------------ the arena

class _Arena:
    """A shared memory file mapped here: `view(offset, shape, dtype)` is an array over its bytes.
    `private`: the worker's mapping of an argument arena -- what the adapter writes lands in private
    copies of the pages written (`clean` still shows the file, the audit's bytes), so the audit's
    side never changes and a write is found by `_WrittenPages` instead of comparing everything."""

    def __init__(self, size: int, fd: int | None = None, private: bool = False):
        self.size = size
        self.fd = fd if fd is not None else _memory_file(size)
        if private:
            self.map = mmap.mmap(self.fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            self.clean = np.frombuffer(mmap.mmap(self.fd, size, prot=mmap.PROT_READ), np.uint8)
        else:
            self.map = mmap.mmap(self.fd, size)
            self.clean = None
        self.bytes = np.frombuffer(self.map, np.uint8)      # a view that keeps the mapping open
        self.address = self.bytes.__array_interface__["data"][0]

    def view(self, offset: int, shape, dtype) -> np.ndarray:
        return np.ndarray(shape, dtype, buffer=self.map, offset=offset)

    def close_fd(self):
        """Close the file descriptor (the mapping stays): once it has been passed on, or received."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self):
        self.close_fd()
        self.bytes = self.clean = None  # the mapping closes when the last view of it goes
        self.map = None


class _ScanArg(ctypes.Structure):
    """struct pm_scan_arg of the PAGEMAP_SCAN ioctl (linux/fs.h, Linux >= 6.7)."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "size", "flags", "start", "end", "walk_end", "vec", "vec_len", "max_pages",
        "category_inverted", "category_mask", "category_anyof_mask", "return_mask")]


class _PageRegion(ctypes.Structure):
    """struct page_region: [start, end) addresses of pages that matched."""
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64), ("categories", ctypes.c_uint64)]


class _WrittenPages:
    """The pages of a private file mapping this process has written to: /proc/self/pagemap marks
    each present page as a file page (bit 61) unless it is the process's own copy -- a written one.
    Asked with the PAGEMAP_SCAN ioctl where the kernel has it (it returns only the matching regions:
    ~0.5 ms less a call for the 64 MiB of a real-vocabulary batch), else by reading the entries."""

    PRESENT, SWAPPED, FILE = 1 << 63, 1 << 62, 1 << 61
    # PAGEMAP_SCAN = _IOWR('f', 16, struct pm_scan_arg) and its page categories
    SCAN = (3 << 30) | (ctypes.sizeof(_ScanArg) << 16) | (ord("f") << 8) | 16
    IS_FILE, IS_PRESENT, IS_SWAPPED = 1 << 2, 1 << 3, 1 << 4
    REGIONS = 256                       # regions one ioctl returns at most (then it goes on from there)

    def __init__(self):
        self.fd = os.open("/proc/self/pagemap", os.O_RDONLY)     # OSError where there is none
        self.ioctl = None                                          # set by probe() where the scan works
        self.vec = (_PageRegion * self.REGIONS)()

    def pages(self, address: int, nbytes: int) -> np.ndarray:
        """Indices (from the page at `address`, page-aligned) of the written pages among those covering
        [address, address + nbytes)."""
        if self.ioctl is not None:
            return self.scanned(address, nbytes)
        return self.read(address, nbytes)

    def read(self, address: int, nbytes: int) -> np.ndarray:
        first = address // mmap.PAGESIZE
        count = -(-(address + nbytes) // mmap.PAGESIZE) - first
        entries = np.frombuffer(os.pread(self.fd, 8 * count, 8 * first), np.uint64)
        live = (entries & np.uint64(self.PRESENT | self.SWAPPED)) != 0
        return np.flatnonzero(live & ((entries & np.uint64(self.FILE)) == 0))

    def scanned(self, address: int, nbytes: int) -> np.ndarray:
        page = mmap.PAGESIZE
        base = address // page * page
        end = -(-(address + nbytes) // page) * page
        out = []
        start = base
        while start < end:
            # pages not of the file (inverted FILE) that are present or swapped: the written ones
            arg = _ScanArg(ctypes.sizeof(_ScanArg), 0, start, end, 0, ctypes.addressof(self.vec), self.REGIONS, 0,
                           self.IS_FILE, self.IS_FILE, self.IS_PRESENT | self.IS_SWAPPED,
                           self.IS_FILE | self.IS_PRESENT | self.IS_SWAPPED)
            n = self.ioctl(self.fd, self.SCAN, ctypes.byref(arg))
            if n < 0:
                raise OSError(ctypes.get_errno(), "PAGEMAP_SCAN failed")
            out += [np.arange((r.start - base) // page, (r.end - base) // page) for r in self.vec[:n]]
            if arg.walk_end <= start:
                break
            start = arg.walk_end
        return np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)

    @classmethod
    def probe(cls) -> "_WrittenPages | None":
        """An instance if the pagemap tells written pages apart here (checked on a scratch mapping)."""
        try:
            written = cls()
            arena = _Arena(4 * mmap.PAGESIZE, private=True)
            arena.close_fd()
            arena.bytes[: 3 * mmap.PAGESIZE:mmap.PAGESIZE].sum()         # pages 0-2 read, only page 1 written
            arena.bytes[mmap.PAGESIZE + 5] = 1
            ok = written.read(arena.address, arena.size).tolist() == [1] and arena.clean[mmap.PAGESIZE + 5] == 0
            if ok:
                written.ioctl = _scan_ioctl()
                try:
                    if written.ioctl is not None and written.scanned(arena.address, arena.size).tolist() != [1]:
                        written.ioctl = None
                except OSError:                               # an older kernel: EINVAL / ENOTTY
                    written.ioctl = None
            arena.close()
        except (OSError, ValueError, AttributeError):
            return None
        return written if ok else None


def _scan_ioctl():
    """libc's ioctl for PAGEMAP_SCAN, or None where there is none."""
    try:
        ioctl = ctypes.CDLL(None, use_errno=True).ioctl
    except (OSError, AttributeError):
        return None
    ioctl.restype = ctypes.c_int
    ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    return ioctl


def _memory_file(size: int) -> int:
    """A file descriptor of `size` bytes of shared memory with no name (nothing to leak on a kill)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("specverify-arena", os.MFD_CLOEXEC)
    else:                                                   # elsewhere: an unlinked temporary file
        fd, path = tempfile.mkstemp(prefix="specverify-arena-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


def _layout(arrays) -> tuple[list[int], int]:
    """Arena offsets of the arrays and the bytes they need."""
    offsets, end = [], 0
    for _, a in arrays:
        offsets.append(end)
        end += -(-a.nbytes // ALIGN) * ALIGN
    return offsets, end


def _capacity(size: int) -> int:
    """The size of an arena for `size` bytes: a power of two, at least MIN_ARENA."""
    return max(MIN_ARENA, 1 << (max(size, 1) - 1).bit_length())


class _Slot:
    """One argument array as the adapter sees it (numpy reads `__array_interface__`): every array
    derived from it keeps this object alive, which tells the worker that the adapter kept an input."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.__array_interface__ = array.__array_interface__


class _Pin:
    """The audit's side of one shared buffer: its memory (held weakly: the audit's arrays over it keep
    it alive, and its end tells the worker), where it is mapped here and its size."""

    def __init__(self, pid: int, memory: mmap.mmap, size: int):
        self.pid, self.size = pid, size
        self.memory = weakref.ref(memory)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(memory))

    def alive(self) -> bool:
        return self.memory() is not None


# -------------------------------------------------------------------------------- isolated mode

class _Process:
    """The audit's side of one worker process: start, send, wait (timeout, death), kill, close."""

    def __init__(self, ref):
        self.ref = ref                          # how the worker gets the factory (`_factory_ref`)
        self.log = tempfile.TemporaryFile(prefix="specverify-adapter-")
        ours, theirs = socket.socketpair()
        life_r, life_w = os.pipe()
        env = {**WORKER_ENV, **os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", _BOOT, json.dumps(sys.path), str(theirs.fileno()), str(life_r)],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(), life_r), start_new_session=True, env=env)
        finally:
            theirs.close()
            os.close(life_r)
        # the worker exits when this pipe closes: on close(), or when this process ends in any way
        self.lifeline = os.fdopen(life_w, "wb", buffering=0)
        # a handle dropped unclosed, or one open at exit, still has its worker killed
        self.reaper = weakref.finalize(self, _kill_group, self.proc)
        self.sock = ours
        self.conn = Connection(os.dup(ours.fileno()))
        self.poller = select.poll()              # made once: multiprocessing's poll() builds one a call
        self.poller.register(self.conn.fileno(), select.POLLIN)
        self.arena: _Arena | None = None        # arguments, written here
        self.out: _Arena | None = None          # results, written by the worker
        self.dead: str | None = None            # how the worker ended, once it has
        self.count = 0
        self.dropped: list[int] = []
        self.pins: dict[int, _Pin] = {}          # shared buffers (`buffer`), by pin id
        self.unpinned: list[int] = []            # pins whose memory the audit dropped: told with the next call
        self.lock = threading.Lock()

    def new_id(self) -> int:
        self.count += 1
        return self.count

    # -- shared buffers

    def buffer(self, shape, dtype):
        """An array in a new shared memory file the worker maps privately (`AdapterHandle.buffer`); a
        plain one where it cannot."""
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        what = "a shared buffer for the adapter process"
        with self.lock:
            self._check_alive(what)
            pid = self.new_id()
            size = -(-max(nbytes, 1) // mmap.PAGESIZE) * mmap.PAGESIZE
            fd = _memory_file(size)
            try:
                self._guard(self._send, ("pin", pid, size), what)
                try:
                    socket.send_fds(self.sock, [b"P"], [fd])
                except OSError:
                    self._died(what)
                ok = self._guard(self._wait, what, self.PIN_WAIT)[1]
                if not ok:                              # no pagemap there: the worker could not keep it apart
                    return np.empty(shape, dtype)
                memory = mmap.mmap(fd, size)
            finally:
                os.close(fd)
            pin = _Pin(pid, memory, size)
            self.pins[pid] = pin
            # when the audit drops the last array over it, the worker is told to drop its mapping
            weakref.finalize(memory, _unpin, weakref.ref(self), pid)
            return np.ndarray(shape, dtype, buffer=memory)

    PIN_WAIT = 30.0                             # s the worker gets to map a shared buffer

    def _pinned(self, a: np.ndarray):
        """(pin id, offset) of an array that lies whole in a live shared buffer and is C-contiguous."""
        if not self.pins or not a.flags.c_contiguous:
            return None
        start = a.__array_interface__["data"][0]
        for pin in list(self.pins.values()):
            if pin.alive() and pin.address <= start and start + a.nbytes <= pin.address + pin.size:
                return pin.pid, start - pin.address
        return None

    # -- talking to the worker

    def _send(self, msg, what):
        try:
            self.conn.send_bytes(pickle.dumps(msg, pickle.HIGHEST_PROTOCOL))
        except OSError:
            self._died(what)

    def _wait(self, what, timeout, callbacks=()):
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                self.dead = f"killed after no answer within {timeout:g} s during {what}"
                raise AdapterError(f"{what}: no answer within {timeout:g} s; the adapter process was killed")
            if self.poller.poll(1000 * min(left, POLL_SLICE)):
                try:
                    msg = pickle.loads(self.conn.recv_bytes())
                except (EOFError, OSError):
                    self._died(what)
                if msg[0] == "callback":
                    callbacks[msg[1]](*msg[2], **msg[3])
                    continue
                if msg[0] == "out":                  # the worker's new result arena follows
                    _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
                    self.out = _Arena(msg[1], fds[0])
                    self.out.close_fd()
                    continue
                return msg
            if self.proc.poll() is not None:
                self._died(what)

    def _died(self, what):
        try:
            rc = self.proc.wait(REAP_WAIT)
        except subprocess.TimeoutExpired:            # it closed the socket but lives on
            self.kill()
            rc = None
        if rc is None:
            how = "closed its connection"
        elif rc < 0:
            sig = _signal_name(-rc)
            how = f"was killed by {sig} (out of memory?)" if -rc == signal.SIGKILL else f"died of {sig}"
        else:
            how = f"exited with status {rc}"
        self.dead = f"{how} during {what}"
        self._release()
        raise AdapterError(f"{what}: the adapter process {how}" + self.tail())

    def tail(self) -> str:
        """The worker's last output lines, indented under a heading (or "" when it printed nothing)."""
        try:
            size = os.fstat(self.log.fileno()).st_size
            data = os.pread(self.log.fileno(), TAIL_BYTES, max(0, size - TAIL_BYTES))
        except (OSError, ValueError):
            return ""
        lines = [ln.rstrip() for ln in data.decode("utf-8", "replace").splitlines() if ln.strip()]
        if size > TAIL_BYTES:
            lines = lines[1:]                         # the first may be cut
        lines = [ln if len(ln) <= LINE_CHARS else ln[:LINE_CHARS] + "..." for ln in lines[-TAIL_LINES:]]
        return "".join(["\n  last output of the adapter process:"] + [f"\n    {ln}" for ln in lines]) if lines else ""

    def _check_alive(self, what):
        if self.dead is not None:
            raise AdapterError(f"{what}: the adapter process is gone ({self.dead}); open a new one")
        if self.conn is None:
            raise AdapterError(f"{what}: the adapter process was closed")

    def _reply(self, msg, what):
        """The value of an ("ok", bytes, buffers, mutated, kept) reply -- buffers: (offset, size) of its
        out-of-band pickle buffers in the result arena, copied out --, or the AdapterError of an
        ("error", kind, message, mutated, kept) one."""
        if msg[0] == "error":
            _raise(msg[1], msg[2], what)
        try:
            return pickle.loads(msg[1], buffers=[self.out.bytes[off:off + n].copy() for off, n in msg[2]])
        except Exception as exc:  # noqa: BLE001 - e.g. a class only the worker can import
            raise AdapterError(f"{what}: its result could not be read by the audit ({type(exc).__name__}: {exc})"
                               .splitlines()[0]) from exc

    # -- building and calling

    def build(self, iid, what, timeout) -> dict:
        with self.lock:
            self._check_alive(what)
            self._guard(self._send, ("build", iid, self.ref if iid == 0 else None), what)
            msg = self._guard(self._wait, what, timeout)
            return self._reply(msg, what)

    def invoke(self, iid, target, args, kwargs, names, what, timeout):
        with self.lock:
            self._check_alive(what)
            arrays = _named_arrays(names, args, kwargs)
            callbacks = _callbacks(args, kwargs)
            return self._guard(self._call, iid, target, args, kwargs, arrays, callbacks, what, timeout)

    def _call(self, iid, target, args, kwargs, arrays, callbacks, what, timeout):
        # arrays in a shared buffer cross as they are; the others are copied into the argument arena
        where = [self._pinned(a) for _, a in arrays]
        copied = [x for x, w in zip(arrays, where) if w is None]
        offsets, size = _layout(copied)
        if copied and (self.arena is None or self.arena.size < size):
            self._new_arena(size, what)
        views = [self.arena.view(off, a.shape, a.dtype) for (_, a), off in zip(copied, offsets)]
        for view, (_, a) in zip(views, copied):
            np.copyto(view, a)
        slots = iter(offsets)
        where = [(None, next(slots)) if w is None else w for w in where]
        op, fn = target
        try:
            payload = _encode((fn, args, kwargs), arrays, callbacks, worker=True)
        except Exception as exc:  # noqa: BLE001 - e.g. a lambda given to run()
            raise AdapterError(f"{what}: the call cannot be sent to the adapter process "
                               f"({type(exc).__name__}: {exc})".splitlines()[0]) from exc
        layout = [(pin, off, a.shape, a.dtype, name) for (name, a), (pin, off) in zip(arrays, where)]
        dropped, self.dropped = self.dropped, []
        unpinned, self.unpinned = self.unpinned, []
        self._send((op, iid, layout, payload, dropped, unpinned), what)
        msg = self._wait(what, timeout, callbacks)
        mutated = msg[3]
        if mutated is None:                           # the worker cannot tell: compare here (no pins then)
            mutated = [name for view, (name, a) in zip(views, copied) if not _same_bytes(view, a)]
        del views
        if msg[-1]:                                   # the adapter kept a view: the arena is its now
            self.arena.close()
            self.arena = None
        return self._reply(msg, what), mutated

    def _new_arena(self, size, what):
        if self.arena is not None:
            self.arena.close()
        self.arena = _Arena(_capacity(size))
        self._send(("arena", self.arena.size), what)
        try:
            socket.send_fds(self.sock, [b"A"], [self.arena.fd])
        except OSError:
            self._died(what)
        self.arena.close_fd()

    def _guard(self, fn, *args):
        """fn(*args); on any interruption (^C included) that leaves the worker mid-call, kill it."""
        try:
            return fn(*args)
        except (AdapterError, InputError):
            raise
        except BaseException:
            self.kill()
            self.dead = self.dead or "killed when the audit was interrupted"
            raise

    def drop(self, iid):
        self.dropped.append(iid)                      # told to the worker with the next call

    # -- ending

    def kill(self):
        """SIGKILL the worker's process group (the worker and anything it started) and reap it."""
        _kill_group(self.proc)
        self._release()

    def _release(self):
        for closer in (self.conn, self.sock):
            if closer is not None:
                closer.close()
        self.conn = self.sock = None
        if self.lifeline is not None:
            self.lifeline.close()
            self.lifeline = None
        for arena in (self.arena, self.out):
            if arena is not None:
                arena.close()
        self.arena = self.out = None

    def close(self):
        if self.conn is not None and self.dead is None:
            try:
                self.conn.send_bytes(pickle.dumps(("close",)))
                self.proc.wait(CLOSE_WAIT)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        self.reaper.detach()
        self.log.close()


def _unpin(process_ref, pid: int) -> None:
    """A shared buffer's memory is gone on the audit's side: forget it, and tell the worker with the
    next call (a finalizer: it may run in any thread, so it only appends)."""
    process = process_ref()
    if process is not None and process.pins.pop(pid, None) is not None:
        process.unpinned.append(pid)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a worker's process group (it leads its own session) if it still runs, and reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            proc.kill()
        try:
            proc.wait(REAP_WAIT)
        except subprocess.TimeoutExpired:
            pass


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


# -------------------------------------------------------------------------------- the worker side

def serve(sock_fd: int, lifeline: int) -> None:
    """The worker's main loop (started by `_BOOT`): build adapters and answer calls until told to
    close, the audit's socket closes, or the lifeline pipe does (the audit is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable(all_threads=False)  # a crash leaves the crashing thread's stack in the output
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
    _Server(Connection(sock_fd), socket.socket(fileno=os.dup(sock_fd))).loop()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)                             # not waiting for threads an adapter may have left running


def _watch_lifeline(fd: int) -> None:
    """Exit when the audit's end of the lifeline pipe closes (it has closed the handle, or died)."""
    while os.read(fd, 1):
        pass
    os._exit(0)


def _warm_numba() -> None:
    """Initialise numba's CPU target if the adapter loaded numba: its first compiled call (a cached
    kernel included) otherwise spends ~0.3 s there, while the audit waits; done right after the build
    reply, it overlaps the audit's own preparation of that call."""
    if "numba" not in sys.modules:
        return
    try:
        from numba.core.registry import cpu_target
        cpu_target.target_context.refresh()
    except Exception:  # noqa: BLE001 - only a head start: the first call does it otherwise
        pass


class _Server:
    """One worker's adapters (by instance id), its arenas and its side of the socket."""

    def __init__(self, conn: Connection, sock: socket.socket):
        self.conn, self.sock = conn, sock
        self.factory = None
        self.instances: dict = {}
        self.arena: _Arena | None = None     # arguments, written by the audit
        self.out: _Arena | None = None       # results, written here
        self.written = _WrittenPages.probe()  # None: the audit compares the arguments itself
        self.pins: dict[int, tuple[_Arena, int]] = {}   # shared buffers: (private mapping, descriptor)
        self.lock = threading.Lock()         # adapter threads may call back while the main one waits

    def send(self, msg):
        data = pickle.dumps(msg, pickle.HIGHEST_PROTOCOL)
        with self.lock:
            self.conn.send_bytes(data)

    def callback(self, j, *args, **kwargs):
        try:
            self.send(("callback", j, args, kwargs))
        except (pickle.PicklingError, TypeError, AttributeError):
            self.send(("callback", j, tuple(str(a) for a in args), {k: str(v) for k, v in kwargs.items()}))

    def loop(self):
        while True:
            try:
                msg = pickle.loads(self.conn.recv_bytes())
            except (EOFError, OSError):
                return
            op = msg[0]
            if op == "close":
                return
            if op == "arena":
                _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
                self.arena = _Arena(msg[1], fds[0], private=self.written is not None)
                self.arena.close_fd()
                continue
            if op == "pin":                           # a shared buffer: kept apart only with a pagemap
                _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
                if self.written is None:
                    os.close(fds[0])
                else:
                    self.pins[msg[1]] = (_Arena(msg[2], fds[0], private=True), fds[0])
                self.send(("pinned", self.written is not None))
                continue
            if op == "build":
                reply = self.build(msg[1], msg[2])
                self.send((reply + ([],))[:3] + ([], False))
                if msg[2] is not None:
                    _warm_numba()                     # while the audit prepares its first call
                continue
            _, iid, layout, payload, dropped, unpinned = msg
            for gone in dropped:
                self.instances.pop(gone, None)
            for gone in unpinned:
                arena, fd = self.pins.pop(gone, (None, None))
                if arena is not None:
                    os.close(fd)
            slots = []
            reply = self.call(op, iid, layout, payload, slots)
            refs = [weakref.ref(s) for s in slots]
            del slots
            kept = [entry for entry, r in zip(layout, refs) if r() is not None]
            if kept:
                gc.collect()                          # a traceback cycle may hold the inputs
                kept = [entry for entry, r in zip(layout, refs) if r() is not None]
            kept_arena = any(entry[0] is None for entry in kept)
            kept_pins = {entry[0] for entry in kept} - {None}
            mutated = self.mutated(layout, restore=not kept_arena, keep=kept_pins)
            if kept_arena:
                self.arena = None                     # the adapter's views keep the old mapping alive
            for pid in kept_pins:
                self.hand_over(pid, [entry for entry in kept if entry[0] == pid])
            self.send(reply + (mutated, kept_arena))

    def mutated(self, layout, restore: bool, keep=()) -> list[str] | None:
        """The names of the arguments the call wrote to and changed (None: cannot tell, the audit
        compares); the written pages put back to the audit's bytes for the next call -- in the argument
        arena when `restore`, in each shared buffer not in `keep` (those the adapter kept a view of)."""
        if self.written is None or not layout:
            return None if self.written is None else []
        changed = set()
        for pin in {entry[0] for entry in layout}:
            arena = self.arena if pin is None else self.pins[pin][0]
            entries = [(off, int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize, name)
                       for where, off, shape, dtype, name in layout if where == pin]
            entries = [e for e in entries if e[1]]
            if not entries:
                continue
            page = mmap.PAGESIZE
            lo = min(off for off, _, _ in entries) // page * page          # only the pages the arrays are on
            hi = max(off + n for off, n, _ in entries)
            pages = self.written.pages(arena.address + lo, hi - lo) + lo // page
            if not pages.size:
                continue
            for off, n, name in entries:
                if ((pages >= off // page) & (pages < -(-(off + n) // page))).any() \
                        and not _same_bytes(arena.bytes[off:off + n], arena.clean[off:off + n]):
                    changed.add(name)
            if restore if pin is None else pin not in keep:   # back to the file's pages (the audit's bytes)
                arena.map.madvise(mmap.MADV_DONTNEED, int(pages[0]) * page, int(pages[-1] - pages[0] + 1) * page)
        return [name for *_, name in layout if name in changed]

    def hand_over(self, pid: int, kept) -> None:
        """The adapter kept views of arrays in shared buffer `pid`: their pages are made its own copies
        as they are now (a write fault copies a private page), so the audit's later writes to the buffer
        never reach them, and later calls get a new mapping of the buffer."""
        arena, fd = self.pins[pid]
        page = mmap.PAGESIZE
        for _, off, shape, dtype, _ in kept:
            n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            first, last = off // page * page, off + n
            touched = arena.bytes[first:last:page]
            touched[:] = touched.copy()               # one write a page (not a self-assignment, which numpy skips)
        self.pins[pid] = (_Arena(arena.size, fd, private=True), fd)

    def build(self, iid, ref):
        try:
            if ref is not None:
                self.factory = _resolve_ref(ref)
        except InputError as exc:
            return ("error", "input", str(exc))
        except AdapterError as exc:
            return ("error", "adapter", str(exc))
        except BaseException as exc:  # noqa: BLE001
            return ("error", "what", f"the factory could not be loaded ({type(exc).__name__}: {exc})")
        try:
            adapter = self.factory()
        except BaseException as exc:  # noqa: BLE001 - an adapter may raise anything
            return ("error",) + _failure(exc)
        self.instances[iid] = adapter
        return ("ok", pickle.dumps(describe(adapter)))

    def call(self, op, iid, layout, payload, slots):
        try:
            slots.extend(_Slot((self.arena if pin is None else self.pins[pin][0]).view(off, shape, dtype))
                         for pin, off, shape, dtype, _ in layout)
            fn, args, kwargs = _Decoder(payload, [np.asarray(s) for s in slots], self.callback).load()
        except Exception as exc:  # noqa: BLE001
            return ("error", "what", f"the call could not be rebuilt in the adapter process "
                                     f"({type(exc).__name__}: {exc})")
        adapter = self.instances[iid]
        try:
            value = getattr(adapter, fn)(*args, **kwargs) if op == "call" else fn(adapter, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - an adapter may raise anything
            return ("error",) + _failure(exc)
        finally:
            del args, kwargs
        buffers = []
        try:
            data = pickle.dumps(_portable(value), 5, buffer_callback=buffers.append)
        except Exception as exc:  # noqa: BLE001
            return ("error", "what", f"returned {type(value).__name__}, which cannot be sent back to the audit "
                                     f"({type(exc).__name__}: {exc})")
        return ("ok", data, self.put(buffers))

    def put(self, buffers) -> list[tuple[int, int]]:
        """Copy out-of-band pickle buffers into the result arena (a bigger one, sent first, if they do
        not fit); their (offset, size)."""
        raws = [np.frombuffer(b.raw(), np.uint8) for b in buffers]
        offsets, size = _layout([(None, r) for r in raws])
        if self.out is None or self.out.size < size:
            self.out = _Arena(_capacity(size))
            data = pickle.dumps(("out", self.out.size))
            with self.lock:
                self.conn.send_bytes(data)
                socket.send_fds(self.sock, [b"A"], [self.out.fd])
            self.out.close_fd()
        for off, r in zip(offsets, raws):
            self.out.bytes[off:off + r.size] = r
        return [(off, r.size) for off, r in zip(offsets, raws)]
