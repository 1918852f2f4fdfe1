"""What every check returns, and the context it runs in.

A check is a function `run(engine, ctx) -> list[CheckResult]`. Statistical rows carry the
statistic, p-value, degrees of freedom and sample size; the audit applies Holm's step-down
procedure over all statistical rows of one audit (family-wise false alarm <= ctx.alpha) and states,
for each row, the smallest total-variation deviation it detects with probability >= 0.99 at the
Bonferroni level alpha / m (conservative for Holm). Exact rows (an impossible token emitted, two
runs that must be bitwise equal and are not) carry no p-value: their verdict is final.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import numpy as np

from specverify.format import json_safe
from specverify.settings import DEFAULTS
from specverify.verdicts import ERROR, FAIL, PASS, SKIP, WARN  # noqa: F401 - the checks import them from here

from .state import AuditState

# what law a row tests (CheckResult.law, declared by every row: by its check's `law` in the battery
# table, or by the row itself in a check whose rows differ). A failing OUTPUT_LAW row says the emitted
# tokens are biased; a failing RULE_LAW row alone (with whole runs exact) that the verifier follows
# another rule than the chain rule -- e.g. sample-match, exact in law but accepting less.
OUTPUT_LAW = "output"               # the law of the emitted tokens, the same for every exact verifier
RULE_LAW = "rule"                   # a law of the chain rule itself: acceptance rates, the one-step joint
                                    # law, a step whose draft is fixed rather than drawn from q
LAWS = (OUTPUT_LAW, RULE_LAW)



def _num(x):
    """A statistic, p-value or TV bound for JSON: a float (a numpy integer stays an integer), None when
    absent or not finite."""
    return json_safe(x if x is None or isinstance(x, np.integer) else float(x))


@dataclass
class CheckResult:
    name: str                       # "<rule>.<check>[<problem>]", e.g. "chain.marginal[dirichlet,pos=1]"
    verdict: str                    # pass | fail | skip | error (after Holm for statistical rows)
    statistic: float | None = None
    p_value: float | None = None
    dof: int | None = None
    n: int = 0
    min_detectable_tv: float | None = None
    detail: str = ""                # one line for humans: what was seen
    exact: bool = False             # verdict from an exact comparison, not a test
    seconds: float = 0.0
    data: dict = field(default_factory=dict)   # observed/expected cells etc., for reports
    check: str = ""                 # the battery module that produced the row (set by run_audit)
    law: str | None = None          # OUTPUT_LAW or RULE_LAW (set from the check's declaration unless the
                                    # row declares its own)
    power_fn: object = field(default=None, repr=False, compare=False)
    # power_fn(level) -> min detectable TV at that level, for rows whose power is not the chi-squared
    # formula of (n, dof) (the binomial acceptance rows); not serialised

    @property
    def statistical(self) -> bool:
        return not self.exact and self.p_value is not None and self.verdict in (PASS, FAIL)

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "verdict": self.verdict,
            "statistic": _num(self.statistic),
            "p_value": _num(self.p_value),
            "dof": None if self.dof is None else int(self.dof),
            "n": int(self.n),
            "min_detectable_tv": _num(self.min_detectable_tv),
            "exact": self.exact,
            "detail": self.detail,
            "seconds": round(self.seconds, 4),
            "data": self.data,
            "check": self.check,
            "law": self.law,
        }


@dataclass(frozen=True, slots=True)
class Context:
    """Settings shared by the checks of one audit (frozen, without a `__dict__`: a change is
    `dataclasses.replace`), and the audit's mutable state (`state`, `battery.state.AuditState`:
    `run_audit` gives each audit its own)."""

    seed: int = DEFAULTS.seed
    samples: int = DEFAULTS.samples # samples per statistical problem
    alpha: float = DEFAULTS.alpha   # family-wise false-alarm rate of the whole audit
    power: float = 0.99             # min_detectable_tv is stated at this power
    min_expected: float = 10.0      # chi-squared cells are pooled up to this expected count: at the
                                    # audit's per-test levels (~1e-5) pooling at 5 lets the asymptotic
                                    # tail inflate false alarms ~1.4-2x, at 10 ~1.2-1.3x (stats docs)
    timeout: float = DEFAULTS.timeout   # seconds one adapter call may take
    progress: object = None         # callable(str) or None
    factory: object = None          # callable() -> a fresh adapter of the engine under audit (the
                                    # seeded checks replay calls on fresh instances); None: skipped
    check: str = ""                 # the battery check running now (named in adapter errors)
    size: str = "standard"          # the bitwise check's size (settings.SIZES; checks.bitwise.SIZES)
    large_scale: float = 1.0        # fraction of the real-vocabulary rows' sample sizes (large_vocab,
                                    # far_tail: `large_problems.scaled`); findings size it per engine
                                    # for the Triton interpreter, every row then states its power
    large_max_vocab: int | None = None  # real-vocabulary problems above this V are not run (each one a
                                    # `not_covered` SKIP row); None runs them all
    jobs: int = 1                   # adapter processes the audit may run at once (`--jobs`)
    open_engine: object = None      # callable() -> one more adapter handle in a worker of its own (the
                                    # caller closes it), or None: a check that can split its calls
                                    # (greedy bitwise) then runs them side by side
    round: int = 0                  # the sampling round of a decisive audit (`battery.decisive`): salts the
                                    # seeds of the draws (`draws`), never those of problems and laws
    check_level: float | None = None    # a decisive audit's alpha share of one check (alpha / checks run):
                                    # a check whose rows stop their own draws early (far_tail) divides it by
                                    # its statistical rows; None in a fixed audit (draw the whole budget)
    rare_rate: float = DEFAULTS.rare_rate   # the rare_event rows' target rate (`checks.rare_event`)
    shards: object = None           # callable(func, specs) -> [func(engine, ctx, spec) for spec in specs], run
                                    # where the executor puts them (`specverify.executors`); None: here, in order
    model: str | None = None        # server audits: the model asked for (`settings.model`)
    plain_url: str | None = None    # server audits: the plain server (`settings.plain_url`)
    state: AuditState = field(default_factory=AuditState, compare=False, repr=False)

    def rng(self, *key) -> np.random.Generator:
        """A generator seeded by the audit seed and a per-check key (strings hashed stably)."""
        words = [self.seed] + [int.from_bytes(hashlib.blake2b(str(k).encode(), digest_size=8).digest(), "little")
                               for k in key]
        return np.random.default_rng(words)

    def draws(self, *key) -> np.random.Generator:
        """The generator of a check's random draws (samples, runs): `rng(*key)` in round 0, a fresh
        stream in each later round of a decisive audit, so rounds add independent samples of the same
        problems (whose seeds come from `rng`)."""
        return self.rng(*key) if self.round == 0 else self.rng("round", self.round, *key)

    def say(self, msg: str) -> None:
        if self.progress:
            self.progress(msg)

    def note_call(self, what: str, changed) -> None:
        """One adapter call made through a handle, and the names of the input arrays it changed."""
        self.state.note_call(what, changed)


class Timer:
    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
