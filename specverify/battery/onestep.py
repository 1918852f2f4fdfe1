"""Samples of one-step problems, shared by the marginal and joint checks.

For every verify rule the engine claims (`reference.rules`), each of the rule's one-step problems is
sampled once (seeded per rule and problem) and kept in the audit's state (`ctx.state.onestep`), so the marginal and joint
statistics read the same draws. The expected law is the exact law of that rule, whatever the engine
does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specverify.reference import laws, rules

from . import harness, problems
from .base import Timer


@dataclass
class Sampled:
    rule: str
    problem: problems.Problem
    law: laws.SequenceLaw
    samples: np.ndarray          # int64 [n, width], -1 padded
    seconds: float
    drafts: np.ndarray | None = None   # int64 [n, kappa] (chain and block)




def sampling_seconds(ctx) -> float:
    """Seconds spent sampling one-step problems in this audit so far."""
    return ctx.state.onestep_seconds


def law_of(problem: problems.Problem, rule: str, ctx) -> laws.SequenceLaw:
    """The exact law of one step of `problem` under `rule`, memoised in the audit's state (problems are
    seeded by (audit seed, rule, name), so the key names them)."""
    key = ("onestep", ctx.seed, rule, problem.name, problem.target.tobytes(), problem.draft.tobytes())
    return ctx.state.shared.law(key, lambda: problem.law(rule, rules.RULES[rule].problems[problem.name]))


def supported(engine) -> list[rules.VerifyRule]:
    """The rules the engine claims, a tree rule only if it has a tree form."""
    caps = getattr(engine, "capabilities", ())
    return [r for r in rules.claimed(caps) if not r.tree or harness.verifies_trees(engine)]


def collect(engine, ctx) -> list[Sampled]:
    """Sample every (rule, problem) pair once; kept in the audit's state."""
    cache = ctx.state.onestep
    key = id(engine)
    if key in cache:
        return cache[key]
    out = []
    for rule in supported(engine):
        for name, shape in rule.problems.items():
            problem = problems.make(name, ctx.rng("problem", rule.name, name))
            rng = ctx.draws("samples", rule.name, name)
            ctx.say(f"sampling {rule.name}[{name}]")
            drafts = None
            with Timer() as t:
                if rule.tree:
                    samples = harness.run_tree(engine, problem, ctx.samples, rng, ctx, shape, what=f"{rule.name}[{name}]")
                else:
                    samples, drafts = harness.run_chain(engine, problem, ctx.samples, rng, ctx, method=rule.method,
                                                        greedy=rule.greedy, what=f"{rule.name}[{name}]")
            law = law_of(problem, rule.name, ctx)
            out.append(Sampled(rule.name, problem, law, samples, t.seconds, drafts))
            ctx.state.onestep_seconds += t.seconds
    cache[key] = out
    return out
