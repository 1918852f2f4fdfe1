"""Result objects of the statistics (scipy.stats style): frozen dataclasses, no printing.

Every result has `to_dict()`, which returns plain Python ints, floats, strings, bools and lists, safe for
`json.dumps(..., allow_nan=False)`: a non-finite float (the NaN power of a vacuous test, an infinite
minimum detectable difference) becomes None.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from specverify.format import json_safe


def _frozen_array(values, dtype) -> np.ndarray:
    array = np.array(values, dtype=dtype)
    array.flags.writeable = False
    return array


class _ToDict:
    def to_dict(self) -> dict:
        """The fields as JSON-safe Python objects (arrays become lists, NaN/inf become None)."""
        return {f.name: json_safe(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True, eq=False)
class GofResult(_ToDict):
    """A goodness-of-fit test of observed counts against exact null probabilities.

    statistic        Pearson X^2 or the likelihood-ratio G, on the `cells` cells actually tested.
    p_value          P(statistic >= observed | null); under the null, P(p_value <= a) <= a (up to the
                     asymptotic approximation when p_value_method == "asymptotic").
    dof              cells - 1 (0 for a vacuous test).
    n                sample size (sum of the counts).
    method           "pearson" or "gtest".
    p_value_method   "asymptotic" (chi2(dof) on merged cells) or "monte-carlo" (seeded multinomial
                     resampling on the unmerged cells).
    cells            number of cells tested (after merging for the asymptotic path; the cells with
                     positive probability for the Monte-Carlo path).
    alpha, power     the level and the target power the detectable effect sizes are stated at.
    min_detectable_w   smallest Cohen's w = sqrt(sum (p1-p0)^2/p0) over the tested cells that the
                     asymptotic test at level alpha rejects with probability >= power (NaN if vacuous).
    min_detectable_tv  min_detectable_w / 2: every alternative whose total variation from the null, seen
                     on the tested cells, is at least this is rejected with probability >= power
                     (asymptotically). Values >= 1 mean no alternative is guaranteed to be caught.
    residuals        (O - E) / sqrt(E) per tested cell.
    observed, expected   the tested cells' observed and expected counts (sum of each pool).
    pools            for each tested cell, the original cell indices it pools (ascending); tested cells
                     are ordered by their smallest original index.
    note             "" normally; otherwise why the Monte-Carlo path was taken or why the test is vacuous.
    """

    statistic: float
    p_value: float
    dof: int
    n: int
    method: str
    p_value_method: str
    cells: int
    alpha: float
    power: float
    min_detectable_tv: float
    min_detectable_w: float
    residuals: np.ndarray
    observed: np.ndarray
    expected: np.ndarray
    pools: tuple
    note: str = ""


@dataclass(frozen=True, eq=False)
class HolmResult(_ToDict):
    """Holm's step-down procedure over a family of p-values (strong family-wise error control).

    rejected     bool array, in the input order: the hypotheses rejected at family-wise level alpha.
    adjusted_p   Holm-adjusted p-values in the input order (monotone in the sorted order, capped at 1);
                 rejected == (adjusted_p <= alpha).
    alpha        the family-wise level: P(any true null rejected) <= alpha, for any dependence.
    """

    rejected: np.ndarray
    adjusted_p: np.ndarray
    alpha: float


@dataclass(frozen=True, eq=False)
class BinomialResult(_ToDict):
    """An exact two-sided binomial test of a success rate against p0.

    statistic            the observed rate successes / n.
    p_value              exact two-sided p-value (scipy.stats.binomtest, likelihood-ordering method).
    n, successes, p0     the data and the null rate.
    alpha, power         the level and target power `min_detectable_diff` is stated at.
    min_detectable_diff  smallest |rate - p0| that the test at level alpha rejects with probability
                         >= power in both directions (inf if some feasible direction is never reached;
                         a direction with no room, such as upward from p0 = 1, is ignored).
    """

    statistic: float
    p_value: float
    n: int
    successes: int
    p0: float
    alpha: float
    power: float
    min_detectable_diff: float


@dataclass(frozen=True, eq=False)
class RateBoundResult(_ToDict):
    """Exact one-sided Clopper-Pearson bounds on an event rate (`stats.rare.rate_bound`).

    events, n      the events seen in n independent draws.
    alpha          the level: P(true rate <= upper) >= 1 - alpha, and the same for lower.
    rate           events / n.
    upper, lower   the one-sided bounds (lower = 0 with no event; upper = 1 - alpha ** (1 / n) then).
    """

    events: int
    n: int
    alpha: float
    rate: float
    upper: float
    lower: float


@dataclass(frozen=True, eq=False)
class EProcessResult(_ToDict):
    """The state of an e-process (an anytime-valid test) after its latest batch of samples.

    log_e, e          the e-value now (natural log and value; both inf after an observation the null
                      forbids; e alone is inf once log_e passes float64's range, so decide on log_e).
                      Under the null, E[e] <= 1 at every stopping time.
    n                 observations so far (for a two-sample process: both arms together).
    max_log_e         the largest log e-value seen at any look so far (0.0 before the first sample).
    p_value_anytime   min(1, 1 / max e so far): an anytime-valid p-value (Ville's inequality:
                      P(exists n: p_value_anytime <= a) <= a under the null).
    method            "multinomial", "rate-two", "rate-less", "rate-greater" or "two-sample".
    concentrations    the prior concentrations the e-value averages over (equal weights).
    impossible        True when a count fell where the null gives probability 0 (e = inf).
    arms              (n_a, n_b) for a two-sample process, () otherwise.
    """

    log_e: float
    e: float
    n: int
    max_log_e: float
    p_value_anytime: float
    method: str
    concentrations: tuple
    impossible: bool = False
    arms: tuple = ()


@dataclass(frozen=True, eq=False)
class FamilyResult(_ToDict):
    """Family-wise decisions over several e-processes (one per audit row).

    rejected     bool array in the input order: rows rejected at family-wise level alpha.
    p_values     min(1, 1 / e_i) per row (anytime-valid p-values when e_i is each row's running max).
    adjusted_p   Bonferroni (min(1, m p_i)) or Holm-adjusted p-values; rejected == (adjusted_p <= alpha).
    alpha, rule  the family-wise level and "bonferroni" or "holm".
    """

    rejected: np.ndarray
    p_values: np.ndarray
    adjusted_p: np.ndarray
    alpha: float
    rule: str


@dataclass(frozen=True, eq=False)
class SequentialRun(_ToDict):
    """The outcome of one row sampled in rounds until decided (`run_sequential`).

    decision     REJECTED (the e-process reached 1/alpha: the law is violated), POWERED (not rejected,
                 and the stated power now covers every deviation of TV >= power_tv), or BUDGET (the
                 cap max_n was reached first: inconclusive, `min_tv` says what was covered).
    n            samples drawn; looks: how many times the e-process was examined (one per batch).
    log_e, e, max_log_e, p_value_anytime   as in EProcessResult, at the stop.
    min_tv       smallest total variation the process rejects with probability >= power by n (see
                 sequential.min_detectable_tv); inf when nothing is covered.
    alpha, power, power_tv, max_n, concentrations   the settings the run used.
    """

    decision: str
    n: int
    e: float
    log_e: float
    max_log_e: float
    p_value_anytime: float
    min_tv: float
    looks: int
    alpha: float
    power: float
    power_tv: float
    max_n: int
    concentrations: tuple
