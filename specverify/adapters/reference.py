"""The float64 reference rules as an engine: the audit's positive control (it must pass).

Every protocol level: the compiled chain/greedy/block sampler (`reference.fast`), batched tree
verification and seeded mode (`reference.vector.VectorSampler`, bit-equal to `reference.tree` /
`.chain`), the one-request tree form (`reference.tree.tree_verify`) and an engine over toy models
(`reference.toy_engine.SpecEngine` with the compiled sampler).

Rows that are not distributions (NaN, +-inf, all zeros: the `hostile` check's rows) are refused with an
InputError (`reference.validate.usable_rows`) before any verify: the defined, safe behaviour.
"""

from __future__ import annotations

from specverify import __version__
from specverify.reference import fast, rules
from specverify.reference.toy_engine import SpecEngine
from specverify.reference.tree import tree_verify
from specverify.reference.validate import usable_rows
from specverify.reference.vector import VectorSampler


class ReferenceEngine:
    name = "reference"
    version = __version__
    capabilities = {"chain", "greedy", "block", "tree", "seeded", "engine"}
    processors = set(SpecEngine.processors)        # every logits processor (reference.processors)
    draft_schedule = SpecEngine.draft_schedule     # every step drafts kappa (reference.acceptance)

    def __init__(self):
        self._vector = VectorSampler()
        self._engine = SpecEngine()

    def verify(self, batch, coins):
        usable_rows(batch)
        return fast.verify_batch(batch, coins, rule=rules.CHAIN.name)

    def verify_block(self, batch, coins):
        usable_rows(batch)
        return fast.verify_batch(batch, coins, rule=rules.BLOCK.name)

    def verify_trees(self, batch, coins):
        return self._vector.verify_trees(batch, coins)

    def verify_tree(self, tree, target_probs, draft_probs, coins, final_coin):
        return tree_verify(tree, target_probs, draft_probs, coins, final_coin)

    def verify_seeded(self, batch, seeds):
        usable_rows(batch)
        return fast.verify_batch(batch, self._vector.seeded_coins(batch, seeds), rule=rules.CHAIN.name)

    def generate(self, target, draft, prompt, kappa, transform, seed, n, length, processors=None):
        return self._engine.generate(target, draft, prompt, kappa, transform, seed, n, length, processors)
