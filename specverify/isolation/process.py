"""Isolated mode, the audit's side: one worker process per `open_adapter` (`Process`), started as a
fresh interpreter (`BOOT`), reached through a socket, its arenas and shared buffers; timeouts, deaths,
kills and the last lines of its output."""

from __future__ import annotations

import json
import mmap
import os
import pickle
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from multiprocessing.connection import Connection

import numpy as np

from specverify.errors import AdapterError, InputError

from .arena import Arena, Pin, arena_layout, capacity, memory_file
from .wire import callbacks_of, encode, named_arrays, raise_failure, same_bytes

POLL_SLICE = 0.5            # s: a waiting audit checks this often whether the worker still exists
CLOSE_WAIT = 2.0            # s a closing worker gets to exit on its own before it is killed
REAP_WAIT = 5.0             # s to wait for a killed or dead worker's exit status
TAIL_LINES = 8              # last lines of the worker's output quoted in an error
TAIL_BYTES = 8192           # how much of the end of the output is read for them
LINE_CHARS = 200            # each quoted line clipped to this
# the worker's environment where the audit's does not say otherwise: OpenMP threads that spin between
# parallel regions (libgomp's default) take, while the worker waits for the next call, the CPU the audit
# needs to prepare it (the reference battery's numba prange kernels)
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}

# the worker's first words: the audit's sys.path, then serve() on the socket and lifeline descriptors
BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
        "from specverify.isolation import serve; serve(int(sys.argv[2]), int(sys.argv[3]))")


class Process:
    """The audit's side of one worker process: start, send, wait (timeout, death), kill, close."""

    def __init__(self, ref):
        self.ref = ref                          # how the worker gets the factory (`factory_ref`)
        self.log = tempfile.TemporaryFile(prefix="specverify-adapter-")
        ours, theirs = socket.socketpair()
        life_r, life_w = os.pipe()
        env = {**WORKER_ENV, **os.environ, "PYTHONUNBUFFERED": "1"}
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", BOOT, json.dumps(sys.path), str(theirs.fileno()), str(life_r)],
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
        self.arena: Arena | None = None        # arguments, written here
        self.out: Arena | None = None          # results, written by the worker
        self.dead: str | None = None            # how the worker ended, once it has
        self.count = 0
        self.dropped: list[int] = []
        self.pins: dict[int, Pin] = {}          # shared buffers (`buffer`), by pin id
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
            fd = memory_file(size)
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
            pin = Pin(pid, memory, size)
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
                    self.out = Arena(msg[1], fds[0])
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
            raise_failure(msg[1], msg[2], what)
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
            arrays = named_arrays(names, args, kwargs)
            callbacks = callbacks_of(args, kwargs)
            return self._guard(self._call, iid, target, args, kwargs, arrays, callbacks, what, timeout)

    def _call(self, iid, target, args, kwargs, arrays, callbacks, what, timeout):
        # arrays in a shared buffer cross as they are; the others are copied into the argument arena
        where = [self._pinned(a) for _, a in arrays]
        copied = [x for x, w in zip(arrays, where) if w is None]
        offsets, size = arena_layout(copied)
        if copied and (self.arena is None or self.arena.size < size):
            self._new_arena(size, what)
        views = [self.arena.view(off, a.shape, a.dtype) for (_, a), off in zip(copied, offsets)]
        for view, (_, a) in zip(views, copied):
            np.copyto(view, a)
        slots = iter(offsets)
        where = [(None, next(slots)) if w is None else w for w in where]
        op, fn = target
        try:
            payload = encode((fn, args, kwargs), arrays, callbacks, worker=True)
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
            mutated = [name for view, (name, a) in zip(views, copied) if not same_bytes(view, a)]
        del views
        if msg[-1]:                                   # the adapter kept a view: the arena is its now
            self.arena.close()
            self.arena = None
        return self._reply(msg, what), mutated

    def _new_arena(self, size, what):
        if self.arena is not None:
            self.arena.close()
        self.arena = Arena(capacity(size))
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
