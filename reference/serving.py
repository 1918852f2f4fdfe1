"""What a completion is, downstream of the sampler: logprobs, stop strings, the length cap, usage,
streaming. Float64, pure functions of the tokens the sampler emitted.

A speculative step emits up to kappa + 1 tokens at once; every definition here is per token, in
emission order, exactly as plain decode (one token a step) applies it. A server is exact downstream of
its sampler iff what it returns equals these functions applied to the stream of tokens its sampler
drew -- whatever the step boundaries were.

    log_softmax(row)                 float64 log-softmax of one logits row [V]:
                                     x - (m + log(sum(exp(x - m)))), m = max(x), the sum in numpy's
                                     pairwise order over the row (a function of the row's bits alone)
    token_logprob(row, token, mode)  the logprob of an emitted token: RAW = the model's row (after the
                                     logits processors the request asked for, which change the model's
                                     distribution); PROCESSED = after the processors and the
                                     temperature, top-k, top-p (`reference.transforms`), as vLLM's
                                     "processed_logprobs" -- a token outside the kept set has -inf
    top_logprobs(row, n)             the n largest finite entries, largest first, lowest id first on
                                     ties
    finish(tokens, ...)              the completion plain decode returns from a token stream
                                     (`Completion`): tokens are taken one at a time; after token j
                                       1. j is EOS (unless ignore_eos) or in stop_token_ids -> "stop",
                                          the token kept in ids (its text is not: a special token)
                                       2. a stop string occurs in detokenize(ids[:j+1]) -> "stop",
                                          ids[:j+1] kept (the token that completed the match
                                          included), text cut at the EARLIEST start of any stop
                                          string in that text
                                       3. j + 1 == max_tokens -> "length"
                                     nothing after the finishing token is kept: no ids, no logprobs,
                                     no text; logprobs are one per kept id; a stream that ends
                                     without any of 1-3 is None (the sampler stopped early: not a
                                     completion)
    usage(prompts, completions)      prompt_tokens = sum of prompt lengths (once per prompt, however
                                     many choices), completion_tokens = sum of len(ids) over choices
    stream_text(deltas)              the streamed text: the concatenation of every delta; it must equal
                                     the non-streamed text, which must equal finish's text

Precision: the toy models' rows are float64 tables, so a server of a toy model must return these
logprobs bit for bit; a float32 model's teacher-forced logprob (the same prefix run as a prefill)
differs from a decode or verify row by the kernel's reduction order only (docs/serving-path.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from specverify.errors import InputError

from .transforms import Transform
from .transforms import apply as apply_transform

RAW = "raw"                     # logprobs of the model's row (after processors), before temperature
PROCESSED = "processed"         # logprobs after processors, temperature, top-k and top-p
MODES = (RAW, PROCESSED)

STOP = "stop"
LENGTH = "length"


def log_softmax(row) -> np.ndarray:
    """float64 log-softmax of one logits row [V] (module docstring for the order); -inf stays -inf."""
    x = np.asarray(row, np.float64)
    if x.ndim != 1 or not x.size:
        raise InputError(f"log_softmax: one non-empty row [V] expected, got shape {x.shape}")
    m = x.max()
    if not np.isfinite(m):
        raise InputError("log_softmax: a row with no finite entry")
    return x - (m + np.log(np.sum(np.exp(x - m))))


def processed_log_probs(row, transform: Transform) -> np.ndarray:
    """log of the probabilities after temperature, top-k, top-p [V] (-inf outside the kept set).
    Greedy (temperature 0): log of the one-hot argmax row."""
    with np.errstate(divide="ignore"):
        return np.log(apply_transform(np.asarray(row, np.float64), transform))


def token_logprob(row, token: int, mode: str = RAW, transform: Transform | None = None) -> float:
    """The logprob of emitted `token` decided from logits `row` [V] (module docstring for the modes)."""
    if mode not in MODES:
        raise InputError(f"logprob mode {mode!r}: choose {' or '.join(MODES)}")
    x = np.asarray(row, np.float64)
    if not 0 <= int(token) < x.shape[-1]:
        raise InputError(f"token {token} outside the vocabulary [0, {x.shape[-1]})")
    lsm = log_softmax(x) if mode == RAW else processed_log_probs(x, transform or Transform())
    return float(lsm[int(token)])


def top_logprobs(lsm: np.ndarray, n: int) -> list:
    """[(id, logprob)] of the n largest finite entries of a logprob row, largest first, lowest id first."""
    lsm = np.asarray(lsm, np.float64)
    order = np.lexsort((np.arange(lsm.shape[0]), -lsm))[:n]
    return [(int(i), float(lsm[i])) for i in order if np.isfinite(lsm[i])]


@dataclass(frozen=True)
class Completion:
    """What plain decode returns for one choice."""
    ids: tuple                  # kept token ids, the finishing token included
    text: str | None            # detokenised ids, cut before the earliest stop string (None: no tokenizer)
    finish_reason: str          # STOP or LENGTH
    stopped_by: str | None = None     # "eos", "stop_token", "stop_string" or None (length)

    def logprobs(self, stream_logprobs) -> tuple:
        """The logprobs kept with the ids: the first len(ids) of the stream's."""
        return tuple(stream_logprobs[:len(self.ids)])


def earliest_stop(text: str, stops) -> int | None:
    """The earliest start of any of `stops` in `text`, or None."""
    hits = [text.find(s) for s in stops if s and s in text]
    return min(hits) if hits else None


def finish(tokens, *, max_tokens: int, detokenize: Callable | None = None, stop=(), stop_token_ids=(),
           eos_id: int | None = None, ignore_eos: bool = False) -> Completion | None:
    """The completion plain decode returns from the token stream `tokens` (module docstring)."""
    if max_tokens < 1:
        raise InputError(f"max_tokens {max_tokens} must be >= 1")
    stop = tuple(stop)
    if any(not isinstance(s, str) or not s for s in stop):
        raise InputError(f"stop {stop!r}: stop strings must be non-empty strings")
    if stop and detokenize is None:
        raise InputError("stop strings need a detokenizer")
    stop_ids = set(int(t) for t in stop_token_ids)
    ids: list = []
    for tok in tokens:
        tok = int(tok)
        ids.append(tok)
        if tok in stop_ids or (eos_id is not None and tok == eos_id and not ignore_eos):
            why = "stop_token" if tok in stop_ids else "eos"
            return Completion(tuple(ids), _text(detokenize, ids), STOP, why)
        if stop:
            text = detokenize(ids)
            at = earliest_stop(text, stop)
            if at is not None:
                return Completion(tuple(ids), text[:at], STOP, "stop_string")
        if len(ids) == max_tokens:
            return Completion(tuple(ids), _text(detokenize, ids), LENGTH, None)
    return None


def _text(detokenize, ids):
    return None if detokenize is None else detokenize(ids)


def usage(prompt_lengths, completions) -> dict:
    """The usage block: prompts counted once each, completion tokens = kept ids over every choice."""
    p = int(sum(prompt_lengths))
    c = int(sum(len(x.ids) if isinstance(x, Completion) else len(x) for x in completions))
    return {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}


def stream_text(deltas) -> str:
    """The text a stream carries: its deltas concatenated, in order."""
    return "".join(deltas)


__all__ = ["RAW", "PROCESSED", "MODES", "STOP", "LENGTH", "log_softmax", "processed_log_probs", "token_logprob",
           "top_logprobs", "Completion", "earliest_stop", "finish", "usage", "stream_text"]
