"""The engine loop: one target launch a step over the flattened ragged verify layout.

    step():
        admit waiting requests (prefix-cache hit -> fewer prompt tokens to prefill)
        B = running requests; kappa = schedule(B)
        k_b = 0 for a request still prefilling (at most `prefill_chunk` prompt tokens a step when set; a
              chunk that leaves prompt tokens unfed emits nothing), else min(kappa, its kappa, tokens left - 1)
        drafts_b, q_b = proposer.propose(requests with k_b > 0)      (<= k_b each; q None = one-hot)
        new_b = its unfed tokens (the prompt, or the last emitted token) + drafts_b
        logits = target.forward(build_step(new_b, n_logits_b = len(drafts_b) + 1))   # [sum, V]
        per request: its rows processed (penalties, bias, bans, min_tokens: row i with output + drafts_b[:i])
        the model's rows and each processed row checked finite; every sampled request's rows
        transformed (one call per distinct setting)
        per request: emitted, m = the chain rule on its rows (greedy: argmax) with its own generator
                     roll the KV back to the finalized tokens (old length + m)
                     append emitted tokens one by one, stopping at EOS / stop token / stop
                     string / max_tokens (the rest of an accepted run is discarded)
                     commit the finalized full blocks to the prefix cache; free when finished

Plain decode is kappa = 0: every request has 0 drafts and one logits row, through the same code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch

from specverify.errors import InputError
from specverify.reference.transforms import Transform

from . import processors
from .kv_cache import SeqKV
from .layout import build_step
from .metrics import SpecMetrics
from .sampler import check_finite, greedy_verify, probs_many, sample_probs
from .scheduler import KappaSchedule, Scheduler, check_kappa


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0       # 0 = greedy
    top_k: int = 0                 # 0 = off
    top_p: float = 1.0             # 1 = off
    seed: int | None = None        # the request's own generator; None: derived from the engine seed
    max_tokens: int = 64
    stop: tuple = ()               # stop strings (need a detokenizer)
    stop_token_ids: tuple = ()
    ignore_eos: bool = False
    kappa: int | None = None       # cap on this request's drafts (None: the batch kappa)
    # logits processors (`engine/processors.py`: semantics and order), off by default
    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    min_tokens: int = 0            # EOS and stop_token_ids masked until this many output tokens
    logit_bias: tuple = ()         # ((token, bias), ...)
    min_p: float = 0.0
    bad_token_ids: tuple = ()
    bad_sequences: tuple = ()      # ((token, ...), ...): the last token banned after the others
    grammar: tuple | None = None   # DFA table[state][token] -> next state or -1 (not allowed); start 0

    def __post_init__(self):
        for name in ("stop", "stop_token_ids", "logit_bias", "bad_token_ids", "bad_sequences"):
            value = getattr(self, name)     # a string is not a collection here: stop="###" would stop at "#"
            if isinstance(value, (str, bytes)) or not isinstance(value, (tuple, list)):
                raise InputError(f"{name} {value!r:.80} must be a tuple" + (" (a missing comma? write (x,))"
                                                                             if isinstance(value, str) else ""))
        if any(not isinstance(x, str) or not x for x in self.stop):
            raise InputError(f"stop {self.stop!r:.80}: stop strings must be non-empty strings")
        Transform(self.temperature, self.top_k, self.top_p)      # validates the sampling knobs
        for name in ("repetition_penalty", "frequency_penalty", "presence_penalty", "min_p"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
                raise InputError(f"{name} {v!r} must be a finite number")
        if self.repetition_penalty <= 0:
            raise InputError(f"repetition_penalty {self.repetition_penalty} must be > 0 (1 = off)")
        if not 0.0 <= self.min_p <= 1.0:
            raise InputError(f"min_p {self.min_p} must be in [0, 1] (0 = off)")
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, int) or self.min_tokens < 0:
            raise InputError(f"min_tokens {self.min_tokens!r} must be an integer >= 0")
        try:
            bias = tuple((int(t), float(b)) for t, b in self.logit_bias)
        except (TypeError, ValueError):
            raise InputError(f"logit_bias {self.logit_bias!r}: expected pairs (token, bias)") from None
        if any(t < 0 or not np.isfinite(b) for t, b in bias):
            raise InputError(f"logit_bias {self.logit_bias!r}: token ids >= 0 and finite biases")
        object.__setattr__(self, "logit_bias", bias)
        if any(int(t) < 0 for t in self.bad_token_ids):
            raise InputError(f"bad_token_ids {self.bad_token_ids!r}: token ids must be >= 0")
        if any(int(t) < 0 for t in self.stop_token_ids):
            raise InputError(f"stop_token_ids {self.stop_token_ids!r}: token ids must be >= 0")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, (int, np.integer))
                                      or not 0 <= self.seed < 2**63):
            raise InputError(f"seed {self.seed!r} must be an integer in [0, 2^63)")
        if any(not len(q) or any(int(t) < 0 for t in q) for q in self.bad_sequences):
            raise InputError(f"bad_sequences {self.bad_sequences!r}: non-empty sequences of token ids >= 0")
        if self.grammar is not None:
            g = self.grammar
            if (not g or any(len(r) != len(g[0]) for r in g)
                    or any(not -1 <= int(x) < len(g) for r in g for x in r) or any(max(r) < 0 for r in g)):
                raise InputError("grammar: a rectangular table of next states in [-1, states), "
                                 "every state allowing a token")
        if self.max_tokens < 1:
            raise InputError(f"max_tokens {self.max_tokens} must be >= 1")
        if self.kappa is not None:
            check_kappa(self.kappa, schedule=False)


@dataclass(eq=False)          # a request is an entity: compared by identity (the scheduler removes it from its list)
class Request:
    id: int
    prompt: list
    params: SamplingParams
    rng: np.random.Generator           # target coins
    draft_rng: np.random.Generator     # draft sampling
    tokens: list = field(default_factory=list)
    kv: SeqKV = field(default_factory=SeqKV)
    num_fed: int = 0                   # tokens whose K/V the target has (== kv.num_computed unless rollback is skipped)
    finished: bool = False
    finish_reason: str | None = None
    stop_text_end: int | None = None   # text length before the matched stop string
    num_steps: int = 0
    stop_ids: tuple = ()               # EOS (unless ignore_eos) and stop_token_ids: what min_tokens masks
    cached_tokens: int = 0             # prompt positions served from the prefix cache at admission
    num_preemptions: int = 0           # times its KV was taken back under a tight budget (recomputed later)
    resume_decode: bool = False        # preempted while decoding: its resumed step drafts as that step would have

    @property
    def output(self) -> list:
        return self.tokens[len(self.prompt):]


@dataclass
class RequestOutput:
    request_id: int
    prompt_token_ids: list
    token_ids: list
    finish_reason: str
    text: str | None = None
    num_steps: int = 0
    cached_tokens: int = 0             # prompt positions the prefix cache served (the server's usage reports it)


class Engine:
    """target: a model (protocol in `model.py`); proposer: see `proposers.py` (None: plain decode).

    record_logits(request_id, output_index, logits_row) is called for every kept token with the
    target row it was decided from (the bitwise audit compares these). A subclass may override
    `roll_back_rejected` and `kv_positions_per_token`: the bug zoo's stale-KV engine does, a
    deliberately wrong engine for tests."""

    def __init__(self, target, proposer=None, *, kappa=0, max_batch_size: int = 8, num_blocks: int = 1024,
                 block_size: int = 16, eos_token_id: int | None = None, detokenize=None, seed: int = 0,
                 record_logits=None, prefix_caching: bool = True, prefill_chunk: int | None = None):
        if prefill_chunk is not None and (isinstance(prefill_chunk, bool) or int(prefill_chunk) < 1):
            raise InputError(f"prefill_chunk {prefill_chunk!r} must be an integer >= 1 (None: the whole prompt)")
        self.prefill_chunk = None if prefill_chunk is None else int(prefill_chunk)
        self.target = target
        self.proposer = proposer
        self.kappa = KappaSchedule.of(kappa)
        if self.kappa.max_kappa > 0 and proposer is None:
            raise InputError("kappa > 0 needs a proposer (spec ngram or draft)")
        self.cache = target.make_cache(num_blocks, block_size, prefix_caching=prefix_caching)
        self.scheduler = Scheduler(self.cache, max_batch_size, self.kappa)
        self.eos_token_id = eos_token_id
        self.detokenize = detokenize
        self.seed = seed
        self.record_logits = record_logits
        self.metrics = SpecMetrics()
        self.outputs: dict = {}
        self._next_id = 0

    def add_request(self, prompt_ids, params: SamplingParams | None = None, request_id: int | None = None) -> int:
        params = params or SamplingParams()
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise InputError("a prompt needs at least one token")
        if params.stop and self.detokenize is None:
            raise InputError("stop strings need a tokenizer")
        rid = self._next_id if request_id is None else int(request_id)
        self._next_id = max(self._next_id, rid) + 1
        entropy = [params.seed] if params.seed is not None else [self.seed, rid]
        ss = np.random.SeedSequence(entropy)
        target_ss, draft_ss = ss.spawn(2)
        stop_ids = tuple(int(t) for t in params.stop_token_ids) + (
            (self.eos_token_id,) if self.eos_token_id is not None and not params.ignore_eos else ())
        req = Request(rid, prompt, params, np.random.default_rng(target_ss), np.random.default_rng(draft_ss),
                      tokens=list(prompt), stop_ids=stop_ids)
        self.scheduler.add(req)
        return rid

    def has_unfinished(self) -> bool:
        return bool(self.scheduler.waiting or self.scheduler.running)

    # -- one step ----------------------------------------------------------------------------------
    def _num_drafts(self, req, kappa: int) -> int:
        unfed = len(req.tokens) - req.num_fed
        if unfed > 1 and not req.resume_decode:     # prefill (or catching up): no drafts
            return 0
        if self.prefill_chunk is not None and unfed > self.prefill_chunk:
            return 0                                # a resumed request's recompute, chunk by chunk: drafts with its last
        k = kappa if req.params.kappa is None else min(kappa, req.params.kappa)
        return max(0, min(k, req.params.max_tokens - len(req.output) - 1))

    def step(self) -> list:
        """Run one launch; return [(request_id, new token ids, finished)] for streaming.

        The steps, in order: admit -> propose -> verify (one target launch) -> per request: accept ->
        roll back -> commit -> finish."""
        t_start = time.perf_counter()
        running = self._admit()
        if not running:
            return []
        proposals = self._propose(running)
        rows_of, probs = self._verify(running, proposals)
        events = []
        for i, (req, (drafts, q_rows)) in enumerate(zip(running, proposals)):
            if rows_of[i] is None:                  # a prefill chunk that leaves prompt tokens unfed: no token yet
                self._prefilled_chunk(req)
                events.append((req.id, [], False))
                continue
            emitted, m = self._accept(req, rows_of[i], list(drafts), q_rows, probs.get(i))
            self._roll_back(req, m)
            kept = self._commit(req, emitted, rows_of[i])
            events.append((req.id, kept, req.finished))
            if req.finished:
                self._finish(req)
        self.metrics.wall_time_s += time.perf_counter() - t_start
        return events

    def _admit(self) -> list:
        """Admit waiting requests that fit, preempt while this step's KV does not fit; the running batch."""
        self.scheduler.admit()
        self._make_room()
        return list(self.scheduler.running)

    def _make_room(self) -> None:
        """Preemption by recompute (vLLM's default policy): while the blocks this step can take -- every
        running request's tokens plus max_kappa drafts and one -- exceed the free ones, the latest-admitted
        running request gives its KV back and waits at the head of the queue, to be re-prefilled from its
        tokens (prompt + output so far) when it fits again. A request preempted while decoding resumes with
        the drafts that step would have had (`_num_drafts`), so its generator draws the same coins: its
        greedy and seeded tokens are those it gives alone. A lone request is never preempted (the server
        refuses a budget below one full-context request)."""
        running = self.scheduler.running
        while len(running) > 1 and self.scheduler.shortfall() > self.cache.num_available():
            self._preempt(running[-1])

    def _preempt(self, req) -> None:
        """Take back `req`'s KV (and its proposer state); it is recomputed from its tokens on re-admission."""
        decoding = len(req.tokens) - req.num_fed <= 1 and len(req.output) > 0
        req.resume_decode = req.resume_decode or decoding
        self.metrics.num_decode_preemptions += int(decoding)
        self.scheduler.preempt(req)
        if self.proposer is not None:
            self.proposer.release(req)
        req.num_fed = 0
        req.num_preemptions += 1
        self.metrics.num_preemptions += 1

    def _propose(self, running) -> list:
        """[(drafts, q_rows)] per running request: k_b drafts from the proposer, ([], None) for none."""
        kappa = self.kappa(len(running))
        ks = [self._num_drafts(r, kappa) for r in running]
        proposals = [([], None)] * len(running)
        spec = [i for i, k in enumerate(ks) if k > 0]
        if spec:
            t0 = time.perf_counter()
            got = self.proposer.propose([running[i] for i in spec], [ks[i] for i in spec])
            for i, prop in zip(spec, got):
                proposals[i] = prop
            self.metrics.draft_time_s += time.perf_counter() - t0
        return proposals

    def _verify(self, running, proposals) -> tuple:
        """One target launch over every request's unfed tokens + drafts; per request its processed
        logits rows, and {index: probability rows} for the sampled (temperature != 0) requests."""
        new_tokens = [self._new_tokens(r, list(d)) for r, (d, _) in zip(running, proposals)]
        partial = [r.num_fed + len(t) < len(r.tokens) for r, t in zip(running, new_tokens)]
        n_logits = [len(d) + 1 for d, _ in proposals]
        t0 = time.perf_counter()
        batch = build_step(self.cache, [r.kv for r in running], new_tokens, n_logits)
        logits = self.target.forward(batch, self.cache)                         # [sum n_logits, V]
        self.metrics.target_time_s += time.perf_counter() - t0
        self.metrics.num_steps += 1
        self.metrics.num_request_steps += len(running)

        check_finite(logits)                       # the model's rows, in one pass
        rows_of, row = [], 0
        for req, (drafts, _), nl, part in zip(running, proposals, n_logits, partial):
            rows = logits[row:row + nl]
            row += nl
            if part:                               # mid-prompt: its row decides nothing
                rows_of.append(None)
                continue
            if processors.active(req.params):      # row i conditions on output + drafts 0..i-1
                rows = torch.from_numpy(processors.process_rows(rows, req.prompt, req.output, list(drafts),
                                                                req.params, req.stop_ids))
                check_finite(rows)                 # processors may mask a whole row
            rows_of.append(rows)
        sampled = [i for i, req in enumerate(running) if req.params.temperature != 0 and rows_of[i] is not None]
        probs = dict(zip(sampled, probs_many([rows_of[i] for i in sampled], [running[i].params for i in sampled])))
        return rows_of, probs

    def _chunk(self, unfed: list) -> list:
        """The unfed tokens this step feeds: all of them, or the first `prefill_chunk` of a longer prompt."""
        if self.prefill_chunk is None or len(unfed) <= self.prefill_chunk:
            return unfed
        return unfed[:self.prefill_chunk]

    def _prefilled_chunk(self, req) -> None:
        """A prompt chunk was fed and more of the prompt is left: its K/V are final, nothing is emitted."""
        req.num_fed = req.kv.num_computed
        self.cache.commit(req.kv, req.tokens, len(req.tokens))

    def _new_tokens(self, req, drafts) -> list:
        """What `req` feeds this step: its unfed tokens (all of them after a preemption, or the next prompt
        chunk), then its drafts."""
        return self._chunk(req.tokens[req.num_fed:]) + drafts

    def _accept(self, req, rows, drafts, q_rows, p_rows) -> tuple:
        """(emitted tokens, m accepted drafts): the chain rule on p_rows with the request's generator,
        or greedy verify on the logits rows when the request is greedy (p_rows None)."""
        if p_rows is not None:
            emitted, m = sample_probs(p_rows, drafts, q_rows, req.rng)
        else:
            emitted, m = greedy_verify(rows, drafts)
        self.metrics.record_verify(len(drafts), m)
        req.num_steps += 1
        return emitted, m

    def _roll_back(self, req, m: int) -> None:
        """The tokens fed so far plus the m accepted drafts are final; the rest of the KV goes."""
        req.num_fed = len(req.tokens) + m
        req.resume_decode = False
        self.roll_back_rejected(req)
        if self.proposer is not None:
            self.proposer.accepted(req, req.num_fed)

    def _commit(self, req, emitted, rows) -> list:
        """Append the emitted tokens (up to a stop), commit the finalized full blocks; the kept tokens."""
        kept = self._append(req, emitted, rows)
        self.metrics.num_emitted += len(kept)
        self.cache.commit(req.kv, req.tokens, len(req.tokens))
        return kept

    def roll_back_rejected(self, req) -> None:
        """Drop the K/V of the rejected drafts: the cache keeps the req.num_fed tokens fed and finalized."""
        self.cache.rollback(req.kv, req.num_fed)

    @staticmethod
    def kv_positions_per_token(max_kappa: int) -> int:
        """KV positions one finalized token can take at most (`generate` sizes the cache by it): 1, as
        rejected drafts are rolled back."""
        return 1

    def _append(self, req, emitted, rows) -> list:
        kept = []
        for j, tok in enumerate(emitted):
            req.tokens.append(tok)
            kept.append(tok)
            if self.record_logits is not None:
                self.record_logits(req.id, len(req.output) - 1, rows[j])
            if self._finishes_at(req, tok):
                break                       # truncation inside an accepted run
        self._after_step(req)
        return kept

    def _finishes_at(self, req, tok, *, stop_strings: bool = True, length: bool = True) -> bool:
        """Whether `req` ends with the token `tok` just kept: an EOS or stop token, a stop string
        completed (`stop_strings`), the length cap reached (`length`); sets finished / finish_reason."""
        p = req.params
        if tok in p.stop_token_ids or (tok == self.eos_token_id and not p.ignore_eos):
            req.finished, req.finish_reason = True, "stop"
        elif stop_strings and p.stop and self._stop_string(req):
            req.finished, req.finish_reason = True, "stop"
        elif length and len(req.output) >= p.max_tokens:
            req.finished, req.finish_reason = True, "length"
        return req.finished

    def _after_step(self, req) -> None:
        """After a step's tokens are kept. Nothing: every token is decided as it is kept
        (`_finishes_at`); the serving variants (`server.variants`) move a decision here."""

    def _stop_string(self, req) -> bool:
        text = self.detokenize(req.output)
        hits = [text.find(s) for s in req.params.stop if s and s in text]
        if hits:
            req.stop_text_end = min(hits)
            return True
        return False

    def _finish(self, req) -> None:
        self.scheduler.finish(req)
        if self.proposer is not None:
            self.proposer.release(req)
        text = None
        if self.detokenize is not None:
            text = self.detokenize(req.output)
            if req.stop_text_end is not None:
                text = text[:req.stop_text_end]
        self.outputs[req.id] = RequestOutput(req.id, req.prompt, req.output, req.finish_reason, text, req.num_steps,
                                          req.cached_tokens)

    def run(self) -> list:
        """Step until every request is finished; outputs in request-id order."""
        while self.has_unfinished():
            self.step()
        return [self.outputs[k] for k in sorted(self.outputs)]
