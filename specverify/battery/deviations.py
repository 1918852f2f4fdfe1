"""The kinds of deviation a failing audit can show (`AuditResult.deviation["kind"]`), and their text.

The check table (`specverify.checks.TABLE`) says which checks' failures have a kind of their own;
`audit.deviation_of` decides the kind of a failing audit from its rows.
"""

BIASED = "biased"                   # the law of emitted tokens (a position, or whole runs) is not the target's
OTHER_RULE = "exact-other-rule"     # whole runs have the exact law; only the one-step joint law / acceptance
                                    # differ from the chain rule's: lower acceptance, a speed bug
CONTRACT = "contract"               # the adapter broke the protocol (changed its inputs, ...)
NOT_BITWISE = "not-bitwise"         # greedy outputs or logits depend on speculation or the batch (`bitwise`)
RANKS_DISAGREE = "ranks-disagree"   # the ranks of one tensor-parallel engine emitted different tokens
EXACT_BUT_SLOW = "exact-but-slow"   # whole runs have the exact law, the engine's acceptance counters are below
                                    # the exact acceptance law of its draft (`engine_acceptance`): a drafter out
                                    # of sync, the speed gone and nothing in the output to show it
ACCEPT_ABOVE = "acceptance-above-exact"   # whole runs exact, acceptance counters above the exact law: impossible
                                    # for an exact token-wise verifier with the declared draft
SPEED_CHECKS = ("engine_acceptance", "identity", "acceptance_invariance")   # checks whose failures alone (runs
                                    # exact) are a speed matter
KIND_TEXT = {
    NOT_BITWISE: "greedy output not bitwise plain decode at batch 1 (each row names its divergence kind)",
    RANKS_DISAGREE: "ranks emit different tokens for the same inputs",
    BIASED: "biased output law",
    OTHER_RULE: "exact output law by another rule (acceptance below the chain rule's: a speed bug, not a bias)",
    CONTRACT: "contract violation",
    EXACT_BUT_SLOW: "exact output law, acceptance below the exact law of its draft: a speed bug",
    ACCEPT_ABOVE: "exact output law, acceptance above the exact law of its draft: impossible for an exact "
                  "token-wise verifier (counters, drafts or rule not what the engine declares)",
}
