"""Logits processors in float64: each a function of the actual prefix (the prompt and the output
tokens emitted so far), with their order in the pipeline stated once, here.

A speculative engine must process the target row at draft position i with the prefix *prompt +
committed output + drafts 0..i-1* -- the prefix that row conditions on -- and the draft rows alike.
Nothing below keeps state: every mask and every count is recomputed from the prefix it is given, so
"what the state should be" is never in doubt.

The pipeline, on the raw logits l [V] of the model after `prompt + out` (out: the output tokens):

    1. repetition penalty r   (HF / CTRL form) every token t in prompt + out, once however often it
                              occurs: l[t] / r if l[t] > 0, else l[t] * r
    2. frequency f, presence  (OpenAI form, over the output tokens only) l[t] -= f * c(t) + pr * [c(t) > 0],
       pr                     c(t) = occurrences of t in out
    3. logit bias             l[t] += b for each (t, b)
    4. banned tokens          l[t] = -inf
       banned sequences       for each banned sequence (s_1..s_k): if prompt + out ends with s_1..s_{k-1},
                              l[s_k] = -inf (a sequence of one token bans it everywhere)
    5. min_tokens n           while len(out) < n, every stop token t: l[t] = -inf
    6. grammar                the DFA's state after out (from its start state; the prompt is not read):
                              every token the state does not allow: l[t] = -inf
    7. the transform          temperature, top-k, top-p and softmax (`reference.transforms.apply`;
                              temperature 0: one-hot at the argmax of the processed logits)
    8. min_p m                keep tokens with p[t] >= m * max(p), renormalise (sequential sum)
    then stop                 a run ends at its first stop token (the stop token is emitted); nothing
                              comes after it: the rest of a run of L tokens is PAD (`reference.batch.PAD`)

An entry that is -inf stays -inf in every stage (a token of probability 0 in the model is never
revived). If the stages leave no finite logit the prefix has no next token: an InputError (a
grammar state that allows only tokens the model cannot produce, say), never a silent fallback.

Worked example. V = 4, prompt (1,), out (2, 2), raw logits [1.0, 2.0, -0.5, 0.5], with
repetition 2, frequency 0.5, presence 0.25, logit_bias {3: 1.0}, banned_tokens (0,), stop (3,),
min_tokens 3:
    1. tokens seen {1, 2}: l1 = 2.0 / 2 = 1.0, l2 = -0.5 * 2 = -1.0   -> [1.0, 1.0, -1.0, 0.5]
    2. c(2) = 2: l2 = -1.0 - 0.5 * 2 - 0.25 = -2.25                   -> [1.0, 1.0, -2.25, 0.5]
    3. l3 = 0.5 + 1.0 = 1.5                                           -> [1.0, 1.0, -2.25, 1.5]
    4. l0 = -inf                                                      -> [-inf, 1.0, -2.25, 1.5]
    5. len(out) = 2 < 3: the stop token 3 masked                      -> [-inf, 1.0, -2.25, -inf]
    7. softmax: [0, e^1, e^-2.25, 0] / (e^1 + e^-2.25) = [0, 0.9627, 0.0373, 0]
    8. min_p 0.05: 0.0373 < 0.05 * 0.9627 = 0.0481: token 2 dropped   -> [0, 1, 0, 0]
(`tests/test_processors.py` checks this example number for number.)

    Processors   the settings (frozen; validated: a bad value is an InputError of one line)
    Grammar      a DFA over token ids: table[state][token] = the next state, or -1 (not allowed)
    process      the pipeline's stages 1-6 on logit rows, one prefix per row (vectorised)
    probs        stages 1-8: next-token distributions, one prefix per row
    stopped      where a run ends: the position of the first stop token
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.errors import InputError

from .batch import PAD
from .transforms import Transform, apply

NAMES = ("repetition_penalty", "frequency_penalty", "presence_penalty", "min_tokens", "logit_bias", "min_p",
         "banned_tokens", "banned_sequences", "grammar", "stop_tokens")
DEAD = -1          # the grammar's "state" after a token it does not allow: no token is allowed there


@dataclass(frozen=True)
class Grammar:
    """A deterministic automaton over token ids: `table[s][t]` is the state after token t in state s,
    or -1 when state s does not allow t. The start state is 0. Every state allows at least one token."""

    table: tuple

    def __post_init__(self):
        rows = self.table
        if not isinstance(rows, tuple) or not rows or not all(isinstance(r, tuple) for r in rows):
            raise InputError("grammar: table must be a non-empty tuple of tuples (state -> next state per token)")
        width = len(rows[0])
        if width < 1 or any(len(r) != width for r in rows):
            raise InputError("grammar: every state's row must have one entry per token (a rectangular table)")
        for s, r in enumerate(rows):
            if any(not isinstance(x, (int, np.integer)) or isinstance(x, bool) or not -1 <= x < len(rows) for x in r):
                raise InputError(f"grammar: state {s} has a next state outside [-1, {len(rows)})")
            if all(x == -1 for x in r):
                raise InputError(f"grammar: state {s} allows no token")

    @property
    def vocab_size(self) -> int:
        return len(self.table[0])

    def array(self) -> np.ndarray:
        """The table as int64 [states + 1, V], with a last row for DEAD (nothing allowed, stays DEAD)."""
        t = np.array(self.table, np.int64)
        return np.vstack([t, np.full((1, t.shape[1]), DEAD, np.int64)])

    def state(self, out) -> int:
        """The state after the tokens `out` from the start state (DEAD after a token not allowed)."""
        return int(states(self, np.asarray([list(out) or [PAD]], np.int64))[0])

    def allowed(self, state: int) -> np.ndarray:
        """bool [V]: the tokens `state` allows (none for DEAD)."""
        return self.array()[state] >= 0


def states(grammar: Grammar, out: np.ndarray) -> np.ndarray:
    """Each row's grammar state after its tokens out [m, w] (PAD entries skipped; DEAD is sticky)."""
    table = grammar.array()
    dead = table.shape[0] - 1
    s = np.zeros(out.shape[0], np.int64)
    for j in range(out.shape[1]):
        t = out[:, j]
        live = t != PAD
        nxt = table[s, np.where(live, t, 0)]
        s = np.where(live, np.where(nxt == DEAD, dead, nxt), s)
    return np.where(s == dead, DEAD, s)


def _ids(value, what: str) -> tuple:
    try:
        ids = tuple(int(t) for t in value)
    except (TypeError, ValueError):
        raise InputError(f"{what}: must be a sequence of token ids, got {value!r}") from None
    if any(t < 0 for t in ids) or any(not float(t) == float(v) for t, v in zip(ids, value)):
        raise InputError(f"{what}: token ids must be integers >= 0, got {value!r}")
    return ids


@dataclass(frozen=True)
class Processors:
    """Settings of the processors (the module docstring defines each). The defaults change nothing.

    repetition_penalty  > 0, 1 = off            frequency_penalty, presence_penalty  finite, 0 = off
    min_tokens          >= 0                    logit_bias   ((token, bias), ...), biases finite
    min_p               in [0, 1], 0 = off      banned_tokens (token, ...)
    banned_sequences    ((token, ...), ...), each of one token or more
    grammar             Grammar or None         stop_tokens  (token, ...): EOS and any other stop id
    """

    repetition_penalty: float = 1.0
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    min_tokens: int = 0
    logit_bias: tuple = ()
    min_p: float = 0.0
    banned_tokens: tuple = ()
    banned_sequences: tuple = ()
    grammar: Grammar | None = None
    stop_tokens: tuple = ()

    def __post_init__(self):
        def real(name):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)) or not np.isfinite(v):
                raise InputError(f"{name} {v!r} must be a finite number")
            object.__setattr__(self, name, float(v))
            return float(v)

        if real("repetition_penalty") <= 0:
            raise InputError(f"repetition_penalty {self.repetition_penalty} must be > 0 (1 = off)")
        real("frequency_penalty")
        real("presence_penalty")
        if not 0.0 <= real("min_p") <= 1.0:
            raise InputError(f"min_p {self.min_p} must be in [0, 1] (0 = off)")
        if isinstance(self.min_tokens, bool) or not isinstance(self.min_tokens, (int, np.integer)) or self.min_tokens < 0:
            raise InputError(f"min_tokens {self.min_tokens!r} must be an integer >= 0")
        object.__setattr__(self, "min_tokens", int(self.min_tokens))
        try:
            bias = tuple((int(t), float(b)) for t, b in (dict(self.logit_bias).items() if isinstance(self.logit_bias, dict)
                                                        else self.logit_bias))
        except (TypeError, ValueError):
            raise InputError(f"logit_bias: must be pairs (token, bias), got {self.logit_bias!r}") from None
        if any(t < 0 or not np.isfinite(b) for t, b in bias):
            raise InputError(f"logit_bias: token ids must be >= 0 and biases finite, got {self.logit_bias!r}")
        if len({t for t, _ in bias}) != len(bias):
            raise InputError("logit_bias: a token is biased twice")
        object.__setattr__(self, "logit_bias", bias)
        object.__setattr__(self, "banned_tokens", _ids(self.banned_tokens, "banned_tokens"))
        object.__setattr__(self, "stop_tokens", _ids(self.stop_tokens, "stop_tokens"))
        if isinstance(self.banned_sequences, (str, bytes)) or not hasattr(self.banned_sequences, "__iter__"):
            raise InputError(f"banned_sequences: must be a sequence of token-id sequences, got {self.banned_sequences!r}")
        seqs = tuple(_ids(s, "banned_sequences") for s in self.banned_sequences)
        if any(not s for s in seqs):
            raise InputError("banned_sequences: an empty sequence bans nothing; give one token or more")
        object.__setattr__(self, "banned_sequences", seqs)
        if self.grammar is not None and not isinstance(self.grammar, Grammar):
            raise InputError(f"grammar: must be a reference.processors.Grammar, got {type(self.grammar).__name__}")

    def active(self) -> tuple:
        """The names (NAMES) of the processors these settings turn on."""
        off = Processors()
        return tuple(n for n in NAMES if getattr(self, n) != getattr(off, n))

    def check_vocab(self, vocab: int) -> None:
        """InputError if a token id named here is outside [0, vocab) or the grammar's width is not vocab."""
        ids = ([t for t, _ in self.logit_bias] + list(self.banned_tokens) + list(self.stop_tokens)
               + [t for s in self.banned_sequences for t in s])
        bad = [t for t in ids if t >= vocab]
        if bad:
            raise InputError(f"processors: token id {bad[0]} outside the vocabulary [0, {vocab})")
        if self.grammar is not None and self.grammar.vocab_size != vocab:
            raise InputError(f"grammar: table has {self.grammar.vocab_size} tokens per state, the vocabulary {vocab}")


OFF = Processors()


def _counts(out: np.ndarray, vocab: int) -> np.ndarray:
    """Occurrences [m, V] of each token in each row of out [m, w] (PAD skipped)."""
    m = out.shape[0]
    c = np.zeros((m, vocab), np.int64)
    rows, cols = np.nonzero(out != PAD)
    np.add.at(c, (rows, out[rows, cols]), 1)
    return c


def _ends_with(prompt: tuple, out: np.ndarray, lens: np.ndarray, tail: tuple) -> np.ndarray:
    """bool [m]: row r's prompt + out[r, :lens[r]] ends with `tail`."""
    m, k = out.shape[0], len(tail)
    if k == 0:
        return np.ones(m, bool)
    full = np.concatenate([np.broadcast_to(np.asarray(prompt, np.int64), (m, len(prompt))), out,
                           np.full((m, k), PAD, np.int64)], axis=1)
    ends = len(prompt) + lens                                    # the full context's length per row
    ok = ends >= k
    pos = np.clip(ends[:, None] - k + np.arange(k)[None, :], 0, full.shape[1] - 1)
    return ok & (np.take_along_axis(full, pos, axis=1) == np.asarray(tail)[None, :]).all(axis=1)


def process(logits, prompt, out, settings: Processors = OFF, *, n_out=None, grammar_state=None) -> np.ndarray:
    """Stages 1-6 of the pipeline: processed logits [m, V] of raw logits [m, V] (or [V]), row r's prefix
    being prompt + out[r] (out int [m, w], the output tokens left-aligned, PAD after them).

    An engine that keeps the output count or the grammar state itself passes them (`n_out` int [m]
    for min_tokens, `grammar_state` int [m]); by default both are computed from `out`, which is the
    definition."""
    a = np.array(logits, np.float64, copy=True)
    one = a.ndim == 1
    a = np.atleast_2d(a)
    m, vocab = a.shape
    settings.check_vocab(vocab)
    prompt = tuple(int(t) for t in prompt)
    out = np.asarray(out, np.int64).reshape(m, -1) if np.size(out) else np.full((m, 0), PAD, np.int64)
    filled = (out != PAD).sum(axis=1)
    lens = filled if n_out is None else np.asarray(n_out, np.int64).reshape(m)
    counts = _counts(out, vocab)
    s = settings
    if s.repetition_penalty != 1.0:
        seen = counts > 0
        if prompt:
            seen[:, list(prompt)] = True
        a = np.where(seen, np.where(a > 0, a / s.repetition_penalty, a * s.repetition_penalty), a)
    if s.frequency_penalty or s.presence_penalty:
        a = a - (s.frequency_penalty * counts + s.presence_penalty * (counts > 0))
    for t, b in s.logit_bias:
        a[:, t] += b
    if s.banned_tokens:
        a[:, list(s.banned_tokens)] = -np.inf
    for seq in s.banned_sequences:
        hit = _ends_with(prompt, out, filled, seq[:-1])
        a[hit, seq[-1]] = -np.inf
    if s.min_tokens and s.stop_tokens:
        early = lens < s.min_tokens
        a[np.ix_(early, list(s.stop_tokens))] = -np.inf
    if s.grammar is not None:
        st = states(s.grammar, out) if grammar_state is None else np.asarray(grammar_state, np.int64).reshape(m)
        allowed = s.grammar.array()[np.where(st == DEAD, -1, st)] >= 0
        a = np.where(allowed, a, -np.inf)
    a = np.where(np.isnan(a), -np.inf, a)          # -inf * r stays -inf; never NaN, but be explicit
    empty = ~np.isfinite(a).any(axis=1)
    if empty.any():
        r = int(np.flatnonzero(empty)[0])
        raise InputError(f"processors leave no token after prompt {list(prompt)} + output "
                         f"{out[r][out[r] != PAD].tolist()}")
    return a[0] if one else a


def min_p_filter(p: np.ndarray, min_p: float) -> np.ndarray:
    """Stage 8: keep p[t] >= min_p * max(p) per row, renormalised by a sequential sum."""
    if not min_p:
        return p
    keep = p >= min_p * p.max(axis=1, keepdims=True)
    q = np.where(keep, p, 0.0)
    return q / np.cumsum(q, axis=1)[:, -1:]


def probs(logits, prompt, out, transform: Transform | None = None, settings: Processors = OFF) -> np.ndarray:
    """Stages 1-8: the next-token distributions [m, V] (or [V]) after prompt + out[r]."""
    a = process(logits, prompt, out, settings)
    one = a.ndim == 1
    p = min_p_filter(np.atleast_2d(apply(a, transform)), settings.min_p)
    return p[0] if one else p


def stopped(tokens: np.ndarray, stop_tokens) -> np.ndarray:
    """int [n]: the position of each row's first stop token, or the row length if it has none."""
    tokens = np.atleast_2d(np.asarray(tokens, np.int64))
    hit = np.isin(tokens, np.asarray(tuple(stop_tokens), np.int64))
    return np.where(hit.any(axis=1), hit.argmax(axis=1), tokens.shape[1])


def model_probs(model, prompt, out, transform: Transform | None = None, settings: Processors = OFF) -> np.ndarray:
    """The processed next-token distribution [V] of a toy model after prompt + out (one prefix)."""
    prompt, out = tuple(int(t) for t in prompt), tuple(int(t) for t in out)
    return probs(model.logits(prompt + out)[None, :], prompt, np.array([out], np.int64).reshape(1, -1), transform,
                 settings)[0]
