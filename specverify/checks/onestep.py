"""Samples of one-step problems, shared by the marginal and joint checks.

For every rule kind the engine supports, each problem of `PLAN` is sampled once (seeded per rule
and problem) and cached on the context, so the marginal and joint statistics read the same draws.
The expected law is the exact law of the *exact* rule of that kind, whatever the engine does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.reference import laws

from . import harness, problems
from .base import Timer

# rule kind -> (engine method, problems to pose)
# (greedy verification is deterministic given the drafts; `checks.greedy` also compares it exactly)
PLAN = {
    "chain": ("verify", ["dirichlet", "reversed", "zero-mass", "deterministic", "narrow", "padded"]),
    "greedy": ("verify", ["dirichlet", "near-tie"]),
    "block": ("verify_block", ["dirichlet", "zero-mass", "deterministic"]),
    "tree": ("verify_trees", ["dirichlet", "deterministic"]),
}
TREE_BRANCHING = {"dirichlet": (2, 2), "deterministic": (3, 2)}


@dataclass
class Sampled:
    rule: str
    problem: problems.Problem
    law: laws.SequenceLaw
    samples: np.ndarray          # int64 [n, width], -1 padded
    seconds: float
    drafts: np.ndarray | None = None   # int64 [n, kappa] (chain and block)


_LAWS: dict = {}
USERS = ("marginal", "joint", "acceptance")   # the checks that read these samples


def sampling_seconds(ctx) -> float:
    """Seconds spent sampling one-step problems in this audit so far."""
    return ctx.__dict__.get("_onestep_seconds", 0.0)


def law_of(problem: problems.Problem, rule: str, ctx) -> laws.SequenceLaw:
    """The exact law of one step of `problem` under `rule`, memoised across audits of one process
    (problems are seeded by (audit seed, rule, name), so the key names them)."""
    key = (ctx.seed, rule, problem.name, problem.target.tobytes(), problem.draft.tobytes())
    law = _LAWS.get(key)
    if law is None:
        if rule == "tree":
            law = problem.law("tree", branching=TREE_BRANCHING[problem.name])
        elif rule == "greedy":
            law = problem.law("chain", rule=laws.GREEDY)
        else:
            law = problem.law("block" if rule == "block" else "chain")
        _LAWS[key] = law
    return law


def supported(engine) -> list[str]:
    caps = set(getattr(engine, "capabilities", ()))
    return [r for r in PLAN if r in caps and (r != "tree" or harness.verifies_trees(engine))]


def collect(engine, ctx) -> list[Sampled]:
    """Sample every (rule, problem) pair once; cached on ctx."""
    cache = ctx.__dict__.setdefault("_onestep", {})
    key = id(engine)
    if key in cache:
        return cache[key]
    out = []
    for rule in supported(engine):
        method, names = PLAN[rule]
        for name in names:
            problem = problems.make(name, ctx.rng("problem", rule, name))
            rng = ctx.rng("samples", rule, name)
            ctx.say(f"sampling {rule}[{name}]")
            drafts = None
            with Timer() as t:
                if rule == "tree":
                    branching = TREE_BRANCHING[name]
                    samples = harness.run_tree(engine, problem, ctx.samples, rng, ctx, branching, what=f"{rule}[{name}]")
                else:
                    samples, drafts = harness.run_chain(engine, problem, ctx.samples, rng, ctx, method=method,
                                                        greedy=rule == "greedy", what=f"{rule}[{name}]")
            law = law_of(problem, rule, ctx)
            out.append(Sampled(rule, problem, law, samples, t.seconds, drafts))
            ctx.__dict__["_onestep_seconds"] = sampling_seconds(ctx) + t.seconds
    cache[key] = out
    return out
