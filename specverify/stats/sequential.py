"""Anytime-valid sequential tests (e-processes): look at the data after every batch, stop when decided.

An e-process is a nonnegative process e_n with E[e_tau] <= 1 under the null at every stopping time tau.
By Ville's inequality P(exists n: e_n >= 1/alpha) <= alpha, so a row may be examined after every batch
and rejected the first time e_n >= 1/alpha without inflating the false-alarm rate (a fixed-n chi-squared
test re-run at every look does inflate it). Everything here is a likelihood ratio of a Bayes mixture
against the exact null, computed from cumulative counts in log-gamma form (float64, scipy.special).

Multinomial against a known law p (Lindon & Malek, NeurIPS 2022). Prior q ~ Dirichlet(c p) on the
true law; the mixture likelihood of counts x (n = sum x) over the multinomial likelihood under p is

    log e = gammaln(c) - gammaln(c + n) + sum_i [gammaln(c p_i + x_i) - gammaln(c p_i)] - sum_i x_i log p_i

(the multinomial coefficient cancels). It is a nonnegative martingale under p with e_0 = 1. Cells with
p_i = 0 are left out of the sums; any count there makes e = inf (the law is violated with certainty).
An equal-weight average of such e-processes over a small grid of concentrations c is again one; a
small c reacts to gross deviations after few samples, a large c to small deviations at large n.

Choosing c and stating power (`tuned_concentration`, `min_detectable_tv`). For large n the mixture is
close to a Gaussian one: with d = k - 1 (k cells with p_i > 0), r = n / c and Pearson's
S = sum (x_i - n p_i)^2 / (n p_i),

    log e ~= -(d/2) log(1 + r) + (r / (1 + r)) S / 2,

so e >= 1/alpha at n when S >= s*(r) = (1 + 1/r)(2 log(1/alpha) + d log(1 + r)). Under an alternative
of Cohen's effect w (w^2 = sum (q_i - p_i)^2 / p_i), S is about noncentral chi2(d, n w^2), so the
probability of crossing at the look at n is ncx2.sf(s*(r), d, n w^2); crossing at any look up to n is
at least that. `tuned_concentration` picks the c whose r = n_target / c needs the smallest n w^2 for the
target power. A grid of G concentrations is bounded below by its best member over G, so its power is
stated with the threshold G/alpha for the best member. TV follows from w >= 2 TV (Cauchy-Schwarz, as in
power.py), tight when mass moves proportionally between two halves of the law: every deviation with
TV >= min_detectable_tv is caught with probability >= power (asymptotically; tests/test_sequential.py
checks it by simulation on planted deviations in that worst direction).

Rates (`RateEProcess`): the k = 2 case, Beta(c p0, c (1 - p0)) prior on the rate; a one-sided test
truncates the prior to the side of the alternative (log of scipy.special.betaincc / betainc ratios).

Two samples, no known law (`TwoSampleEProcess`): see its docstring for why it is valid.

Family-wise control (`family_rejections`): Bonferroni on e-values (row i rejected when e_i >= m/alpha)
or Holm on p_i = 1/max e_i. Each row's e-process is valid at any stopping time, so rows may stop at
different times.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy import optimize, special

from specverify.errors import InputError

from .chisquare import _as_counts, _as_probs
from .errors import check_unit_open
from .holm import holm
from .results import EProcessResult, FamilyResult, SequentialRun, _frozen_array

REJECTED = "REJECTED"
POWERED = "POWERED"
BUDGET = "BUDGET"

DEFAULT_N_TARGET = 10_000
"""The sample size a process's concentrations are tuned for when the caller names none."""

GRID_SIZE = 4
GRID_RATIO = 8.0
"""Default concentration grid: the tuned c, c/8, c/64, c/512 (equal weights)."""

_R_GRID = np.exp(np.linspace(math.log(1e-2), math.log(1e7), 281))

# ---------------------------------------------------------------------------------------------------
# power (Gaussian approximation of the Dirichlet mixture)


def _threshold(d: int, log_level: float, r: float) -> float:
    """s*(r): the Pearson statistic at which the mixture with r = n / c reaches exp(log_level)."""
    return (1.0 + 1.0 / r) * (2.0 * log_level + d * math.log1p(r))


@functools.lru_cache(maxsize=65536)
def _lambda_needed(d: int, log_level: float, power: float, r: float) -> float:
    """The noncentrality n w^2 at which ncx2.sf(s*(r), d, .) = power."""
    critical = _threshold(d, log_level, r)

    def shortfall(lam: float) -> float:  # special.chndtr is the ncx2 cdf without the rv_continuous overhead
        return (1.0 - float(special.chndtr(critical, d, lam))) - power

    high = max(1.0, critical)
    while shortfall(high) < 0:
        high *= 2.0
    return float(optimize.brentq(shortfall, 0.0, high, xtol=1e-10, rtol=1e-10, maxiter=500))


@functools.lru_cache(maxsize=4096)
def _best_r(d: int, log_level: float, power: float) -> float:
    """The r = n / c that needs the smallest noncentrality (coarse grid, then bounded refinement)."""
    lams = [_lambda_needed(d, log_level, power, float(r)) for r in _R_GRID[::16]]
    i = int(np.argmin(lams))
    lo, hi = _R_GRID[::16][max(i - 1, 0)], _R_GRID[::16][min(i + 1, len(lams) - 1)]
    res = optimize.minimize_scalar(
        lambda log_r: _lambda_needed(d, log_level, power, float(math.exp(log_r))),
        bounds=(math.log(lo), math.log(hi)), method="bounded", options={"xatol": 1e-3})
    return float(math.exp(res.x))


def _check_k(k) -> int:
    try:
        integral = int(k) == k
    except (TypeError, ValueError, OverflowError):
        integral = False
    if isinstance(k, bool) or not integral or k < 2:
        raise InputError(f"k must be an integer >= 2 (cells with positive probability), got {k!r}")
    return int(k)


def _check_n(n, name="n") -> float:
    try:
        n = float(n)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {type(n).__name__}") from None
    if not math.isfinite(n) or n <= 0:
        raise InputError(f"{name} must be a positive sample size, got {n!r}")
    return n


def _as_concentrations(concentration) -> tuple:
    values = np.atleast_1d(np.asarray(concentration, dtype=np.float64))
    if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise InputError(f"concentration must be a positive number or a non-empty list of them, got {concentration!r}")
    return tuple(float(v) for v in values)


def tuned_concentration(k, n_target, alpha=0.05, power=0.99) -> float:
    """The Dirichlet concentration c (prior alpha = c p) whose e-process, at level `alpha`, needs the
    smallest effect to reach `power` at n = `n_target` (Gaussian approximation, see the module text)."""
    d = _check_k(k) - 1
    n = _check_n(n_target, "n_target")
    alpha = check_unit_open(alpha, "alpha")
    power = check_unit_open(power, "power")
    return n / _best_r(d, math.log(1.0 / alpha), power)


def concentration_grid(k, n_target, alpha=0.05, power=0.99, size=GRID_SIZE, ratio=GRID_RATIO) -> tuple:
    """`size` concentrations c, c/ratio, c/ratio^2, ... with c tuned for n_target at level alpha/size
    (the level the grid's best member must reach for the average to reach alpha)."""
    size = int(size)
    if size < 1:
        raise InputError(f"size must be >= 1, got {size}")
    top = tuned_concentration(k, n_target, check_unit_open(alpha, "alpha") / size, power)
    return tuple(top / float(ratio) ** j for j in range(size))


def _min_w(d: int, n: float, alpha: float, power: float, concentrations) -> float:
    if concentrations is None:
        log_level = math.log(1.0 / alpha)
        lam = _lambda_needed(d, log_level, power, _best_r(d, log_level, power))
    else:
        cs = _as_concentrations(concentrations)
        log_level = math.log(len(cs) / alpha)
        lam = min(_lambda_needed(d, log_level, power, float(n / c)) for c in cs)
    return math.sqrt(lam / n)


def min_detectable_tv(k, n, alpha=0.05, power=0.99, concentration=None) -> float:
    """Smallest total variation that a multinomial e-process over `k` cells (with positive null
    probability) rejects at level `alpha` with probability >= `power` by `n` samples (when it is looked
    at n, whatever the looks before). `concentration`: a number or the grid the process averages over;
    None means the concentration tuned for this very n (the best a single c can do). Values >= 1 mean
    nothing is guaranteed. Asymptotic (Gaussian approximation, see the module text)."""
    d = _check_k(k) - 1
    n = _check_n(n)
    alpha = check_unit_open(alpha, "alpha")
    power = check_unit_open(power, "power")
    return _min_w(d, n, alpha, power, concentration) / 2.0


def rate_min_detectable_diff(p0, n, alpha=0.05, power=0.99, concentration=None) -> float:
    """Smallest |rate - p0| a two-sided RateEProcess rejects with probability >= power by n
    (the k = 2 case of min_detectable_tv, with w^2 = diff^2 / (p0 (1 - p0))); one-sided processes do at
    least as well in their direction. 0.0 when p0 is 0 or 1 (one contrary observation rejects)."""
    p0 = float(p0)
    if not 0.0 <= p0 <= 1.0:
        raise InputError(f"p0 must lie in [0, 1], got {p0!r}")
    n = _check_n(n)
    alpha = check_unit_open(alpha, "alpha")
    power = check_unit_open(power, "power")
    if p0 in (0.0, 1.0):
        return 0.0
    return _min_w(1, n, alpha, power, concentration) * math.sqrt(p0 * (1.0 - p0))


def n_for_tv(k, tv, alpha=0.05, power=0.99, concentration=None) -> int:
    """Smallest n at which min_detectable_tv(k, n, alpha, power, concentration) <= tv (bisection)."""
    k = _check_k(k)
    tv = float(tv)
    if not 0.0 < tv <= 1.0:
        raise InputError(f"tv must lie in (0, 1], got {tv!r}")

    def ok(n: int) -> bool:
        return min_detectable_tv(k, n, alpha, power, concentration) <= tv

    high = 1
    while not ok(high):
        high *= 2
        if high > 1 << 50:
            raise InputError(f"no n up to 2^50 reaches tv {tv!r} with concentration {concentration!r}")
    low = high // 2  # ok(low) is False unless low == 0
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if ok(middle) else (middle, high)
    return high


# ---------------------------------------------------------------------------------------------------
# e-processes


def _log_mean_exp(values: np.ndarray) -> np.ndarray:
    """log(mean(exp(values))) over the last axis, overflow-safe (plain numpy: scipy's logsumexp costs
    milliseconds a call in its array-API dispatch, and rows update this once per batch)."""
    top = np.max(values, axis=-1, keepdims=True)
    finite_top = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        out = np.log(np.mean(np.exp(values - finite_top), axis=-1)) + finite_top[..., 0]
    return out


def multinomial_log_e(counts, law, concentration) -> np.ndarray:
    """log e of the Dirichlet-multinomial mixture (equal-weight average over `concentration`, a number
    or a sequence) for cumulative `counts` of shape (..., k) against `law` (k probabilities). Vectorised
    over leading axes; +inf where a count falls in a cell with probability 0."""
    p = np.asarray(law, dtype=np.float64)
    x = np.asarray(counts, dtype=np.float64)
    cs = np.asarray(_as_concentrations(concentration))
    support = p > 0
    impossible = np.any(x[..., ~support] > 0, axis=-1)
    ps, xs = p[support], x[..., support]
    n = xs.sum(axis=-1)
    base = -(xs * np.log(ps)).sum(axis=-1)
    a = cs[:, None] * ps[None, :]  # (G, k)
    xg = xs[..., None, :]  # (..., 1, k)
    per_c = (special.gammaln(cs) - special.gammaln(cs + n[..., None])
             + (special.gammaln(a + xg) - special.gammaln(a)).sum(axis=-1))  # (..., G)
    log_e = _log_mean_exp(per_c) + base
    if support.sum() < 2:
        log_e = np.zeros_like(log_e)
    return np.where(impossible, np.inf, log_e)


def _exp(log_value: float) -> float:
    """exp without an overflow warning: e-values past float64's range are reported as inf."""
    return math.exp(log_value) if log_value < 709.0 else math.inf


class _Running:
    """Keeps the running maximum of log e and builds results."""

    method = ""

    def __init__(self, concentrations: tuple):
        self.concentrations = concentrations
        self.n = 0
        self.log_e = 0.0
        self.max_log_e = 0.0
        self.impossible = False

    def _record(self, log_e: float) -> None:
        self.log_e = float(log_e)
        self.max_log_e = max(self.max_log_e, self.log_e)
        self.impossible = self.impossible or self.log_e == math.inf

    def result(self, arms: tuple = ()) -> EProcessResult:
        """The current state as an EProcessResult."""
        return EProcessResult(
            log_e=self.log_e, e=_exp(self.log_e), n=int(self.n), max_log_e=self.max_log_e,
            p_value_anytime=float(min(1.0, math.exp(-self.max_log_e))), method=self.method,
            concentrations=self.concentrations, impossible=self.impossible, arms=arms)


class MultinomialEProcess(_Running):
    """E-process for multinomial counts against a known law (Dirichlet-multinomial mixture).

    law            the exact null probabilities over k cells (sum 1; zeros allowed: a count there means
                   e = inf).
    concentration  a number, or a sequence averaged with equal weights; None: `concentration_grid` tuned
                   for `n_target` (default DEFAULT_N_TARGET) at level `alpha`.
    `update(counts_batch)` adds a batch of counts (length k) and returns the EProcessResult.
    """

    method = "multinomial"

    def __init__(self, law, concentration=None, *, n_target=None, alpha=0.05, power=0.99):
        law = np.asarray(law, dtype=np.float64)
        self.law = _as_probs(law, law.size if law.ndim == 1 else -1)
        self.k = int(np.count_nonzero(self.law > 0))
        if concentration is None:
            if self.k < 2:
                concentration = 1.0
            else:
                concentration = concentration_grid(self.k, n_target or DEFAULT_N_TARGET, alpha, power)
        super().__init__(_as_concentrations(concentration))
        self.counts = np.zeros(self.law.size, dtype=np.int64)

    def update(self, counts_batch) -> EProcessResult:
        batch = _as_counts(counts_batch, "counts_batch")
        if batch.size != self.counts.size:
            raise InputError(f"counts_batch has {batch.size} cells, the law has {self.counts.size}")
        self.counts += batch
        self.n = int(self.counts.sum())
        self._record(multinomial_log_e(self.counts, self.law, self.concentrations))
        return self.result()


class RateEProcess(_Running):
    """E-process for a success rate against p0 (beta-binomial mixture): acceptance-rate rows, far tails.

    sides: "two" (rate != p0, prior Beta(c p0, c (1 - p0))), "greater" (rate > p0) or "less"
    (rate < p0), the one-sided ones with the prior truncated to that side. p0 = 0 (or 1): one success
    (or failure) makes e = inf. `update(successes, trials)` adds a batch.
    """

    def __init__(self, p0, sides="two", concentration=None, *, n_target=None, alpha=0.05, power=0.99):
        p0 = float(p0)
        if not 0.0 <= p0 <= 1.0:
            raise InputError(f"p0 must lie in [0, 1], got {p0!r}")
        if sides not in ("two", "less", "greater"):
            raise InputError(f"sides must be 'two', 'less' or 'greater', got {sides!r}")
        if concentration is None:
            concentration = concentration_grid(2, n_target or DEFAULT_N_TARGET, alpha, power)
        super().__init__(_as_concentrations(concentration))
        self.p0, self.sides, self.method = p0, sides, f"rate-{sides}"
        self.successes = 0

    def update(self, successes, trials) -> EProcessResult:
        s, t = _as_counts([successes, trials], "successes/trials")
        if s > t:
            raise InputError(f"successes ({s}) exceed trials ({t})")
        self.successes += int(s)
        self.n += int(t)
        self._record(self._log_e())
        return self.result()

    def _log_e(self) -> float:
        return float(rate_log_e(self.successes, self.n, self.p0, self.sides, self.concentrations))


def rate_log_e(successes, trials, p0, sides="two", concentration=1.0) -> np.ndarray:
    """log e of the beta-binomial mixture (equal-weight average over `concentration`) for cumulative
    `successes` out of `trials` (arrays broadcast together) against the rate p0; `sides` "two",
    "less" or "greater" (prior truncated to that side of p0). p0 = 0 or 1: +inf after a contrary
    observation, else 0."""
    s = np.asarray(successes, dtype=np.float64)
    f = np.asarray(trials, dtype=np.float64) - s
    p0 = float(p0)
    if p0 == 0.0 or p0 == 1.0:
        violated = s > 0 if p0 == 0.0 else f > 0
        return np.where(violated, np.inf, 0.0)
    cs = np.asarray(_as_concentrations(concentration))
    a, b = cs * p0, cs * (1.0 - p0)
    s_, f_ = s[..., None], f[..., None]
    per_c = special.betaln(a + s_, b + f_) - special.betaln(a, b)
    with np.errstate(divide="ignore"):
        if sides == "greater":  # prior and posterior mass above p0
            per_c = per_c + np.log(special.betaincc(a + s_, b + f_, p0)) - np.log(special.betaincc(a, b, p0))
        elif sides == "less":
            per_c = per_c + np.log(special.betainc(a + s_, b + f_, p0)) - np.log(special.betainc(a, b, p0))
        elif sides != "two":
            raise InputError(f"sides must be 'two', 'less' or 'greater', got {sides!r}")
    return _log_mean_exp(per_c) - (s * math.log(p0) + f * math.log1p(-p0))


class TwoSampleEProcess(_Running):
    """E-process for "arms A and B draw from the same law over k cells" (no law known).

    `update(counts_a, counts_b)` adds one batch from each arm (any sizes). The batch's observations are
    put in a seeded uniformly random order (independent of the values), then scanned one at a time.

    Why it is valid. Under the null all observations of a batch are i.i.d. from one law and the order
    is a random permutation independent of them, so given everything seen before and the cell of the
    next observation, its arm label is A with probability exactly pi_t = (A's left in the batch) /
    (observations left in the batch). The process multiplies q_t / pi_t when the label is A and
    (1 - q_t) / (1 - pi_t) when it is B, where q_t is any prediction built from the past only; each
    factor has conditional mean 1 under the null, so the product is a nonnegative martingale with
    e_0 = 1 and Ville's inequality applies (batch sizes may depend on the past; the order must not
    depend on the values, hence the seeded shuffle).

    The prediction q_t tilts pi_t by rho = qA(cell) / qB(cell) (q_t = pi_t rho / (pi_t rho + 1 - pi_t):
    the label's probability if the arms drew from those laws with independent fair assignment), where
    each arm's predictive law is its counts seen before plus c times the pooled predictive law (both
    arms' counts plus `smoothing` per cell): a large c shrinks rho towards 1 until the data outweigh
    it, playing the part of the Dirichlet concentration in the one-sample mixture. One such process
    runs per concentration c of the grid (`concentration`, default `concentration_grid` tuned for
    `n_target` observations per arm) and e is their equal-weight average, again an e-process.
    """

    method = "two-sample"

    def __init__(self, k, concentration=None, *, n_target=None, alpha=0.05, power=0.99, seed=0,
                 smoothing=0.5):
        self.k = _check_k(k)
        self.smoothing = float(smoothing)
        if not math.isfinite(self.smoothing) or self.smoothing <= 0:
            raise InputError(f"smoothing must be positive, got {smoothing!r}")
        if concentration is None:
            concentration = concentration_grid(self.k, n_target or DEFAULT_N_TARGET, alpha, power)
        super().__init__(_as_concentrations(concentration))
        self.rng = np.random.default_rng(seed)
        self.counts_a = np.zeros(self.k, dtype=np.int64)
        self.counts_b = np.zeros(self.k, dtype=np.int64)
        self._log_e_per_c = np.zeros(len(self.concentrations))

    def result(self, arms: tuple = ()) -> EProcessResult:
        return super().result((int(self.counts_a.sum()), int(self.counts_b.sum())))

    def update(self, counts_a, counts_b) -> EProcessResult:
        ca, cb = _as_counts(counts_a, "counts_a"), _as_counts(counts_b, "counts_b")
        if ca.size != self.k or cb.size != self.k:
            raise InputError(f"counts need {self.k} cells, got {ca.size} and {cb.size}")
        self._log_e_per_c = self._log_e_per_c + self._batch_log_factor(ca, cb)
        self._record(float(_log_mean_exp(self._log_e_per_c)))
        self.counts_a += ca
        self.counts_b += cb
        self.n = int(self.counts_a.sum() + self.counts_b.sum())
        return self.result()

    def _batch_log_factor(self, ca: np.ndarray, cb: np.ndarray) -> np.ndarray:
        cells = np.concatenate([np.repeat(np.arange(self.k), ca), np.repeat(np.arange(self.k), cb)])
        is_a = np.concatenate([np.ones(int(ca.sum()), bool), np.zeros(int(cb.sum()), bool)])
        total = cells.size
        if total == 0:
            return np.zeros(len(self.concentrations))
        order = self.rng.permutation(total)
        cells, is_a = cells[order], is_a[order]
        a_before = np.cumsum(is_a) - is_a  # A's earlier in the batch
        t = np.arange(total)
        pi = (int(ca.sum()) - a_before) / (total - t)
        # per-cell A and B counts before each observation (earlier batches + earlier in this batch)
        by_cell = np.argsort(cells, kind="stable")
        sorted_cells, sorted_a = cells[by_cell], is_a[by_cell].astype(np.int64)
        starts = np.searchsorted(sorted_cells, sorted_cells, side="left")
        cum_a = np.cumsum(sorted_a) - sorted_a
        cum_all = np.arange(total) - starts
        cell_a_sorted = cum_a - (np.cumsum(sorted_a) - sorted_a)[starts]
        cell_b_sorted = cum_all - cell_a_sorted
        cell_a, cell_b = np.empty(total), np.empty(total)
        cell_a[by_cell], cell_b[by_cell] = cell_a_sorted, cell_b_sorted
        beta, k = self.smoothing, self.k
        a_prev = self.counts_a[cells] + cell_a  # this cell's A's and B's before the observation
        b_prev = self.counts_b[cells] + cell_b
        n_a = self.counts_a.sum() + a_before  # all A's and B's before it
        n_b = self.counts_b.sum() + (t - a_before)
        pooled = (a_prev + b_prev + beta) / (n_a + n_b + k * beta)
        c = np.asarray(self.concentrations)[:, None]
        rho = ((a_prev + c * pooled) / (n_a + c)) / ((b_prev + c * pooled) / (n_b + c))
        denom = pi * rho + 1.0 - pi
        log_factor = np.where(is_a, np.log(rho) - np.log(denom), -np.log(denom))
        return log_factor.sum(axis=1)


# ---------------------------------------------------------------------------------------------------
# family-wise control and the sequential driver


def family_rejections(e_values, alpha=0.05, rule="bonferroni") -> FamilyResult:
    """Rows rejected at family-wise level `alpha` from each row's e-value (pass each row's running
    maximum, e.g. exp(result.max_log_e): every row's e-process is valid at any stopping time, so rows
    may stop at different times). "bonferroni": reject row i when e_i >= m / alpha (Ville per row, union
    bound over m rows). "holm": Holm's step-down on p_i = min(1, 1 / e_i)."""
    alpha = check_unit_open(alpha, "alpha")
    try:
        e = np.asarray(e_values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"e_values: not a numeric array ({exc})") from None
    if e.ndim != 1 or np.any(np.isnan(e)) or np.any(e < 0):
        raise InputError("e_values must be a 1-D array of non-negative numbers")
    with np.errstate(divide="ignore"):
        p = np.minimum(1.0, 1.0 / e)
    if rule == "bonferroni":
        adjusted = np.minimum(1.0, p * e.size)
        rejected = e >= e.size / alpha
    elif rule == "holm":
        result = holm(p, alpha)
        adjusted, rejected = np.asarray(result.adjusted_p), np.asarray(result.rejected)
    else:
        raise InputError(f"rule must be 'bonferroni' or 'holm', got {rule!r}")
    return FamilyResult(rejected=_frozen_array(rejected, bool), p_values=_frozen_array(p, np.float64),
                        adjusted_p=_frozen_array(adjusted, np.float64), alpha=alpha, rule=rule)


def doubling(first=64):
    """Batch schedule: a first batch of `first` samples, then each batch as large as all before it
    (the looks fall at first, 2 first, 4 first, ...)."""
    first = int(first)
    if first < 1:
        raise InputError(f"first must be >= 1, got {first}")
    return lambda n: first if n == 0 else n


def run_sequential(draw_batch, law, alpha=0.05, power_tv=0.01, max_n=1_000_000, batch_schedule=None,
                   power=0.99, concentration=None) -> SequentialRun:
    """Sample one row in rounds until decided. `draw_batch(size)` returns counts over the law's cells
    for `size` new samples; `batch_schedule(n)` gives the next batch size after n samples (default
    `doubling()`). After every batch: REJECTED when the e-process reaches 1/alpha; else POWERED when
    min_detectable_tv <= power_tv; else BUDGET once max_n samples are drawn (the last batch is cut to
    fit). Concentrations default to the grid tuned for the n at which power_tv would be reached
    (capped at max_n). A law with a single possible outcome is decided by the first impossible count;
    its min_tv is then 1 - (1 - power)^(1/n)."""
    alpha = check_unit_open(alpha, "alpha")
    power = check_unit_open(power, "power")
    max_n = int(_check_n(max_n, "max_n"))
    law = np.asarray(law, dtype=np.float64)
    k = int(np.count_nonzero(law > 0))
    if concentration is None and k >= 2:
        n_target = min(max_n, n_for_tv(k, power_tv, alpha / GRID_SIZE, power))
        concentration = concentration_grid(k, n_target, alpha, power)
    process = MultinomialEProcess(law, concentration, alpha=alpha, power=power)
    schedule = batch_schedule or doubling()
    looks, threshold = 0, math.log(1.0 / alpha)
    while True:
        size = min(int(schedule(process.n)), max_n - process.n)
        if size < 1:
            raise InputError(f"batch_schedule returned {size} after {process.n} samples")
        result = process.update(draw_batch(size))
        looks += 1
        if k >= 2:
            min_tv = min_detectable_tv(k, result.n, alpha, power, process.concentrations)
        else:  # one possible outcome: a deviation of TV t shows an impossible count w.p. 1 - (1 - t)^n
            min_tv = -math.expm1(math.log1p(-power) / result.n)
        if result.max_log_e >= threshold:
            decision = REJECTED
        elif min_tv <= power_tv:
            decision = POWERED
        elif result.n >= max_n:
            decision = BUDGET
        else:
            continue
        return SequentialRun(
            decision=decision, n=result.n, e=result.e, log_e=result.log_e, max_log_e=result.max_log_e,
            p_value_anytime=result.p_value_anytime, min_tv=min_tv, looks=looks, alpha=alpha, power=power,
            power_tv=float(power_tv), max_n=max_n, concentrations=process.concentrations)
