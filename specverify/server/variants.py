"""Deliberately broken variants of the reference server: negative controls for the server level.

`specverify serve --variant NAME` runs the engine class VARIANTS[NAME]. "exact" is the engine itself;
every other entry is a known bug, served so that tests can show the server rows catch it (a check of a
correct server must pass and of a broken one must fail). Never use a broken variant for anything else.

    recovered-from-p   after a rejected draft the token is drawn from the target's p instead of the
                       residual max(0, p - q) (or p without the draft for a deterministic draft): the
                       accepted drafts then come out too often -- the output law is biased whenever the
                       draft disagrees with the target

The serving-path variants (../shared/BUGCLASSES.md, "The serving path"; zoo numbers 45-51, 54 and 55: run as servers
by tests/test_serving.py against the rows of `checks/serving.py`, and in process by `specverify zoo` as
`mutant:<name>` at the serving engine level, `zoo/serving.py`):

    stop-per-step          stop strings matched once a step, not per token: the text is cut at the
                           match, the ids (and logprobs) past it in the step are kept      -> server.stop
    cap-crossed            drafts not capped by the tokens left, the cap checked once a step: an
                           accepted run crosses max_tokens                                 -> server.length
    usage-charges-drafts   usage charges every drafted token of a step plus one            -> server.length
    logprobs-from-draft    an accepted draft's logprob read from the draft's row q         -> server.logprobs
    stream-last-token      a step's event carries only its last token (one token a step
                           assumed): the deltas and the ids gathered from them lose the rest -> server.stream
    seed-offset-by-steps   a seeded request's generator offset by the engine's step count  -> server.seeds
    preempt-keeps-draft-state
                           (51) a request preempted while decoding resumes with a stale KV tail: the
                           recompute writes its last token's slot from the state the step before left
                           (a placeholder) -- only under a --kv-budget that preempts -> server.preemption
    preempt-accepts-stale-drafts
                           (54) an unseeded sampled request preempted while decoding takes its resumed
                           step's drafts as accepted (the acceptance state from before the preemption reused,
                           never verified against the target): its run law is the draft's there. Greedy and
                           seeded requests exact (the exact comparisons of server.preemption pass); only under
                           a --kv-budget that preempts                              -> server.preemption.law
    stream-splits-characters
                           (55) a step that ends inside a multi-byte character streams U+FFFD at once
                           instead of holding it back: deltas != text (--toy-text multibyte) -> server.stream
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from specverify.engine.engine import Engine
from specverify.engine.sampler import draw

from .config import VARIANT_NAMES


def recovered_from_p(p_rows, drafts, q_rows, rng) -> tuple:
    """The chain rule with its bug: the same coins as `sampler.sample_probs`, the recovered token from p."""
    k = len(drafts)
    accept_coins = rng.random(k) if k else ()
    final_coin = rng.random()
    out = []
    for i, x in enumerate(drafts):
        p = p_rows[i]
        qx = 1.0 if q_rows is None else q_rows[i][x]
        if x >= 0 and accept_coins[i] * qx < p[x]:
            out.append(x)
            continue
        out.append(draw(p, final_coin))           # BUG (on purpose): p, not the residual
        return out, i
    out.append(draw(p_rows[k], final_coin))
    return out, k


class RecoveredFromP(Engine):
    """Our engine with `recovered_from_p` as its sampled verify rule (greedy requests unchanged)."""

    def _accept(self, req, rows, drafts, q_rows, p_rows):
        if p_rows is None:
            return super()._accept(req, rows, drafts, q_rows, p_rows)
        emitted, m = recovered_from_p(p_rows, drafts, q_rows, req.rng)
        self.metrics.record_verify(len(drafts), m)
        req.num_steps += 1
        return emitted, m


class StopPerStep(Engine):
    """(45) Stop strings matched per step, not per token (vllm-project/vllm PR #47616, sgl-project/sglang
    PR #23802, snowflakedb/ArcticInference #161, microsoft/onnxruntime-genai PR #2528): the whole
    accepted run is appended, then the text is searched once -- the text is cut at the match, but the
    ids and logprobs of the step's tokens after the completing one are kept."""

    def _finishes_at(self, req, tok, **checks) -> bool:
        return super()._finishes_at(req, tok, stop_strings=False)

    def _after_step(self, req) -> None:
        if req.params.stop and self._stop_string(req):        # BUG (on purpose): once a step
            req.finished, req.finish_reason = True, "stop"


class CapCrossed(Engine):
    """(46) The length cap crossed by an accepted run (sgl-project/sglang #31599 / PR #33758): drafts
    are not limited to the tokens left and the cap is checked once a step, so a step that starts below
    max_tokens returns every token it accepted."""

    def _num_drafts(self, req, kappa: int) -> int:
        if len(req.tokens) - req.num_fed > 1:
            return 0
        return kappa if req.params.kappa is None else min(kappa, req.params.kappa)    # BUG: no tokens-left cap

    def _finishes_at(self, req, tok, **checks) -> bool:
        return super()._finishes_at(req, tok, length=False)

    def _after_step(self, req) -> None:
        if not req.finished and len(req.output) >= req.params.max_tokens:    # BUG (on purpose): once a step
            req.finished, req.finish_reason = True, "length"


class UsageChargesDrafts(Engine):
    """(47) Usage charges the whole block (sgl-project/sglang #39826, ik_llama.cpp PR #2358): a step
    adds its drafted tokens plus one to the request's completion tokens, rejected drafts included."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.charged: dict = {}

    def _accept(self, req, rows, drafts, q_rows, p_rows):
        self.charged[req.id] = self.charged.get(req.id, 0) + len(drafts) + 1      # BUG: the block
        return super()._accept(req, rows, drafts, q_rows, p_rows)

    def completion_tokens(self, output) -> int:
        return self.charged.pop(output.request_id, len(output.token_ids))


class LogprobsFromDraft(Engine):
    """(48) Logprobs read from the wrong tensor (vllm-project/vllm PRs #30846, #33391, #44727): an
    accepted draft's logprob is taken from the draft's row q (log q; a deterministic draft: one-hot),
    not from the target's row it was verified against. Tokens and text stay exact."""

    def _accept(self, req, rows, drafts, q_rows, p_rows):
        emitted, m = super()._accept(req, rows, drafts, q_rows, p_rows)
        req.draft_rows = [(q_rows[i] if q_rows is not None else _one_hot(drafts[i], rows.shape[-1]))
                          for i in range(m)]
        return emitted, m

    def _append(self, req, emitted, rows) -> list:
        swapped = list(rows)
        for j, q in enumerate(getattr(req, "draft_rows", ())):
            with np.errstate(divide="ignore"):
                swapped[j] = np.log(np.asarray(q, np.float64))              # BUG (on purpose): the draft's row
        return super()._append(req, emitted, swapped)


def _one_hot(token: int, vocab: int) -> np.ndarray:
    row = np.zeros(vocab)
    row[int(token)] = 1.0
    return row


class StreamLastToken(Engine):
    """(49) A streaming delta that assumes one token a step (vllm-project/vllm PR #26027, #52469;
    alibaba/rtp-llm PR #1285): each step's event carries only the last token it kept, so a stream (and
    the ids a client gathers from the events) loses the others; the final text is whole."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.send_row, self.record_logits = self.record_logits, self._buffer
        self.rows: dict = {}              # rid -> [row of each token kept this step]
        self.delivered: dict = {}         # rid -> tokens delivered so far

    def _buffer(self, rid, index, row) -> None:
        self.rows.setdefault(rid, []).append(row)

    def step(self) -> list:
        events = []
        for rid, kept, finished in super().step():
            rows = self.rows.pop(rid, [])
            if kept and self.send_row is not None:     # the delivered token's row, at its delivered index
                self.send_row(rid, self.delivered.get(rid, 0), rows[-1])
            self.delivered[rid] = self.delivered.get(rid, 0) + (1 if kept else 0)
            events.append((rid, kept[-1:], finished))      # BUG (on purpose): the last token only
        return events


class SeedOffsetBySteps(Engine):
    """(50) A seeded request's generator offset by the engine's step count (NVIDIA/TensorRT-LLM PRs
    #17599, #17172: per-request generators at an offset that depends on what the engine ran before):
    the same seeded request gives other tokens after other traffic."""

    def add_request(self, prompt_ids, params=None, request_id=None) -> int:
        if params is not None and params.seed is not None:
            params = replace(params, seed=(params.seed + self.metrics.num_steps) % 2**63)     # BUG
        return super().add_request(prompt_ids, params, request_id)


class PreemptKeepsDraftState(Engine):
    """(51) Preemption out of step with the draft state (vllm-project/vllm #52071, PRs #40768, #46066,
    #49620: placeholders or draft frames survive preemption and are read back when the request resumes).
    Here a request preempted while decoding is recomputed with a stale KV tail: the slot of its last
    emitted token (sampled by the step before the preemption, not yet fed) is written with the token
    before it -- the placeholder the engine held for it -- so every later row of that request conditions
    on a wrong context. Without preemption it is the exact engine."""

    def _new_tokens(self, req, drafts) -> list:
        new = super()._new_tokens(req, drafts)
        unfed = len(req.tokens) - req.num_fed
        if req.resume_decode and unfed >= 2:
            new[unfed - 1] = req.tokens[-2]           # BUG (on purpose): the stale tail, not the emitted token
        return new


class PreemptAcceptsStaleDrafts(Engine):
    """(54) Preemption that keeps stale draft state in a law-changing way (vllm-project/vllm #52071, PRs
    #40768, #46066: speculative state -- draft tokens, their acceptance -- surviving a preemption): a
    sampled request preempted while decoding resumes with its drafts taken as accepted, not verified;
    the step's last token is drawn from the target's row after them. The tokens after a resume follow the
    draft's law, not the target's. Only unseeded requests (the batched path; a seeded request's own
    generator path is exact, as vLLM's rejection sampler splits them): greedy, seeded and never-preempted
    requests are exact, so only the run law under preemption sees it."""

    def _accept(self, req, rows, drafts, q_rows, p_rows):
        if p_rows is None or req.params.seed is not None or not req.resume_decode or not drafts:
            return super()._accept(req, rows, drafts, q_rows, p_rows)
        k = len(drafts)
        emitted = list(drafts) + [draw(p_rows[k], req.rng.random())]      # BUG (on purpose): no verification
        self.metrics.record_verify(k, k)
        req.num_steps += 1
        return emitted, k


class StreamSplitsCharacters(Engine):
    """(55) A stream that sends an unfinished UTF-8 sequence (vllm-project/vllm PR #26027's incremental
    detokenizer thread; ../shared/BUGCLASSES.md, "The serving path": byte-fallback tokens): a step that ends
    inside a multi-byte character -- a lead byte token whose continuation comes in the next step -- sends
    the replacement character U+FFFD at once instead of holding it back, so the concatenated deltas differ
    from the text once the character completes. Token ids, the text and the answer are exact; only a text
    whose characters span tokens shows it (`specverify serve --toy-text multibyte`)."""

    stream_holds_unfinished = False        # BUG (on purpose): read by the server's stream (`batching.stream_delta`)


VARIANTS = {"exact": Engine, "recovered-from-p": RecoveredFromP, "stop-per-step": StopPerStep,
            "cap-crossed": CapCrossed, "usage-charges-drafts": UsageChargesDrafts,
            "logprobs-from-draft": LogprobsFromDraft, "stream-last-token": StreamLastToken,
            "seed-offset-by-steps": SeedOffsetBySteps, "preempt-keeps-draft-state": PreemptKeepsDraftState,
            "preempt-accepts-stale-drafts": PreemptAcceptsStaleDrafts,
            "stream-splits-characters": StreamSplitsCharacters}
assert tuple(VARIANTS) == VARIANT_NAMES
