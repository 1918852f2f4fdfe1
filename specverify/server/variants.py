"""Deliberately broken variants of the reference server: negative controls for the server level.

`specverify serve --variant NAME` runs the engine class VARIANTS[NAME]. "exact" is the engine itself;
every other entry is a known bug, served so that tests can show the server rows catch it (a check of a
correct server must pass and of a broken one must fail). Never use a broken variant for anything else.

    recovered-from-p   after a rejected draft the token is drawn from the target's p instead of the
                       residual max(0, p - q) (or p without the draft for a deterministic draft): the
                       accepted drafts then come out too often -- the output law is biased whenever the
                       draft disagrees with the target
"""

from __future__ import annotations

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


VARIANTS = {"exact": Engine, "recovered-from-p": RecoveredFromP}
assert tuple(VARIANTS) == VARIANT_NAMES
