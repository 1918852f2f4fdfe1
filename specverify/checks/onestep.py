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
PLAN = {
    "chain": ("verify", ["dirichlet", "reversed", "zero-mass", "deterministic", "narrow"]),
    "greedy": ("verify", ["dirichlet", "near-tie"]),
    "block": ("verify_block", ["dirichlet", "zero-mass", "deterministic"]),
    "tree": ("verify_tree", ["dirichlet", "deterministic"]),
}
TREE_BRANCHING = {"dirichlet": (2, 2), "deterministic": (3, 2)}
TREE_SAMPLE_FRACTION = 0.1   # tree verify is called once per sample: fewer samples, stated power


@dataclass
class Sampled:
    rule: str
    problem: problems.Problem
    law: laws.SequenceLaw
    samples: np.ndarray          # int64 [n, width], -1 padded
    seconds: float


def supported(engine) -> list[str]:
    caps = set(getattr(engine, "capabilities", ()))
    return [r for r in PLAN if r in caps]


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
            with Timer() as t:
                if rule == "tree":
                    branching = TREE_BRANCHING[name]
                    n = max(1000, int(ctx.samples * TREE_SAMPLE_FRACTION))
                    samples = harness.run_tree(engine, problem, n, rng, ctx, branching, what=f"{rule}[{name}]")
                    law = problem.law("tree", branching=branching)
                else:
                    samples = harness.run_chain(engine, problem, ctx.samples, rng, ctx, greedy=rule == "greedy",
                                                method=method, what=f"{rule}[{name}]")
                    law = problem.law("block" if rule == "block" else "chain",
                                      rule=laws.GREEDY if rule == "greedy" else laws.EXACT)
            out.append(Sampled(rule, problem, law, samples, t.seconds))
    cache[key] = out
    return out
