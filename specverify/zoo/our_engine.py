"""Our own engine (`specverify.engine`) with one real bug, for the tests that prove the audits catch it.

    StaleKvEngine   rejected draft positions are not rolled back in the KV cache

Run it with `generate(..., run=RunOptions(engine_class=StaleKvEngine))`. The sampler-level and
toy-engine mutants (`mutant:<name>`) are the other modules of this package.
"""

from __future__ import annotations

from specverify.engine.engine import Engine


class StaleKvEngine(Engine):
    """Rejected draft positions are not rolled back in the KV cache: the verify pass wrote K/V for every
    draft, and the next step's target attends over the rejected ones too (ml-explore/mlx-lm#1109: a
    non-trimmable cache keeps rejected drafts "in the recurrent state and corrupt[s] subsequent
    predictions"; `zoo.engine_loop.StaleKv` is the same bug in the toy engine). A token can
    then take up to kappa + 1 KV positions. Prefix caching is off: a block's K/V would no longer belong
    to the tokens it is keyed by, a second bug."""

    def __init__(self, target, proposer=None, **options):
        super().__init__(target, proposer, **{**options, "prefix_caching": False})

    def roll_back_rejected(self, req) -> None:
        """Keep the rejected drafts' K/V in the context."""

    @staticmethod
    def kv_positions_per_token(max_kappa: int) -> int:
        return max_kappa + 1
