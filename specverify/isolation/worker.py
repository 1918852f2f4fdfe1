"""Isolated mode, the worker's side: `serve` (started by `process.BOOT`) runs a `Server` that builds
adapters and answers calls until told to close or the audit goes away."""

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

from .arena import Arena, Slot, arena_layout, capacity
from .factories import resolve_ref
from .pages import WrittenPages
from .wire import Decoder, describe, failure, portable, same_bytes


def serve(sock_fd: int, lifeline: int) -> None:
    """The worker's main loop (started by `BOOT`): build adapters and answer calls until told to
    close, the audit's socket closes, or the lifeline pipe does (the audit is gone)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _start_watchdog(lifeline, sock_fd)      # first, while this process has one thread
    faulthandler.enable(all_threads=False)  # a crash leaves the crashing thread's stack in the output
    threading.Thread(target=_watch_lifeline, args=(lifeline,), daemon=True).start()
    Server(Connection(sock_fd), socket.socket(fileno=os.dup(sock_fd))).loop()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)                             # not waiting for threads an adapter may have left running


def _start_watchdog(lifeline: int, sock_fd: int) -> None:
    """Fork the watchdog: a process that only waits for the lifeline pipe to close and then SIGKILLs
    this worker's process group (the worker leads it), itself included. The lifeline thread below
    needs the GIL, which an adapter's C call may hold for ever (an orphan at 100% CPU when the audit
    is SIGKILLed); a process of its own needs nothing from the worker. Where it cannot be forked the
    thread alone watches."""
    try:
        pid = os.fork()
    except OSError:
        return
    if pid:
        return
    try:                                    # the watchdog: no Python of the worker runs past this point
        os.close(sock_fd)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        while os.read(lifeline, 1):
            pass
        os.killpg(os.getpgid(0), signal.SIGKILL)
    finally:
        os._exit(0)


def _watch_lifeline(fd: int) -> None:
    """Exit when the audit's end of the lifeline pipe closes (it has closed the handle, or died)."""
    while os.read(fd, 1):
        pass
    os._exit(0)


def _warm_numba() -> None:
    """Initialise numba's CPU target if the adapter loaded numba: its first compiled call (a cached
    kernel included) otherwise waits for it, and so does the audit; done right after the build reply,
    it overlaps the audit's own preparation of that call."""
    if "numba" not in sys.modules:
        return
    try:
        from numba.core.registry import cpu_target
        cpu_target.target_context.refresh()
    except Exception:  # noqa: BLE001 - only a head start: the first call does it otherwise
        pass


class Server:
    """One worker's adapters (by instance id), its arenas and its side of the socket."""

    def __init__(self, conn: Connection, sock: socket.socket):
        self.conn, self.sock = conn, sock
        self.factory = None
        self.instances: dict = {}
        self.arena: Arena | None = None     # arguments, written by the audit
        self.out: Arena | None = None       # results, written here
        self.written = WrittenPages.probe()  # None: the audit compares the arguments itself
        self.pins: dict[int, tuple[Arena, int]] = {}   # shared buffers: (private mapping, descriptor)
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
            if op == "pin":                           # a shared buffer: kept apart only with a pagemap
                _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
                if self.written is None:
                    os.close(fds[0])
                else:
                    self.pins[msg[1]] = (Arena(msg[2], fds[0], private=True), fds[0])
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
                        and not same_bytes(arena.bytes[off:off + n], arena.clean[off:off + n]):
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
        self.pins[pid] = (Arena(arena.size, fd, private=True), fd)

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
            slots.extend(Slot((self.arena if pin is None else self.pins[pin][0]).view(off, shape, dtype))
                         for pin, off, shape, dtype, _ in layout)
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
        offsets, size = arena_layout([(None, r) for r in raws])
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
