"""The float64 reference rules as an engine: the audit's positive control (it must pass)."""

from __future__ import annotations

from specverify import __version__
from specverify.reference import fast
from specverify.reference.tree import tree_verify


class ReferenceEngine:
    name = "reference"
    version = __version__
    capabilities = {"chain", "greedy", "block", "tree"}

    def verify(self, batch, coins):
        return fast.verify_batch(batch, coins, rule="chain")

    def verify_block(self, batch, coins):
        return fast.verify_batch(batch, coins, rule="block")

    def verify_tree(self, tree, target_probs, draft_probs, coins, final_coin):
        return tree_verify(tree, target_probs, draft_probs, coins, final_coin)
