"""What an engine under audit provides. Duck-typed: an adapter is any object with these attributes.

    name: str                      shown in reports
    version: str | None            the engine's version, recorded in every result
    capabilities: set[str]         which checks apply: "chain", "greedy", "block", "tree", ...

Sampler level -- the harness injects every coin (layout: `specverify.reference.batch`):

    verify(batch: VerifyBatch, coins: Coins) -> int array [B, max_spec_len + 1]
        chain rule for requests with greedy == False, argmax rule for greedy == True; each row the
        emitted tokens left-aligned, padded with -1. Capabilities "chain" and/or "greedy".
    verify_block(batch, coins) -> same, block verification. Capability "block".
    verify_tree(tree: DraftTree, target_probs [N+1, V], draft_probs [N+1, V] | None,
                coins [N], final_coin) -> emitted token ids (or (ids, accepted nodes)). Capability "tree".

A complete minimal adapter (the exact chain rule, by way of the reference) looks like this:

    import numpy as np
    from specverify.reference.chain import verify_batch

    class MySampler:
        name = "my-sampler"
        version = "1.0"
        capabilities = {"chain", "greedy"}

        def verify(self, batch, coins):
            return verify_batch(batch, coins)      # call your implementation here

    def factory():
        return MySampler()

and is audited with `specverify audit path/to/file.py:factory`.
"""

CAPABILITIES = ("chain", "greedy", "block", "tree")
