"""Continuous batching: admit waiting requests while there is room, pick kappa for the batch size.

Every step runs all running requests in one launch: newly admitted ones prefill (their prompt less
any prefix-cache hit, 0 drafts), the others verify k_b = min(kappa(B), request's own kappa,
tokens left - 1) drafts -- k_b = 0 is plain decode, through the same path. Admission is FIFO and
reserves KV blocks for the prompt plus one verify window; a request that cannot fit waits.
"""

from __future__ import annotations

import bisect
from collections import deque

from specverify.errors import InputError


DEFAULT_KAPPA = 3          # drafts per verify step when none is given: the API's and the CLI's default


def check_kappa(kappa, *, schedule: bool = True):
    """The one validation of a kappa: an int >= 0, or (when `schedule`) a non-empty {max batch size >= 1:
    kappa >= 0}; returns the int, or the table as sorted (batch size, kappa) pairs. InputError otherwise."""
    if isinstance(kappa, int):
        if kappa < 0:
            raise InputError(f"kappa {kappa} must be >= 0")
        return kappa
    if not schedule:
        raise InputError(f"kappa {kappa!r} must be an integer >= 0")
    items = sorted((int(b), int(k)) for b, k in dict(kappa).items())
    if not items or any(b < 1 or k < 0 for b, k in items):
        raise InputError(f"kappa schedule {kappa!r}: keys are batch sizes >= 1, values kappas >= 0")
    return items


def spec_kappa(proposer: str, kappa):
    """The kappa a run with `proposer` uses: `kappa` as given, or 0 when there is no speculation
    (proposer "none": plain decode is kappa 0)."""
    return 0 if proposer == "none" else kappa


class KappaSchedule:
    """kappa as a function of the batch size: an int (constant), or {max_batch_size: kappa}
    (vLLM's num_speculative_tokens_per_batch_size): the entry with the smallest key >= B, and 0
    beyond the largest key. Built from a value `check_kappa` accepts."""

    def __init__(self, kappa):
        checked = check_kappa(kappa)
        if isinstance(checked, int):
            self.table = None
            self.kappa = checked
        else:
            self.table = checked
            self.kappa = max(k for _, k in checked)

    @classmethod
    def of(cls, kappa) -> "KappaSchedule":
        """`kappa` itself if it is already a schedule (checked when built), else a new one."""
        return kappa if isinstance(kappa, cls) else cls(kappa)

    def __call__(self, batch_size: int) -> int:
        if self.table is None:
            return self.kappa
        i = bisect.bisect_left([b for b, _ in self.table], batch_size)
        return self.table[i][1] if i < len(self.table) else 0

    @property
    def max_kappa(self) -> int:
        return self.kappa


class Scheduler:
    def __init__(self, cache, max_batch_size: int, kappa: KappaSchedule):
        self.cache = cache
        self.max_batch_size = max_batch_size
        self.kappa = kappa
        self.waiting: deque = deque()
        self.running: list = []

    def add(self, req) -> None:
        self.waiting.append(req)

    def admit(self) -> list:
        """Move waiting requests into the running batch while they fit; return the admitted ones."""
        admitted = []
        while self.waiting and len(self.running) < self.max_batch_size:
            req = self.waiting[0]
            need = self.cache.blocks_needed(len(req.tokens) + self.kappa.max_kappa + 1)
            if need + self.shortfall() > self.cache.num_available():
                if not self.running and not admitted:
                    raise InputError(f"request {req.id} needs {need} KV blocks; the cache has "
                                     f"{self.cache.num_available()} free (raise num_blocks)")
                break
            self.waiting.popleft()
            self.cache.match_prefix(req.kv, req.tokens)
            req.num_fed = req.kv.num_computed
            if not req.num_preemptions:           # usage reports the prompt's first admission, not a recompute
                req.cached_tokens = req.kv.num_computed
            self.running.append(req)
            admitted.append(req)
        return admitted

    def shortfall(self) -> int:
        """Blocks the running requests still lack for this step (their tokens, max_kappa drafts and one)."""
        extra = self.kappa.max_kappa + 1
        return sum(max(0, self.cache.blocks_needed(len(r.tokens) + extra) - len(r.kv.block_ids)) for r in self.running)

    def preempt(self, req) -> None:
        """Give back `req`'s KV; it waits at the head of the queue (recomputed when it fits again)."""
        self.running.remove(req)
        self.cache.release(req.kv)
        req.kv = type(req.kv)()
        self.waiting.appendleft(req)

    def finish(self, req) -> None:
        self.running.remove(req)
        self.cache.release(req.kv)
