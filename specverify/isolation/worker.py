"""The worker process of `specverify.isolation`: builds adapters and answers the audit's calls."""

from __future__ import annotations

import faulthandler
import gc
import mmap
import os
import pickle
import signal
import socket
import sys
import threading
import weakref
from multiprocessing.connection import Connection

import numpy as np

from specverify.errors import AdapterError, InputError

from .wire import (Arena, Decoder, Slot, WrittenPages, capacity, describe, failure, layout_of, portable,
                   resolve_ref, same_bytes)


def serve(sock_fd: int, lifeline: int) -> None:
    """The worker's main loop (started by `process._BOOT`): build adapters and answer calls until told to
    close, the audit's socket closes, or the lifeline pipe does (the audit is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    faulthandler.enable(all_threads=False)  # a crash leaves the crashing thread's stack in the output
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
    Server(Connection(sock_fd), socket.socket(fileno=os.dup(sock_fd))).loop()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)                             # not waiting for threads an adapter may have left running


def _watch_lifeline(fd: int) -> None:
    """Exit when the audit's end of the lifeline pipe closes (it has closed the handle, or died)."""
    while os.read(fd, 1):
        pass
    os._exit(0)


class Server:
    """One worker's adapters (by instance id), its arenas and its side of the socket."""

    def __init__(self, conn: Connection, sock: socket.socket):
        self.conn, self.sock = conn, sock
        self.factory = None
        self.instances: dict = {}
        self.arena: Arena | None = None     # arguments, written by the audit
        self.out: Arena | None = None       # results, written here
        self.written = WrittenPages.probe()  # None: the audit compares the arguments itself
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
                self.arena = Arena(msg[1], fds[0], private=self.written is not None)
                self.arena.close_fd()
                continue
            if op == "build":
                reply = self.build(msg[1], msg[2])
                self.send((reply + ([],))[:3] + ([], False))
                continue
            _, iid, layout, payload, dropped = msg
            for gone in dropped:
                self.instances.pop(gone, None)
            slots = []
            reply = self.call(op, iid, layout, payload, slots)
            refs = [weakref.ref(s) for s in slots]
            del slots
            kept = any(r() is not None for r in refs)
            if kept:
                gc.collect()                          # a traceback cycle may hold the inputs
                kept = any(r() is not None for r in refs)
            mutated = self.mutated(layout, restore=not kept)
            if kept:
                self.arena = None                     # the adapter's views keep the old mapping alive
            self.send(reply + (mutated, kept))

    def mutated(self, layout, restore: bool) -> list[str] | None:
        """The names of the arguments the call wrote to and changed (None: cannot tell, the audit
        compares); `restore` the written pages to the audit's bytes for the next call."""
        if self.written is None or not layout:
            return None if self.written is None else []
        arena = self.arena
        end = max(off + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize for off, shape, dtype, _ in layout)
        pages = self.written.pages(arena.address, end)
        if not pages.size:
            return []
        page = mmap.PAGESIZE
        changed = []
        for off, shape, dtype, name in layout:
            n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
            if n and ((pages >= off // page) & (pages < -(-(off + n) // page))).any() \
                    and not same_bytes(arena.bytes[off:off + n], arena.clean[off:off + n]):
                changed.append(name)
        if restore:                                   # back to the file's pages (the audit's bytes)
            arena.map.madvise(mmap.MADV_DONTNEED, int(pages[0]) * page, int(pages[-1] - pages[0] + 1) * page)
        return changed

    def build(self, iid, ref):
        try:
            if ref is not None:
                self.factory = resolve_ref(ref)
        except InputError as exc:
            return ("error", "input", str(exc))
        except AdapterError as exc:
            return ("error", "adapter", str(exc))
        except BaseException as exc:  # noqa: BLE001
            return ("error", "what", f"the factory could not be loaded ({type(exc).__name__}: {exc})")
        try:
            adapter = self.factory()
        except BaseException as exc:  # noqa: BLE001 - an adapter may raise anything
            return ("error",) + failure(exc)
        self.instances[iid] = adapter
        return ("ok", pickle.dumps(describe(adapter)))

    def call(self, op, iid, layout, payload, slots):
        try:
            slots.extend(Slot(self.arena.view(off, shape, dtype)) for off, shape, dtype, _ in layout)
            fn, args, kwargs = Decoder(payload, [np.asarray(s) for s in slots], self.callback).load()
        except Exception as exc:  # noqa: BLE001
            return ("error", "what", f"the call could not be rebuilt in the adapter process "
                                     f"({type(exc).__name__}: {exc})")
        adapter = self.instances[iid]
        try:
            value = getattr(adapter, fn)(*args, **kwargs) if op == "call" else fn(adapter, *args, **kwargs)
        except BaseException as exc:  # noqa: BLE001 - an adapter may raise anything
            return ("error",) + failure(exc)
        finally:
            del args, kwargs
        buffers = []
        try:
            data = pickle.dumps(portable(value), 5, buffer_callback=buffers.append)
        except Exception as exc:  # noqa: BLE001
            return ("error", "what", f"returned {type(value).__name__}, which cannot be sent back to the audit "
                                     f"({type(exc).__name__}: {exc})")
        return ("ok", data, self.put(buffers))

    def put(self, buffers) -> list[tuple[int, int]]:
        """Copy out-of-band pickle buffers into the result arena (a bigger one, sent first, if they do
        not fit); their (offset, size)."""
        raws = [np.frombuffer(b.raw(), np.uint8) for b in buffers]
        offsets, size = layout_of([(None, r) for r in raws])
        if self.out is None or self.out.size < size:
            self.out = Arena(capacity(size))
            data = pickle.dumps(("out", self.out.size))
            with self.lock:
                self.conn.send_bytes(data)
                socket.send_fds(self.sock, [b"A"], [self.out.fd])
            self.out.close_fd()
        for off, r in zip(offsets, raws):
            self.out.bytes[off:off + r.size] = r
        return [(off, r.size) for off, r in zip(offsets, raws)]
