"""The verify rules, one registered object each: what the reference, the compiled sampler and the
audit battery need to know about a rule, in one place.

A rule's `name` is the prefix of its audit rows (`chain.marginal[dirichlet,pos=1]`) and a key of its
seeds (`ctx.rng("problem", name, problem)`): renaming a rule changes both. The battery audits the
rules an engine claims (`capability`), in the order of `RULES`.

Adding a rule: its reference function (a module of its own, like `chain`, `block`, `tree`), its
exact law (`laws`), one `VerifyRule` in `RULES`, and a branch of the compiled sampler (`fast`)
under its `code` if it has one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial

from . import block, chain, laws, lossy, tree


@dataclass(frozen=True, eq=False)
class VerifyRule:
    """One verify rule.

    name        row-name prefix and seed key
    capability  the engine capability that claims it (`adapters.protocol`); None: no engine claims
                it (a lossy rule is verified through `verify` and judged as the chain rule)
    method      the adapter method the harness calls (greedy: `verify`, its requests flagged greedy)
    reference   the per-request float64 rule (for a lossy rule: its class, an instance is the rule)
    law         law(target, draft, prefix, shape, deterministic) -> {emitted tuple: probability},
                the exact law of one step after `prefix`, `shape` the drafts' kappa or a tree's
                branching; None for a lossy rule, whose law depends on its parameters
                (`laws.chunk_law` with the rule object as the acceptance)
    problems    the one-step problems the battery poses (`battery.problems` names), each with its
                draft shape: None for the problem's own kappa drafts, a tree's branching for a tree
    code        its kind in the compiled sampler `fast` (None: not compiled)
    greedy      its requests carry greedy == True (temperature 0, no coins)
    tree        its drafts form a tree (`tree.DraftTree`), verified by `method` or per request by
                `verify_tree`
    """

    name: str
    capability: str | None
    method: str
    reference: Callable
    law: Callable | None
    problems: Mapping[str, tuple | None] = field(default_factory=dict)
    code: int | None = None
    greedy: bool = False
    tree: bool = False


CHAIN = VerifyRule("chain", "chain", "verify", chain.chain_rule, partial(laws.chunk_law, laws.EXACT),
                   dict.fromkeys(("dirichlet", "reversed", "zero-mass", "deterministic", "narrow", "padded")),
                   code=0)
# greedy verification is deterministic given the drafts; `checks.greedy` also compares it exactly
GREEDY = VerifyRule("greedy", "greedy", "verify", chain.greedy_rule, partial(laws.chunk_law, laws.GREEDY),
                    dict.fromkeys(("dirichlet", "near-tie")), code=1, greedy=True)
BLOCK = VerifyRule("block", "block", "verify_block", block.block_rule, laws.block_chunk_law,
                   dict.fromkeys(("dirichlet", "zero-mass", "deterministic")), code=2)
TREE = VerifyRule("tree", "tree", "verify_trees", tree.tree_rule, laws.tree_chunk_law,
                  {"dirichlet": (2, 2), "deterministic": (3, 2)}, tree=True)
THRESHOLD = VerifyRule("threshold", None, "verify", lossy.ThresholdRule, None, code=3)
TYPICAL = VerifyRule("typical", None, "verify", lossy.TypicalRule, None, code=4)

RULES = {r.name: r for r in (CHAIN, GREEDY, BLOCK, TREE, THRESHOLD, TYPICAL)}


def claimed(capabilities) -> list[VerifyRule]:
    """The rules an engine with these capabilities claims, in the order of `RULES`."""
    caps = set(capabilities)
    return [r for r in RULES.values() if r.capability in caps]


def of_method(method: str) -> VerifyRule:
    """The first rule of `RULES` the harness calls through adapter `method`: it names the rows of a
    check that goes by method (chain for `verify`, which greedy requests share)."""
    return next(r for r in RULES.values() if r.method == method)
