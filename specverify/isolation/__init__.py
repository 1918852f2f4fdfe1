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
models, processors where the adapter has them), `methods` (which of METHODS, the protocol's methods in
`adapters.protocol.PROTOCOL`, it has; each is also a method of the handle, so
`hasattr(handle, "verify_trees")` answers as for the adapter), and:

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
real-vocabulary rows (the same rows for every batch of a problem) and the battery's replicated rows
(`battery.harness.replicated_rows`). The adapter sees writable views into the argument arena, which the
worker maps privately: a page the adapter writes becomes the worker's own copy, the audit's bytes stay as they
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

What the boundary costs is measured by `python tests/bench_isolation.py --audit` (figures: docs/).

The package, one concern a module: `handle` (open_adapter, AdapterHandle), `wire` (what crosses:
method names and parameters, pickling, results, failures), `factories` (a factory named for another
process), `arena` (shared memory files), `pages` (written-page scanning), `process` (the audit's side
of a worker), `worker` (the worker's server), `inprocess` (in-process mode, the timed thread, plain
adapters behind a handle).
"""

from __future__ import annotations

from .factories import factory_ref, resolve_ref
from .handle import AdapterHandle, open_adapter, plain_handle
from .inprocess import THREAD_NAME, call_with_timeout
from .process import WORKER_ENV
from .wire import ATTRIBUTES, METHODS, PARAMS, describe
from .worker import serve

__all__ = ["open_adapter", "plain_handle", "AdapterHandle", "call_with_timeout", "factory_ref", "resolve_ref",
           "describe", "serve", "METHODS", "PARAMS", "ATTRIBUTES", "WORKER_ENV", "THREAD_NAME"]
