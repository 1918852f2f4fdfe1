"""Shift-invariant first-order Markov toy models: the models of the metamorphic acceptance rows
(`specverify.checks.acceptance_invariance`).

A `CirculantMarkov` over V tokens has one logits row `base` [V]; after a prefix whose last token is s
its logits are `base` rotated by s:

    logits(prefix)[y] = base[(y - s) mod V]        (s = 0 for the empty prefix)

So the next token depends on the last one only (the context's length, the tokens before the last and
where it sits in a long prompt do not matter), and only through the difference y - s. For a target
and a draft of this form (same V, any two bases) every speculative step has the same law whatever
its state: with d_i = x_i - x_{i-1} the drafted increments are i.i.d. from the draft's row, each
accepted with the probability the chain rule gives for the target's row, independently. A verify
step of k drafts therefore accepts m with the truncated geometric law

    P(m = j) = a^j (1 - a)  (j < k),   P(m = k) = a^k,   a = sum_d min(p(d), q(d))

(p, q the two rows after the transform), independent of every earlier step. That makes acceptance
invariant, in law, under everything that does not change the models: cold or warm prefix cache,
prefill chunk size, the position in a long context, and the draft schedule (which steps draft how
many). A drafter whose state goes stale conditions on a wrong last token s' and drafts from the row
rotated by s' instead: its acceptance falls to sum_y min(p(y - s), q(y - s')).

Worked example (V = 3, base_target = log(.6, .3, .1), base_draft = log(.5, .3, .2), temperature 1):
a = min(.6, .5) + min(.3, .3) + min(.1, .2) = 0.9; a step of 2 drafts accepts 0, 1, 2 with
probability 0.1, 0.09, 0.81.
"""

from __future__ import annotations

import numpy as np

from specverify.errors import InputError

from .transforms import Transform, apply


class CirculantMarkov:
    """The model of the module docstring: `vocab_size`, `logits(prefix)` (-inf for probability 0) and
    `probs(prefix, transform)`, the toy interface the engine-level adapters take (no prefix tables:
    prompts may be long)."""

    def __init__(self, base, name: str = "circulant"):
        base = np.asarray(base, np.float64)
        if base.ndim != 1 or base.size < 2 or np.isnan(base).any() or not np.isfinite(base).any():
            raise InputError("a circulant model needs a logits row of >= 2 entries, some finite, none NaN")
        self.base = base
        self.vocab_size = int(base.size)
        self.name = name

    @property
    def law_key(self) -> tuple:
        return ("circulant", self.base.tobytes())

    def logits(self, prefix) -> np.ndarray:
        last = int(prefix[-1]) if len(prefix) else 0
        if not 0 <= last < self.vocab_size:
            raise InputError(f"token {last} outside the vocabulary of {self.vocab_size}")
        return np.roll(self.base, last)              # [V]: logits[y] = base[(y - last) mod V]

    def logits_after(self, last) -> np.ndarray:
        """Logits after prefixes ending in `last` (int [R]; -1 for the empty prefix): float64 [R, V]."""
        s = np.maximum(np.asarray(last, np.int64), 0)
        return self.base[(np.arange(self.vocab_size)[None, :] - s[:, None]) % self.vocab_size]

    def probs(self, prefix, transform: Transform | None = None) -> np.ndarray:
        return apply(self.logits(prefix), transform)

    def row(self, transform: Transform | None = None) -> np.ndarray:
        """The increment law after the transform: float64 [V]."""
        return apply(self.base, transform)


def step_acceptance(target: CirculantMarkov, draft: CirculantMarkov, transform: Transform | None = None) -> float:
    """a = sum_d min(p(d), q(d)): the probability that each draft of a step is accepted."""
    if target.vocab_size != draft.vocab_size:
        raise InputError(f"draft vocabulary {draft.vocab_size} != target vocabulary {target.vocab_size}")
    return float(np.minimum(target.row(transform), draft.row(transform)).sum())


def step_law(a: float, k: int) -> np.ndarray:
    """P(m = j), j = 0..k, for a verify step of k drafts each accepted with probability a: float64 [k + 1]."""
    j = np.arange(k + 1)
    out = a ** j * (1.0 - a)
    out[k] = a ** k
    return out


def pair(vocab: int = 8, seed: int = 0, noise: float = 1.0) -> tuple:
    """(target, draft): a seeded target base row and the draft's, the target's plus Gaussian noise."""
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, 1.5, vocab)
    return (CirculantMarkov(base, f"circulant(V={vocab}, seed={seed})"),
            CirculantMarkov(base + rng.normal(0.0, noise, vocab), f"circulant-draft(V={vocab}, seed={seed})"))


__all__ = ["CirculantMarkov", "step_acceptance", "step_law", "pair"]
