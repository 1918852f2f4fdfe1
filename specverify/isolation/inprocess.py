"""In-process mode of `specverify.isolation` (`open_adapter(..., isolated=False)`, for debugging): the
adapters live in the audit's process and each call runs in a long-lived daemon thread under the timeout,
with the same argument copies and input check as the worker."""

from __future__ import annotations

import inspect
import queue
import threading

from specverify.errors import AdapterError

from .wire import Decoder, callables_in, describe, encode, failure, named_arrays, raise_failure, same_bytes

THREAD_NAME = "specverify-adapter"


class CallThread:
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


class InProcess:
    """The adapters live in this process; calls run in a `CallThread` under the timeout."""

    def __init__(self, spec):
        if isinstance(spec, str):
            from specverify.adapters.registry import factory
            self.factory, self.first = factory(spec), None
        elif callable(spec) and (inspect.isclass(spec) or not hasattr(spec, "capabilities")):
            self.factory, self.first = spec, None
        else:
            self.factory, self.first = None, spec                # an adapter instance: no fresh copies
        self.instances: dict = {}
        self.thread: CallThread | None = None
        self.count = 0

    def new_id(self) -> int:
        self.count += 1
        return self.count

    def _timed(self, fn, what, timeout):
        if threading.current_thread().name == THREAD_NAME:       # nested: already timed
            return fn()
        if self.thread is None:
            self.thread = CallThread()
        box: dict = {}
        done = threading.Event()
        self.thread.jobs.put((fn, box, done))
        if not done.wait(timeout):
            self.thread = None                  # stuck in the adapter: the next call gets a new thread
            raise AdapterError(f"{what}: no answer within {timeout:g} s (hung?)")
        if "error" in box:
            exc = box.pop("error")
            kind, message = failure(exc)
            try:
                raise_failure(kind, message, what)
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
        arrays = named_arrays(names, args, kwargs)
        callbacks = callables_in(args, kwargs)
        copies = [a.copy() for _, a in arrays]
        op, fn = target
        adapter = self.instances[iid]
        a2, k2 = Decoder(encode((args, kwargs), arrays, callbacks, worker=False), copies,
                          lambda j, *a, **k: callbacks[j](*a, **k)).load()
        call = (lambda: getattr(adapter, fn)(*a2, **k2)) if op == "call" else (lambda: fn(adapter, *a2, **k2))
        try:
            value = self._timed(call, what, timeout)
        finally:
            mutated = [name for (name, a), c in zip(arrays, copies) if not same_bytes(a, c)]
        return value, mutated

    def drop(self, iid):
        self.instances.pop(iid, None)

    def close(self):
        self.instances.clear()
