"""The verify problems the checks pose: random ones and adversarial ones, each aimed at a bug class.

A one-step `Problem` is a history-independent target (rows p_0..p_kappa) and draft (rows
q_0..q_{kappa-1}); `deterministic` means the draft proposes each row's argmax (q one-hot). Its exact
laws come from `reference.laws` with `FixedRows` models.

    dirichlet      p, q ~ Dirichlet(0.7), V = 8, kappa = 3           the general case
    reversed       q = p with the token order reversed                 acceptance far from 1
    zero-mass      p is 0 on half the tokens, q puts most mass there   residual and p = 0 handling
    deterministic  q one-hot at the draft's argmax (n-gram / greedy draft), p ~ Dirichlet
    narrow         V = 2, kappa = 4, many samples                      small biases become visible
    near-tie       p rows whose top two tokens tie exactly or within 1 ulp (greedy tie-break)
    padded         dirichlet rows whose drafts from position 1 on are padded (-1): the target row
                   at the first padded position is drawn from as is (vLLM's grammar padding)
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from specverify.reference import laws
from specverify.reference.rules import RULES
from specverify.reference.toy import FixedRows
from specverify.reference.batch import PAD


@dataclass(frozen=True, eq=False)
class Problem:
    name: str
    target: np.ndarray            # [kappa + 1, V]
    draft: np.ndarray             # [kappa, V]
    deterministic: bool = False
    pad_from: int | None = None   # drafts at positions >= pad_from are padded (-1)

    @property
    def kappa(self) -> int:
        return self.target.shape[0] - 1

    @property
    def vocab_size(self) -> int:
        return self.target.shape[1]

    @property
    def models(self):
        return FixedRows(self.target), FixedRows(np.vstack([self.draft, self.draft[-1:]]))

    def law(self, rule: str = "chain", shape=None) -> laws.SequenceLaw:
        """The exact law of one step's emitted tokens under the registered rule named `rule`
        (`reference.rules`), its drafts the problem's kappa (shape None) or a tree of branching `shape`."""
        if self.pad_from is not None:
            # a padded position is a bonus position: the law of the problem cut before it
            k = self.pad_from
            return Problem(self.name, self.target[:k + 1], self.draft[:k], self.deterministic).law(rule, shape)
        target, draft = self.models
        d = RULES[rule].law(target, draft, (), self.kappa if shape is None else shape, self.deterministic)
        return laws.SequenceLaw.from_dict(d, self.vocab_size)

    @cached_property
    def draft_tokens_fixed(self) -> np.ndarray:
        """The deterministic draft: each draft row's argmax."""
        return np.argmax(self.draft, axis=1)

    def sample_drafts(self, n: int, rng: np.random.Generator) -> np.ndarray:
        """Draft tokens [n, kappa]: i.i.d. per position from q (or the fixed argmax tokens)."""
        if self.deterministic:
            out = np.broadcast_to(self.draft_tokens_fixed, (n, self.kappa)).copy()
        else:
            out = sample_rows(self.draft, rng.random((n, self.kappa)))
        if self.pad_from is not None:
            out[:, self.pad_from:] = PAD
        return out


def sample_rows(rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Column i of the result draws from rows[i] by inverse CDF with the uniforms u[:, i]; a token
    of probability 0 is never drawn."""
    out = np.empty(u.shape, np.int64)
    for i, row in enumerate(rows):
        cdf = np.cumsum(row)
        tok = np.searchsorted(cdf, u[:, i] * cdf[-1], side="right")
        last = np.flatnonzero(row > 0)[-1]
        out[:, i] = np.minimum(tok, last)
    return out


def drafted_request(rng, k: int, vocab: int, conc: float):
    """(draft ids [k], target rows p [k + 1, V], draft rows q [k, V]) of one random request: p and q
    ~ Dirichlet(conc), each draft drawn from its q row by inverse CDF, then 0.05 added to q at the
    drafted token and q renormalised."""
    p = rng.dirichlet(np.full(vocab, conc), k + 1)
    q = rng.dirichlet(np.full(vocab, conc), k)
    x = np.array([min(int(np.searchsorted(np.cumsum(r), rng.random() * r.sum(), side="right")), vocab - 1)
                  for r in q], np.int64)
    q[np.arange(k), x] += 0.05
    q /= q.sum(axis=1, keepdims=True)
    return x, p, q


def _dirichlet(rng, conc, shape):
    return rng.dirichlet(np.full(shape[-1], conc), size=shape[0])


def dirichlet(rng, vocab=8, kappa=3, conc=0.7) -> Problem:
    return Problem("dirichlet", _dirichlet(rng, conc, (kappa + 1, vocab)), _dirichlet(rng, conc, (kappa, vocab)))


def reversed_draft(rng, vocab=8, kappa=3) -> Problem:
    p = _dirichlet(rng, 0.5, (kappa + 1, vocab))
    return Problem("reversed", p, p[:kappa, ::-1].copy())


def zero_mass(rng, vocab=8, kappa=3) -> Problem:
    p = _dirichlet(rng, 0.8, (kappa + 1, vocab))
    zero = np.zeros((kappa + 1, vocab), bool)
    for i in range(kappa + 1):
        zero[i, rng.permutation(vocab)[: vocab // 2]] = True
    p = np.where(zero, 0.0, p)
    p /= p.sum(axis=1, keepdims=True)
    q = _dirichlet(rng, 0.8, (kappa, vocab)) + 4.0 * zero[:kappa]
    q /= q.sum(axis=1, keepdims=True)
    return Problem("zero-mass", p, q)


def deterministic(rng, vocab=8, kappa=3) -> Problem:
    q = _dirichlet(rng, 0.5, (kappa, vocab))
    p = _dirichlet(rng, 0.5, (kappa + 1, vocab))
    # the drafted token gets target probability 1/2, so both branches are exercised
    for i, x in enumerate(np.argmax(q, axis=1)):
        rest = p[i].copy()
        rest[x] = 0.0
        p[i] = 0.5 * rest / rest.sum()
        p[i, x] = 0.5
    return Problem("deterministic", p, q, deterministic=True)


def narrow(rng, kappa=4) -> Problem:
    p = np.array([[0.3, 0.7]] * (kappa + 1)) + rng.uniform(-0.1, 0.1, (kappa + 1, 1)) * [1, -1]
    q = np.array([[0.65, 0.35]] * kappa)
    return Problem("narrow", p, q)


def near_tie(rng, vocab=6, kappa=3) -> Problem:
    p = _dirichlet(rng, 1.0, (kappa + 1, vocab)) * 0.5
    for i in range(kappa + 1):
        a, b = sorted(rng.choice(vocab, 2, replace=False))
        p[i, a] = p[i, b] = 0.25
        if i % 2:
            p[i, b] = np.nextafter(0.25, 0.0)      # a near tie, lower id wins by one ulp
    p /= p.sum(axis=1, keepdims=True)
    q = _dirichlet(rng, 0.5, (kappa, vocab))
    return Problem("near-tie", p, q)


def padded(rng, vocab=8, kappa=3) -> Problem:
    p = dirichlet(rng, vocab, kappa)
    return Problem("padded", p.target, p.draft, pad_from=1)


BUILDERS = {
    "dirichlet": dirichlet,
    "reversed": reversed_draft,
    "zero-mass": zero_mass,
    "deterministic": deterministic,
    "narrow": narrow,
    "near-tie": near_tie,
    "padded": padded,
}


def make(name: str, rng: np.random.Generator) -> Problem:
    return BUILDERS[name](rng)
