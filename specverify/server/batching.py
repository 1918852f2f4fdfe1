"""Continuous batching for the server: one engine, one thread, requests joining between steps.

The HTTP handlers never touch the engine. Each completion choice becomes a `Job` (prompt ids, its
`SamplingParams`, whether it wants logprobs, and `deliver`, a thread-safe callback); `Batcher.submit`
queues jobs and wakes the engine thread, which loops:

    take every queued job -> engine.add_request (a bad request: an "error" event for that job alone)
    if anything is unfinished: events = engine.step()      (one launch: prefills, decodes, verifies)
        per event: ("tokens", job, kept ids, their logprobs), and ("done", job, finish_reason, text,
                   completion tokens charged = the kept ids, prompt positions the prefix cache served)
    else: sleep until a job arrives

So a request that arrives while others decode is admitted before the next step and shares its launches
(the scheduler's continuous batching, `engine/scheduler.py`), and nothing waits for a batch to fill.
A step that raises fails every job in flight (a 500 for their requests) and the engine is rebuilt.

Logprobs: for every kept token the engine hands its logits row (`RunOptions.record_logits`: the model's
row after logits processors, before temperature / top-k / top-p); the batcher turns it into the
float64 log-softmax  x - (m + log(sum(exp(x - m))))  with m = max(x) and the sum in numpy's pairwise
order over the row -- a function of the row's bits alone, so a batch-invariant model gives the same
logprob bytes whatever else is in flight. A token's entry: (its logprob, the top `logprobs` (id, logprob)
pairs, largest first, lowest id first on ties, -inf entries left out).

Seeds: choice i of a request with `seed` s uses s for i = 0 and `choice_seed(s, i)` for i > 0; a request
without a seed draws from the engine's stream (the server's --seed and the request's id).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np

from specverify.errors import InputError

STOP_TIMEOUT_S = 5.0          # how long `stop` waits for the engine thread to end


def stream_delta(decode, tokens: list, sent: str, stops: tuple, hold_unfinished: bool = True) -> str:
    """The text a stream may send after `sent` once a choice holds `tokens`: the decoded text, less the
    last len(longest stop) - 1 characters (a stop string may still complete there), cut before a stop
    string found in it (the engine stopped there: nothing from it on is sent) and before an unfinished
    UTF-8 sequence ("\ufffd"; `hold_unfinished` False only in the broken variant 55, which sends it).
    "" when nothing new is safe to send."""
    text = decode(tokens)
    hold = max((len(x) for x in stops), default=1) - 1
    safe = len(text) - hold
    hits = [text.find(x) for x in stops if x and x in text]
    if hits:
        safe = min(safe, min(hits))
    while hold_unfinished and safe > len(sent) and text[safe - 1] == "\ufffd":
        safe -= 1
    return text[len(sent):safe] if safe > len(sent) else ""


@dataclass(eq=False)
class Job:
    """One completion choice in the engine: `deliver(event)` is called from the engine thread with
    ("tokens", ids, entries) / ("done", finish_reason, text, tokens charged, prompt positions cached) /
    ("error", status, message)."""
    prompt: list                      # engine prompt ids (a toy model's sentinel first)
    params: object                    # engine.SamplingParams
    logprobs: int | None              # top entries wanted per token (0: the token's own), None: none
    deliver: object
    rid: int = -1
    rows: dict = field(default_factory=dict)   # output index -> log-softmax row (logprobs only)
    emitted: int = 0                  # output tokens delivered so far


def choice_seed(seed: int, index: int) -> int:
    """The seed of choice `index` > 0 of a request seeded `seed` (63 bits, from SeedSequence([seed, index]))."""
    return int(np.random.SeedSequence([int(seed), int(index)]).generate_state(1, dtype=np.uint64)[0] >> np.uint64(1))


def log_softmax(row) -> np.ndarray:
    """float64 log-softmax of one logits row [V] (torch or numpy); module docstring for the order."""
    x = row.detach().double().numpy() if hasattr(row, "detach") else np.asarray(row, np.float64)
    m = x.max()
    return x - (m + np.log(np.sum(np.exp(x - m))))


def entries(lsm: np.ndarray, token: int, top: int) -> tuple:
    """(logprob of `token`, [(id, logprob)] of the `top` largest finite entries, largest first)."""
    pairs = []
    if top:
        order = np.lexsort((np.arange(lsm.shape[0]), -lsm))[:top]
        pairs = [(int(i), float(lsm[i])) for i in order if np.isfinite(lsm[i])]
    return float(lsm[token]), pairs


class Batcher:
    """The engine thread. `make_engine(record_logits)` builds a fresh engine (`app.build_engine`)."""

    def __init__(self, make_engine):
        self.make_engine = make_engine
        self.engine = make_engine(self._record)
        self.jobs: dict = {}              # rid -> Job in the engine
        self.pending: list = []
        self.cond = threading.Condition()
        self.stopping = False
        self.next_rid = 0
        self.thread = threading.Thread(target=self._loop, name="specverify-engine", daemon=True)
        self.steps = 0
        self.earlier: dict = {}           # counters of engines rebuilt after a failed step

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()
        self.thread.join(STOP_TIMEOUT_S)

    def submit(self, jobs: list) -> None:
        with self.cond:
            for job in jobs:
                job.rid = self.next_rid
                self.next_rid += 1
            self.pending.extend(jobs)
            self.cond.notify_all()

    def in_flight(self) -> int:
        with self.cond:
            return len(self.jobs) + len(self.pending)

    def counters(self) -> list:
        """[(name, value, help)] of the /metrics endpoint, summed over every engine this server built."""
        m = self.engine.metrics
        now = {"num_preemptions_total": m.num_preemptions, "num_decode_preemptions_total": m.num_decode_preemptions,
               "num_steps_total": m.num_steps, "num_emitted_tokens_total": m.num_emitted}
        helps = {"num_preemptions_total": "running requests whose KV was taken back and later recomputed",
                 "num_decode_preemptions_total": "of those, requests preempted while decoding (after their "
                                                 "first output token, its KV fed)",
                 "num_steps_total": "engine steps (target launches)",
                 "num_emitted_tokens_total": "tokens kept"}
        return [(k, now[k] + self.earlier.get(k, 0), helps[k]) for k in now]

    def drain(self, jobs: list) -> None:
        """Run `jobs` to the end on the caller's thread, for in-process use (the engine-level `serving`
        adapter, `adapters/specverify_serving.py`; the engine thread must not be started): they are admitted
        together, as one request's choices are, and the engine steps until every one has its "done" (or
        "error") event. A step that raises propagates (the caller's adapter error)."""
        if self.thread.is_alive():
            raise RuntimeError("Batcher.drain: the engine thread is running; submit() to it instead")
        self.submit(jobs)
        new, self.pending = self.pending, []
        self._admit(new)
        while any(job.rid in self.jobs for job in new):
            events = self.engine.step()
            self.steps += 1
            self._dispatch(events)

    # -- the engine thread ---------------------------------------------------------------------------
    def _record(self, rid, index, row) -> None:
        job = self.jobs.get(rid)
        if job is not None and job.logprobs is not None:
            job.rows[index] = log_softmax(row)

    def _admit(self, new: list) -> None:
        for job in new:
            try:
                self.engine.add_request(job.prompt, job.params, request_id=job.rid)
            except InputError as exc:
                job.deliver(("error", 400, str(exc)))
                continue
            self.jobs[job.rid] = job

    def _dispatch(self, events) -> None:
        for rid, kept, finished in events:
            job = self.jobs[rid]
            if kept:
                out = []
                if job.logprobs is not None:
                    for tok in kept:
                        out.append(entries(job.rows.pop(job.emitted), tok, job.logprobs))
                        job.emitted += 1
                job.deliver(("tokens", [int(t) for t in kept], out))
            if finished:
                output = self.engine.outputs.pop(rid)
                del self.jobs[rid]
                job.deliver(("done", output.finish_reason, output.text, self._charged(output), output.cached_tokens))

    def _charged(self, output) -> int:
        """The completion tokens a finished request is charged (usage): its kept ids, unless the engine
        keeps its own account (`completion_tokens(output)`: only a broken variant does)."""
        account = getattr(self.engine, "completion_tokens", None)
        return len(output.token_ids) if account is None else int(account(output))

    def _fail_all(self, message: str) -> None:
        for job in self.jobs.values():
            job.deliver(("error", 500, message))
        self.jobs.clear()
        for name, value, _ in self.counters():
            self.earlier[name] = value
        self.engine = self.make_engine(self._record)

    def _loop(self) -> None:
        while True:
            with self.cond:
                while not self.pending and not self.jobs and not self.stopping:
                    self.cond.wait()
                if self.stopping:
                    for job in list(self.jobs.values()) + self.pending:
                        job.deliver(("error", 503, "the server is shutting down"))
                    return
                new, self.pending = self.pending, []
            self._admit(new)
            if not self.engine.has_unfinished():
                continue
            try:
                events = self.engine.step()
            except Exception as exc:          # an engine bug must not kill the server: its requests get a 500
                self._fail_all(f"engine step failed: {type(exc).__name__}: {exc}")
                continue
            self.steps += 1
            self._dispatch(events)
