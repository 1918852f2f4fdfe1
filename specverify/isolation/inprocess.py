"""In-process mode (`open_adapter(..., isolated=False)`, for debugging): the adapter lives in the
audit's process and each call runs in a long-lived daemon thread under the timeout (`TimedThread`);
a call past it is abandoned with its thread. `call_with_timeout` runs any callable the same way on
one thread shared by the plain adapters the harness calls, and `Direct` puts such an adapter behind
a handle (`handle.plain_handle`)."""

from __future__ import annotations

import inspect
import queue
import threading
import weakref

import numpy as np

from specverify.errors import AdapterError

from .wire import Decoder, callbacks_of, describe, encode, failure, named_arrays, raise_failure, same_bytes

THREAD_NAME = "specverify-adapter"


class TimedThread:
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


class Timed:
    """Calls under a timeout on one `TimedThread`, made on first use and replaced after a call that
    timed out (that one is abandoned, stuck in the adapter)."""

    def __init__(self):
        self.thread: TimedThread | None = None
        self.lock = threading.Lock()

    def run(self, fn, what: str, timeout: float):
        """fn() on the thread; AdapterError if it raises or does not return within `timeout` s (a call
        made from the thread itself, nested, is already timed: run directly)."""
        if threading.current_thread().name == THREAD_NAME:
            return fn()
        with self.lock:
            if self.thread is None:
                self.thread = TimedThread()
            thread = self.thread
        box: dict = {}
        done = threading.Event()
        thread.jobs.put((fn, box, done))
        if not done.wait(timeout):
            with self.lock:
                if self.thread is thread:
                    self.thread = None          # stuck in the adapter: the next call gets a new thread
            raise AdapterError(f"{what}: no answer within {timeout:g} s (hung?)")
        if "error" in box:
            exc = box.pop("error")
            kind, message = failure(exc)
            try:
                raise_failure(kind, message, what)
            except AdapterError as err:
                raise err from exc
        return box["value"]


# the one thread the plain adapters' calls share (`call_with_timeout`)
SHARED = Timed()


def call_with_timeout(fn, *args, timeout: float, what: str):
    """fn(*args) on the shared timed thread; AdapterError if it raises or does not return within
    `timeout` s (an AdapterError it raises keeps its message; other exceptions become
    "<what>: raised Type: message", first line only)."""
    return SHARED.run(lambda: fn(*args), what, timeout)


class InProcess:
    """The adapters live in this process; calls run on a `Timed` thread of their own under the timeout."""

    def __init__(self, spec):
        self.name = spec if isinstance(spec, str) else None     # a registered name rebuilds it anywhere
        if isinstance(spec, str):
            from specverify.adapters.registry import factory
            self.factory, self.first = factory(spec), None
        elif callable(spec) and (inspect.isclass(spec) or not hasattr(spec, "capabilities")):
            self.factory, self.first = spec, None
        else:
            self.factory, self.first = None, spec                # an adapter instance: no fresh copies
        self.instances: dict = {}
        self.timed = Timed()
        self.count = 0

    def new_id(self) -> int:
        self.count += 1
        return self.count

    def build(self, iid, what, timeout) -> dict:
        if iid == 0 and self.first is not None:
            adapter = self.first
        elif self.factory is None:
            raise AdapterError(f"{what}: the adapter was given as an instance: there is no factory to build "
                               "fresh ones with")
        else:
            adapter = self.timed.run(self.factory, what, timeout)
        self.instances[iid] = adapter
        return describe(adapter)

    def invoke(self, iid, target, args, kwargs, names, what, timeout):
        arrays = named_arrays(names, args, kwargs)
        callbacks = callbacks_of(args, kwargs)
        copies = [a.copy() for _, a in arrays]
        op, fn = target
        adapter = self.instances[iid]
        a2, k2 = Decoder(encode((args, kwargs), arrays, callbacks, worker=False), copies,
                          lambda j, *a, **k: callbacks[j](*a, **k)).load()
        call = (lambda: getattr(adapter, fn)(*a2, **k2)) if op == "call" else (lambda: fn(adapter, *a2, **k2))
        try:
            value = self.timed.run(call, what, timeout)
        finally:
            mutated = [name for (name, a), c in zip(arrays, copies) if not same_bytes(a, c)]
        return value, mutated

    def drop(self, iid):
        self.instances.pop(iid, None)

    def buffer(self, shape, dtype):
        return np.empty(shape, dtype)

    def close(self):
        self.instances.clear()


class Direct:
    """A plain adapter object behind a handle (`handle.plain_handle`): called as it is on the shared
    timed thread (`SHARED`), its inputs neither copied nor compared -- it is trusted not to change them,
    as when it is called directly --, so `last_mutated` is always []. No fresh adapters (no factory)."""

    factory = None

    def __init__(self, adapter):
        try:                                # held weakly where it can be: a pooled handle keeps nothing alive
            self.adapter = weakref.ref(adapter)
        except TypeError:
            self.adapter = lambda: adapter

    @property
    def instances(self) -> dict:
        return {0: self.adapter()}

    def new_id(self) -> int:
        return 0

    def build(self, iid, what, timeout) -> dict:
        raise AdapterError(f"{what}: the adapter was given as an object: there is no factory to build fresh ones with")

    def invoke(self, iid, target, args, kwargs, names, what, timeout):
        op, fn = target
        adapter = self.instances[iid]
        if op == "call":
            return SHARED.run(lambda: getattr(adapter, fn)(*args, **kwargs), what, timeout), []
        return SHARED.run(lambda: fn(adapter, *args, **kwargs), what, timeout), []

    def drop(self, iid):
        pass

    def buffer(self, shape, dtype):
        return np.empty(shape, dtype)

    def close(self):
        pass
