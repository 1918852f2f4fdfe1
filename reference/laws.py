"""Exact laws, not samples: the probability of every outcome of a speculative step or run.

Models are objects with `probs(prefix) -> float64 [V]` (`toy.ToyModel`, `toy.FixedRows`, or
`Transformed`). Rules:

- chain-shaped rules (`EXACT`, `GREEDY`, `lossy.ThresholdRule`, `lossy.TypicalRule`) are given by
  an acceptance probability a(p, q, x) and recovered-token weights res(p, q, x); `chunk_law`
  enumerates every draft path (or the one deterministic path) and sums
      P(emit x_0..x_{i-1}, y) = prod_{j<i} q_j(x_j) a_j(x_j) * [ sum_{x_i} q_i(x_i) (1 - a_i(x_i)) res_i(y | x_i) ]
  with the bonus row p_kappa when all kappa drafts pass;
- `block_chunk_law`: block verification, enumerating draft paths and the law of tau;
- `tree_chunk_law`: recursive rejection over a tree with `branching[d]` children at depth d,
  i.i.d. draws from q (stochastic) or the draft's top-k tokens (deterministic).

A one-step problem is a `FixedRows` target and draft. On a toy model, `joint_law` composes steps into
the exact law of the first L emitted tokens; for every exact rule it equals `target_law`, the
autoregressive law prod_i p(x_i | x_<i). Outcomes are token tuples, encoded as integers by `encode`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.errors import InputError

from .sampling import argmax_lowest, residual
from .transforms import Transform


# ----------------------------------------------------------------------------- outcome encoding

def encode(tokens, vocab: int) -> np.ndarray:
    """Integer codes of token sequences: row [t_0, t_1, ..., -1, -1] -> sum_j (t_j + 1) (V + 1)^j.
    Rows are -1 padded at the end; sequences of different lengths get different codes."""
    t = np.atleast_2d(np.asarray(tokens, np.int64))
    if (vocab + 1) ** t.shape[1] >= 2**62:
        raise InputError(f"cannot encode sequences of length {t.shape[1]} over {vocab} tokens in 62 bits")
    weights = (vocab + 1) ** np.arange(t.shape[1], dtype=np.int64)
    return ((t + 1) * weights).sum(axis=1)


def decode(code: int, vocab: int) -> tuple[int, ...]:
    out = []
    while code:
        code, digit = divmod(int(code), vocab + 1)
        out.append(digit - 1)
    return tuple(out)


@dataclass(frozen=True)
class SequenceLaw:
    """An exact law over token sequences: `sequences[i]` has probability `probs[i]`."""

    sequences: tuple
    probs: np.ndarray
    vocab_size: int

    @classmethod
    def from_dict(cls, d: dict, vocab: int, drop_zero: bool = True) -> "SequenceLaw":
        items = [(s, p) for s, p in d.items() if p > 0 or not drop_zero]
        codes = [int(encode([list(s)], vocab)[0]) for s, _ in items]
        order = np.argsort(codes, kind="stable")
        return cls(tuple(items[i][0] for i in order), np.array([items[i][1] for i in order], np.float64), vocab)

    def codes(self) -> np.ndarray:
        width = max(len(s) for s in self.sequences)
        padded = np.full((len(self.sequences), width), -1, np.int64)
        for i, s in enumerate(self.sequences):
            padded[i, :len(s)] = s
        return encode(padded, self.vocab_size)

    def to_dict(self) -> dict:
        return dict(zip(self.sequences, self.probs))

    def total(self) -> float:
        return float(self.probs.sum())

    def lengths(self) -> np.ndarray:
        return np.array([len(s) for s in self.sequences])

    def mean_length(self) -> float:
        return float((self.lengths() * self.probs).sum())

    def reach(self, pos: int) -> float:
        """P(the sequence has a token at position `pos`)."""
        return float(self.probs[self.lengths() > pos].sum())

    def marginal(self, pos: int) -> np.ndarray:
        """Law [V] of the token at position `pos` given that position is reached."""
        row = np.zeros(self.vocab_size)
        for s, p in zip(self.sequences, self.probs):
            if len(s) > pos:
                row[s[pos]] += p
        z = row.sum()
        return row / z if z > 0 else row

    def tv(self, other: "SequenceLaw") -> float:
        """Total variation distance to another law."""
        a, b = self.to_dict(), other.to_dict()
        return 0.5 * sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


# ----------------------------------------------------------------------------- rules as laws

class ExactRule:
    """The exact chain rule: accept with min(1, p[x]/q[x]); recover from max(0, p - q)."""

    def accept_prob(self, p, q, x: int) -> float:
        qx = 1.0 if q is None else float(q[x])
        return min(1.0, float(p[x]) / qx)

    def residual(self, p, q, x: int):
        return residual(p, q, x)


class GreedyRule:
    """Temperature 0: accept iff x is the target's argmax; recover the argmax."""

    def accept_prob(self, p, q, x: int) -> float:
        return 1.0 if x == argmax_lowest(p) else 0.0

    def residual(self, p, q, x: int):
        w = np.zeros_like(p)
        w[argmax_lowest(p)] = 1.0
        return w

    def bonus(self, p):
        return self.residual(p, None, -1)


class MatchRule:
    """Sample-match: the target samples y ~ p at the draft's position and the draft x is kept iff y == x
    (probability p[x]); otherwise y is emitted, which is p conditioned on y != x. Exact in law (every
    emitted token is a sample of p) with acceptance sum_x q(x) p(x) instead of sum_x min(p, q): MLX-LM,
    llama-cpp-python, OpenVINO GenAI's prompt lookup."""

    def accept_prob(self, p, q, x: int) -> float:
        return float(p[x])

    def residual(self, p, q, x: int):
        w = np.array(p, np.float64, copy=True)
        w[x] = 0.0
        return w


EXACT = ExactRule()
GREEDY = GreedyRule()
MATCH = MatchRule()


@dataclass(frozen=True)
class Transformed:
    """A model seen through a sampling transform (temperature / top-k / top-p)."""

    model: object
    transform: Transform

    @property
    def vocab_size(self) -> int:
        return self.model.vocab_size

    def probs(self, prefix) -> np.ndarray:
        return self.model.probs(prefix, self.transform)


def _draft_options(draft, prefix, deterministic: bool):
    """[(token, q(token), q row or None)] for the next draft position."""
    q = draft.probs(prefix)
    if deterministic:
        return [(argmax_lowest(q), 1.0, None)]
    return [(int(x), float(q[x]), q) for x in np.flatnonzero(q > 0)]


def _add(out: dict, key, value: float) -> None:
    if value > 0:
        out[key] = out.get(key, 0.0) + value


def chunk_law(rule, target, draft, prefix=(), kappa: int = 3, deterministic: bool = False) -> dict:
    """Exact law {emitted tuple: probability} of one step of a chain-shaped rule after `prefix`."""
    prefix = tuple(prefix)
    out: dict = {}
    bonus = getattr(rule, "bonus", None)

    def rec(path: tuple, w: float) -> None:
        p = target.probs(prefix + path)
        if len(path) == kappa:
            row = bonus(p) if bonus else p
            for y in np.flatnonzero(row > 0):
                _add(out, path + (int(y),), w * row[y])
            return
        for x, qx, q in _draft_options(draft, prefix + path, deterministic):
            a = rule.accept_prob(p, q, x)
            if a > 0:
                rec(path + (x,), w * qx * a)
            if a < 1:
                res = rule.residual(p, q, x)
                res = res / res.sum()
                for y in np.flatnonzero(res > 0):
                    _add(out, path + (int(y),), w * qx * (1.0 - a) * res[y])

    rec((), 1.0)
    return out


def block_chunk_law(target, draft, prefix=(), kappa: int = 3, deterministic: bool = False) -> dict:
    """Exact law of one step of block verification (see `reference.block`)."""
    prefix = tuple(prefix)
    out: dict = {}

    def q_row(path, x):
        if not deterministic:
            return draft.probs(prefix + path)
        q = np.zeros(target.vocab_size)
        q[x] = 1.0
        return q

    def finish(path: tuple, rows_p, rows_q, w_path: float) -> None:
        # weights w_i and stopping probabilities h_i along this draft path
        w = [1.0]
        h = [None]
        for i in range(1, kappa + 1):
            x = path[i - 1]
            with np.errstate(over="ignore"):     # p/q overflowing to inf is clamped to 1 below
                w.append(min(w[i - 1] * rows_p[i - 1][x] / rows_q[i - 1][x], 1.0))
            if i < kappa:
                z = float(np.maximum(w[i] * rows_p[i] - rows_q[i], 0.0).sum())
                den = z + (1.0 - w[i])
                h.append(z / den if den > 0 else 1.0)
            else:
                h.append(w[i])
        # P(tau = i) = h_i prod_{j > i} (1 - h_j); tau = 0 when no h_j passes
        for tau in range(kappa + 1):
            pt = 1.0 if tau == 0 else h[tau]
            for j in range(tau + 1, kappa + 1):
                pt *= 1.0 - h[j]
            if pt <= 0:
                continue
            if tau == kappa:
                row = rows_p[kappa]
            else:
                row = np.maximum(w[tau] * rows_p[tau] - rows_q[tau], 0.0)
                if not (row > 0).any():
                    row = rows_p[tau]
            row = row / row.sum()
            for y in np.flatnonzero(row > 0):
                _add(out, path[:tau] + (int(y),), w_path * pt * row[y])

    def rec(path: tuple, w_path: float, rows_p: list, rows_q: list) -> None:
        p = target.probs(prefix + path)
        if len(path) == kappa:
            finish(path, rows_p + [p], rows_q, w_path)
            return
        for x, qx, _ in _draft_options(draft, prefix + path, deterministic):
            rec(path + (x,), w_path * qx, rows_p + [p], rows_q + [q_row(path, x)])

    rec((), 1.0, [], [])
    return out


def tree_chunk_law(target, draft, prefix=(), branching=(2, 2), deterministic: bool = False) -> dict:
    """Exact law of one step of recursive rejection over a draft tree (see `reference.tree`).

    `branching[d]` children per node at depth d: i.i.d. draws from q (stochastic) or the draft's
    `branching[d]` most likely tokens, ties to the lower id (deterministic, q one-hot per sibling)."""
    prefix = tuple(prefix)
    out: dict = {}

    def rec(path: tuple, w: float) -> None:
        p = target.probs(prefix + path)
        depth = len(path)
        k = branching[depth] if depth < len(branching) else 0
        if k == 0:
            for y in np.flatnonzero(p > 0):
                _add(out, path + (int(y),), w * p[y])
            return
        q = draft.probs(prefix + path)
        r = p.copy()
        reject = 1.0
        if deterministic:
            for c in np.argsort(-q, kind="stable")[:k]:
                c = int(c)
                if reject * r[c] > 0:
                    rec(path + (c,), w * reject * r[c])
                reject *= 1.0 - r[c]
                r[c] = 0.0
                z = r.sum()
                if z <= 0:
                    return
                r = r / z
        else:
            for _ in range(k):
                m = np.minimum(q, r)
                for x in np.flatnonzero(m > 0):
                    rec(path + (int(x),), w * reject * m[x])
                reject *= 1.0 - m.sum()
                res = np.maximum(r - q, 0.0)
                z = res.sum()
                if z <= 0:
                    return
                r = res / z
        for y in np.flatnonzero(r > 0):
            _add(out, path + (int(y),), w * reject * r[y])

    rec((), 1.0)
    return out


# ----------------------------------------------------------------------------- whole runs

def joint_law(step, prefix=(), length: int = 4) -> SequenceLaw:
    """Exact law of the first `length` tokens of a speculative run, where `step(prefix)` returns the
    law {chunk: probability} of one step after `prefix` (e.g. a closure over `chunk_law`)."""
    prefix = tuple(prefix)
    memo: dict = {}

    def rec(pre: tuple, remaining: int) -> dict:
        key = (pre, remaining)
        if key in memo:
            return memo[key]
        out: dict = {}
        for chunk, pc in step(pre).items():
            if len(chunk) >= remaining:
                _add(out, chunk[:remaining], pc)
            else:
                for tail, pt in rec(pre + chunk, remaining - len(chunk)).items():
                    _add(out, chunk + tail, pc * pt)
        memo[key] = out
        return out

    law = rec(prefix, length)
    vocab = getattr(step, "vocab_size", None) or max(max(s) for s in law) + 1
    return SequenceLaw.from_dict(law, vocab)


def target_law(target, prefix=(), length: int = 4) -> SequenceLaw:
    """The autoregressive law prod_i p(x_i | x_<i) of the first `length` tokens."""
    prefix = tuple(prefix)
    out: dict = {}

    def rec(path: tuple, w: float) -> None:
        if len(path) == length:
            out[path] = w
            return
        p = target.probs(prefix + path)
        for y in np.flatnonzero(p > 0):
            rec(path + (int(y),), w * p[y])

    rec((), 1.0)
    return SequenceLaw.from_dict(out, target.vocab_size)


def processed_law(target, transform=None, settings=None, prompt=(), length: int = 4) -> SequenceLaw:
    """The autoregressive law of runs of up to `length` tokens with the processors applied to the real
    prefix (`reference.processors`: prompt + the tokens emitted so far): prod_i p~(x_i | prompt, x_<i),
    where a run ends at its first stop token (a shorter sequence; PAD after it in sampled runs)."""
    from .processors import OFF, model_probs

    settings = settings or OFF
    prompt = tuple(prompt)
    stop = set(settings.stop_tokens)
    out: dict = {}

    def rec(path: tuple, w: float) -> None:
        if len(path) == length or (path and path[-1] in stop):
            out[path] = w
            return
        p = model_probs(target, prompt, path, transform, settings)
        for y in np.flatnonzero(p > 0):
            rec(path + (int(y),), w * p[y])

    rec((), 1.0)
    return SequenceLaw.from_dict(out, target.vocab_size)


def processed_greedy_path(target, settings=None, prompt=(), length: int = 4) -> tuple:
    """The argmax path (lowest index on ties) of the processed target: `length` tokens, or fewer when
    it reaches a stop token (which it includes)."""
    from .processors import OFF, model_probs

    settings = settings or OFF
    path: tuple = ()
    while len(path) < length and not (path and path[-1] in settings.stop_tokens):
        path += (int(np.argmax(model_probs(target, prompt, path, Transform(temperature=0.0), settings))),)
    return path


@dataclass(frozen=True)
class Stepper:
    """`step(prefix)` for `joint_law`: one step of `kind` ("chain" with `rule`, "block", "tree")."""

    kind: str
    target: object
    draft: object
    kappa: int = 3
    rule: object = EXACT
    deterministic: bool = False
    branching: tuple = (2, 2)

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    def __call__(self, prefix) -> dict:
        if self.kind == "chain":
            return chunk_law(self.rule, self.target, self.draft, prefix, self.kappa, self.deterministic)
        if self.kind == "block":
            return block_chunk_law(self.target, self.draft, prefix, self.kappa, self.deterministic)
        if self.kind == "tree":
            return tree_chunk_law(self.target, self.draft, prefix, self.branching, self.deterministic)
        raise InputError(f"unknown step kind {self.kind!r}")


# ----------------------------------------------------------------------------- summary numbers

def acceptance_rate(p, q) -> float:
    """alpha = sum_x min(p, q) = 1 - TV(p, q): the one-token acceptance probability."""
    return float(np.minimum(np.asarray(p, np.float64), np.asarray(q, np.float64)).sum())


def tv_distance(p, q) -> float:
    return 0.5 * float(np.abs(np.asarray(p, np.float64) - np.asarray(q, np.float64)).sum())


@dataclass(frozen=True)
class AcceptanceStats:
    """E (mean emitted tokens per step, bonus included) and r_i = P(first i drafts accepted)."""

    mean_length: float
    r: np.ndarray

    def to_dict(self) -> dict:
        return {"E": self.mean_length, "r": [float(x) for x in self.r]}


def acceptance_stats(step_law: dict | SequenceLaw, kappa: int) -> AcceptanceStats:
    """E and r_1..r_kappa from the exact law of one step (emitted length = accepted + 1)."""
    law = step_law if isinstance(step_law, SequenceLaw) else SequenceLaw.from_dict(step_law, 1 + max(max(s) for s in step_law))
    return AcceptanceStats(law.mean_length(), np.array([law.reach(i) for i in range(1, kappa + 1)]))


def expected_length_iid(alpha: float, kappa: int) -> float:
    """E = (1 - alpha^(kappa+1)) / (1 - alpha) under i.i.d. Bernoulli(alpha) acceptance."""
    if alpha >= 1.0:
        return kappa + 1.0
    return (1.0 - alpha ** (kappa + 1)) / (1.0 - alpha)
