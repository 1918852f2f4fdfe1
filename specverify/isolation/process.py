"""The audit's side of an adapter's worker process (`specverify.isolation`): start it, send calls,
wait for answers under the timeout, name how it died, kill it."""

from __future__ import annotations

import json
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

from .wire import Arena, capacity, encode, layout_of, named_arrays, callables_in, raise_failure, same_bytes

POLL_SLICE = 0.5            # s: a waiting audit checks this often whether the worker still exists
CLOSE_WAIT = 2.0            # s a closing worker gets to exit on its own before it is killed
REAP_WAIT = 5.0             # s to wait for a killed or dead worker's exit status
TAIL_LINES = 8              # last lines of the worker's output quoted in an error
TAIL_BYTES = 8192           # how much of the end of the output is read for them
LINE_CHARS = 200            # each quoted line clipped to this
# the worker's environment where the audit's does not say otherwise: OpenMP threads that spin between
# parallel regions (libgomp's default) take, while the worker waits for the next call, the CPU the audit
# needs to prepare it -- the reference battery (numba prange kernels) took 2.5x the CPU without this
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}

# the worker's first words: the audit's sys.path, then serve() on the socket and lifeline descriptors
_BOOT = ("import sys, json; sys.path[:] = json.loads(sys.argv[1]); "
         "from specverify.isolation.worker import serve; serve(int(sys.argv[2]), int(sys.argv[3]))")


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
                [sys.executable, "-c", _BOOT, json.dumps(sys.path), str(theirs.fileno()), str(life_r)],
                stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
                pass_fds=(theirs.fileno(), life_r), start_new_session=True, env=env)
        finally:
            theirs.close()
            os.close(life_r)
        # the worker exits when this pipe closes: on close(), or when this process ends in any way
        self.lifeline = os.fdopen(life_w, "wb", buffering=0)
        # a handle dropped unclosed, or one open at exit, still has its worker killed
        self.reaper = weakref.finalize(self, kill_group, self.proc)
        self.sock = ours
        self.conn = Connection(os.dup(ours.fileno()))
        self.poller = select.poll()              # made once: multiprocessing's poll() builds one a call
        self.poller.register(self.conn.fileno(), select.POLLIN)
        self.arena: Arena | None = None        # arguments, written here
        self.out: Arena | None = None          # results, written by the worker
        self.dead: str | None = None            # how the worker ended, once it has
        self.count = 0
        self.dropped: list[int] = []
        self.lock = threading.Lock()

    def new_id(self) -> int:
        self.count += 1
        return self.count

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
            sig = signal_name(-rc)
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
            callbacks = callables_in(args, kwargs)
            offsets, size = layout_of(arrays)
            return self._guard(self._call, iid, target, args, kwargs, arrays, callbacks, offsets, size,
                               what, timeout)

    def _call(self, iid, target, args, kwargs, arrays, callbacks, offsets, size, what, timeout):
        if self.arena is None or self.arena.size < size:
            self._new_arena(size, what)
        views = [self.arena.view(off, a.shape, a.dtype) for (_, a), off in zip(arrays, offsets)]
        for view, (_, a) in zip(views, arrays):
            np.copyto(view, a)
        op, fn = target
        try:
            payload = encode((fn, args, kwargs), arrays, callbacks, worker=True)
        except Exception as exc:  # noqa: BLE001 - e.g. a lambda given to run()
            raise AdapterError(f"{what}: the call cannot be sent to the adapter process "
                               f"({type(exc).__name__}: {exc})".splitlines()[0]) from exc
        layout = [(off, a.shape, a.dtype, name) for (name, a), off in zip(arrays, offsets)]
        dropped, self.dropped = self.dropped, []
        self._send((op, iid, layout, payload, dropped), what)
        msg = self._wait(what, timeout, callbacks)
        mutated = msg[3]
        if mutated is None:                           # the worker cannot tell: compare here
            mutated = [name for view, (name, a) in zip(views, arrays) if not same_bytes(view, a)]
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
        kill_group(self.proc)
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


def kill_group(proc: subprocess.Popen) -> None:
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


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"
