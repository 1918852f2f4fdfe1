"""Lossy acceptance rules -- NOT exact, kept here so that the reference can compute their exact
bias (total variation to the target) and an audit can show they fail.

threshold (SGLang `speculative_accept_threshold_single` / `_acc`, both 1.0 = exact by default):
    accept x iff  p[x] >= threshold_single  or  coin * q[x] * threshold_acc < p[x]
    (q[x] = 1 for a deterministic draft); on rejection draw from max(0, p - q) as the exact rule.
    With threshold_acc < 1 every acceptance probability is inflated by 1/threshold_acc; with
    threshold_single < 1 any draft whose target probability clears it is accepted outright.

typical (Medusa's typical acceptance, Cai et al. 2401.10774):
    accept x iff  p[x] > min(epsilon, delta * exp(-H(p)))   (no coin; H in nats)
    on rejection draw from p itself.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .sampling import draw, residual
from .batch import PAD

@dataclass(frozen=True)
class ThresholdRule:
    threshold_single: float = 1.0
    threshold_acc: float = 1.0

    def accept_prob(self, p: np.ndarray, q, x: int) -> float:
        qx = 1.0 if q is None else float(q[x])
        if p[x] >= self.threshold_single:
            return 1.0
        return min(1.0, float(p[x]) / (qx * self.threshold_acc))

    def residual(self, p, q, x):
        return residual(p, q, x)

    def __call__(self, drafts, target, draft, coins, final) -> np.ndarray:
        out = []
        for i, x in enumerate(drafts):
            x = int(x)
            p = target[i]
            q = None if draft is None else draft[i]
            if x == PAD:
                out.append(draw(p, final))
                return np.array(out, np.int64)
            qx = 1.0 if q is None else q[x]
            if p[x] >= self.threshold_single or coins[i] * qx * self.threshold_acc < p[x]:
                out.append(x)
                continue
            out.append(draw(self.residual(p, q, x), final))
            return np.array(out, np.int64)
        out.append(draw(target[-1], final))
        return np.array(out, np.int64)


@dataclass(frozen=True)
class TypicalRule:
    epsilon: float = 0.09
    delta: float = 0.3

    def cutoff(self, p: np.ndarray) -> float:
        nz = p[p > 0]
        entropy = float(-np.cumsum(nz * np.log(nz))[-1])
        return min(self.epsilon, self.delta * float(np.exp(-entropy)))

    def accept_prob(self, p, q, x: int) -> float:
        return 1.0 if p[x] > self.cutoff(p) else 0.0

    def residual(self, p, q, x):
        return p.copy()

    def __call__(self, drafts, target, draft, coins, final) -> np.ndarray:
        out = []
        for i, x in enumerate(drafts):
            x = int(x)
            p = target[i]
            if x != PAD and p[x] > self.cutoff(p):
                out.append(x)
                continue
            out.append(draw(p, final))
            return np.array(out, np.int64)
        out.append(draw(target[-1], final))
        return np.array(out, np.int64)
