"""Sampling transforms in float64: temperature, top-k, top-p, then softmax.

Order and tie semantics (what the reference means by each knob):
    temperature T: logits / T; T == 0 means greedy: one-hot at the argmax (lowest index on ties)
    top_k = k > 0: keep every token whose logit is >= the k-th largest logit (boundary ties kept)
    top_p = P < 1: sort the probabilities descending (stable: lower token id first among ties), keep
                   the shortest prefix whose sequential cumulative sum reaches P (at least one token)
    softmax:       exp(l - max l) / sum, the sum taken sequentially; -inf logits get probability 0
An exact speculative rule stays exact only if the *same* transform is applied to the draft rows
and to the target rows; the battery's transform check tests exactly that.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.errors import InputError


@dataclass(frozen=True)
class Transform:
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self):
        if not (np.isfinite(self.temperature) and self.temperature >= 0):
            raise InputError(f"temperature {self.temperature} must be a finite number >= 0")
        if self.top_k < 0:
            raise InputError(f"top_k {self.top_k} must be >= 0 (0 = off)")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p {self.top_p} must be in (0, 1]")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def softmax(logits: np.ndarray) -> np.ndarray:
    """Row-wise softmax in float64 with sequential sums; -inf entries get exactly 0."""
    logits = np.atleast_2d(np.asarray(logits, np.float64))
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / np.cumsum(e, axis=1)[:, -1:]


def apply(logits, transform: Transform | None = None) -> np.ndarray:
    """Probabilities after the transform; same shape as `logits` ([V] or [rows, V])."""
    a = np.asarray(logits, np.float64)
    one = a.ndim == 1
    a = np.atleast_2d(a).copy()
    t = transform or Transform()
    if t.greedy:
        out = np.zeros_like(a)
        out[np.arange(a.shape[0]), np.argmax(a, axis=1)] = 1.0
        return out[0] if one else out
    if t.temperature != 1.0:
        a = a / t.temperature
    if t.top_k and t.top_k < a.shape[1]:
        kth = -np.sort(-a, axis=1)[:, t.top_k - 1: t.top_k]
        a = np.where(a >= kth, a, -np.inf)
    p = softmax(a)
    if t.top_p < 1.0:
        order = np.argsort(-p, axis=1, kind="stable")
        sorted_p = np.take_along_axis(p, order, axis=1)
        csum = np.cumsum(sorted_p, axis=1)
        keep_sorted = np.ones_like(sorted_p, bool)
        keep_sorted[:, 1:] = csum[:, :-1] < t.top_p
        keep = np.zeros_like(keep_sorted)
        np.put_along_axis(keep, order, keep_sorted, axis=1)
        p = np.where(keep, p, 0.0)
        p = p / np.cumsum(p, axis=1)[:, -1:]
    return p[0] if one else p
