"""The mutable state of one audit, owned by `audit.run_audit` and reached through `ctx.state`.

The context (`base.Context`) is frozen: settings only. What an audit learns or builds while it runs
lives here, so two audits in one process share nothing:

    calls, changed_inputs   adapter calls made through a handle and the inputs they changed (the
                            `contract.inputs_unchanged` row)
    onestep                 the one-step samples (`onestep.collect`), per engine, read by every check
                            that shares them; onestep_seconds: the time spent drawing them
    buffers                 row buffers reused across a check's batches (`harness.replicated_rows`)
    shared                  what the parallel jobs of one audit share (`Shared`): exact laws, the
                            adapters' own models

A parallel job (`audit.run_parallel`) works on `state.job()`: counters, samples and buffers of its
own (its adapter is another process), the audit's `Shared`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field


@dataclass(eq=False)
class Shared:
    """What every job of one audit shares: exact laws by key (deterministic, so a job may use another
    job's), the adapters' own target/draft models, and the lock that builds each of them once."""

    laws: dict = field(default_factory=dict)
    models: dict = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def law(self, key, build):
        """The law memoised under `key`, built by `build()` the first time."""
        law = self.laws.get(key)
        if law is None:
            law = self.laws[key] = build()
        return law


@dataclass(eq=False)
class AuditState:
    """The state of one audit (or of one job of a parallel audit); see the module docstring."""

    shared: Shared = field(default_factory=Shared)
    calls: int = 0
    changed_inputs: list = field(default_factory=list)      # [(what, [array names])]
    onestep: dict = field(default_factory=dict)             # id(engine) -> [onestep.Sampled]
    onestep_seconds: float = 0.0
    buffers: dict = field(default_factory=dict)             # key -> (buffer, owner)

    def job(self) -> AuditState:
        """A fresh state for one more job of the same audit: its own counters, samples and buffers,
        the audit's shared laws and models."""
        return AuditState(shared=self.shared)

    def note_call(self, what: str, changed) -> None:
        """One adapter call made through a handle, and the names of the input arrays it changed."""
        self.calls += 1
        if changed:
            self.changed_inputs.append((what, list(changed)))
