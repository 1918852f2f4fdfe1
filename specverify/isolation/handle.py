"""The handle on an adapter under audit (`open_adapter`, `AdapterHandle`): the API the audit and the
harness use, the same in isolated and in-process mode (`specverify.isolation` describes both)."""

from __future__ import annotations

import functools
import inspect
import weakref

import numpy as np

from specverify.errors import AdapterError

from .factories import factory_ref, label
from .inprocess import Direct, InProcess
from .process import Process
from .wire import METHODS, PARAMS, describe


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


# the plain handles, one per live adapter object (by id; dropped when the adapter goes)
_PLAIN: dict = {}


def plain_handle(adapter, *, timeout: float) -> "AdapterHandle":
    """A handle on an adapter object the caller already holds and calls in this process (the harness,
    given an adapter without a handle): each call on the timed thread the plain adapters share, its
    inputs not copied (`inprocess.Direct`: behaviour and cost as calling it directly under a timeout).
    One handle per adapter while it lives (pooled, `timeout` set for the next calls); closing it leaves
    the adapter alone."""
    handle = _PLAIN.get(id(adapter))
    if handle is None or handle.local is not adapter:
        handle = AdapterHandle(Direct(adapter), 0, describe(adapter), timeout, owner=True)
        try:
            weakref.finalize(adapter, _PLAIN.pop, id(adapter), None)
            _PLAIN[id(adapter)] = handle
        except TypeError:                   # not weakly referable: a handle for this call only
            pass
    handle.timeout = float(timeout)
    return handle


class AdapterHandle:
    """An adapter under audit, reached through `call` / `run` (`specverify.isolation` describes them);
    `local` is the adapter object itself in-process (for code that reaches past the protocol). Attributes: name,
    version (str or None), capabilities (set), methods (frozenset of METHODS present), the ATTRIBUTES
    the adapter has, isolated, timeout, last_mutated, pid, factory_ref, and backend (what reaches the
    adapter: the worker process or the in-process host, shared by the handles `fresh` makes)."""

    def __init__(self, backend, iid: int, info: dict, timeout: float, owner: bool):
        self.backend, self._iid, self._owner = backend, iid, owner
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

    def buffer(self, shape, dtype=np.float64) -> np.ndarray:
        """An empty array the audit may fill and hand to calls without a copy: in isolated mode it lives
        in shared memory the worker maps privately, so a C-contiguous array inside it (a slice, a
        reshape) reaches the adapter as it is, and what the adapter writes there stays the worker's
        (found and reported in last_mutated as for any input). Where the worker cannot map it so (no
        pagemap) and in-process, a plain array (its contents copied per call, as any input's)."""
        self._check_open(f"{self.name}: a shared buffer")
        return self.backend.buffer(tuple(int(n) for n in np.atleast_1d(shape)), np.dtype(dtype))

    def fresh(self, what: str | None = None) -> "AdapterHandle":
        """A handle on a new adapter from the same factory (in the same worker)."""
        what = what or f"{self.name}: building a fresh adapter"
        self._check_open(what)
        iid = self.backend.new_id()
        info = self.backend.build(iid, what, self.timeout)
        handle = AdapterHandle(self.backend, iid, info, self.timeout, owner=False)
        # a fresh handle dropped unclosed (the seeded checks make many) frees its adapter all the same
        handle._dropper = weakref.finalize(handle, self.backend.drop, iid)
        return handle

    def close(self) -> None:
        """End the worker (the handle open_adapter returned) or drop this fresh adapter."""
        if self.closed:
            return
        self.closed = True
        if self._owner:
            self.backend.close()
        else:
            self._dropper()

    def kill(self) -> None:
        """End the worker at once (SIGKILL, no grace), for an audit that is being interrupted; then close."""
        if self._owner and self.isolated and not self.closed:
            self.backend.kill()
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
        return self.backend.instances[self._iid]

    @property
    def factory_ref(self):
        """How another process builds this adapter again (`factories.factory_ref`; `specverify.ranks`),
        or None where it cannot: an adapter given as an instance, or a factory that cannot be sent."""
        if self.isolated:
            return self.backend.ref
        if getattr(self.backend, "name", None) is not None:
            return factory_ref(self.backend.name)
        if self.backend.factory is None:
            return None
        try:
            return factory_ref(self.backend.factory)
        except AdapterError:
            return None

    @property
    def pid(self) -> int | None:
        """The worker's process id (None in-process)."""
        return self.backend.proc.pid if self.isolated else None

    def __repr__(self):
        where = "isolated" if self.isolated else "in-process"
        return f"<AdapterHandle {self.name!r} ({where}{', closed' if self.closed else ''})>"

    def _check_open(self, what):
        if self.closed:
            raise AdapterError(f"{what}: the adapter handle is closed")

    def _invoke(self, target, args, kwargs, names, what):
        self._check_open(what)
        self.last_mutated = []
        value, mutated = self.backend.invoke(self._iid, target, args, kwargs, names, what, self.timeout)
        self.last_mutated = mutated
        return value
