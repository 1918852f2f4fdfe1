"""The chapter's formulas (its speedup model, restated below), as plain functions the lab checks its
measurements against. Notation: alpha per-token acceptance (i.i.d. model), kappa drafts per step,
c = t_draft / t_target (one draft step over one target step), T* the ridge of the step-time curve in
token positions, B the number of concurrent sequences.

    E(alpha, kappa)  = (1 - alpha^(kappa+1)) / (1 - alpha)          mean tokens per verify (bonus included)
    r_i              = alpha^i                                       P(first i drafts all accepted), i.i.d.
    S                = E / (1 + kappa c)                             speedup, memory-bound regime
    S (verify cost v)= E / (v + kappa c)                             v = t(kappa+1 positions) / t(1 position)
    alpha*           : E(alpha*, kappa) = 1 + kappa c                break-even (0.34 for kappa 3, c 0.165)
    cost(T)          = max(1, T / T*)                                roofline step cost, T positions
    S(B)             = E max(1, B/T*) / (max(1, B(kappa+1)/T*) + kappa c max(1, B/T*))
    B_cross          : S(B) = 1, in T*/(kappa+1) <= B <= T*:  B = T* (E - kappa c) / (kappa + 1)
                       (150 for kappa 3, c 0.165, alpha 0.70, T* 295)
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize


def expected_length(alpha: float, kappa: int) -> float:
    """E = (1 - alpha^(kappa+1)) / (1 - alpha); kappa + 1 at alpha = 1."""
    if alpha >= 1.0:
        return float(kappa + 1)
    return float((1.0 - alpha ** (kappa + 1)) / (1.0 - alpha))


def speedup(E: float, kappa: int, c: float, verify_cost: float = 1.0) -> float:
    """S = E / (verify_cost + kappa c); verify_cost 1 is the chapter's memory-bound formula."""
    return float(E / (verify_cost + kappa * c))


def break_even_alpha(kappa: int, c: float, verify_cost: float = 1.0) -> float | None:
    """alpha* solving E(alpha*, kappa) = verify_cost + kappa c; 0.0 when speculation cannot lose
    (cost <= 1), None when it cannot win (cost >= kappa + 1)."""
    cost = verify_cost + kappa * c
    if cost <= 1.0:
        return 0.0
    if cost >= kappa + 1:
        return None
    return float(optimize.brentq(lambda a: expected_length(a, kappa) - cost, 0.0, 1.0 - 1e-15, xtol=1e-12))


def roofline_cost(T, T_star: float):
    """max(1, T / T*), vectorised."""
    return np.maximum(1.0, np.asarray(T, dtype=np.float64) / T_star)


def roofline_speedup(B, E: float, kappa: int, c: float, T_star: float):
    """S(B) under the roofline cost: plain decode puts B positions in a step, verify B(kappa+1), each
    of the kappa draft passes costs c max(1, B/T*)."""
    B = np.asarray(B, dtype=np.float64)
    plain = roofline_cost(B, T_star)
    return E * plain / (roofline_cost(B * (kappa + 1), T_star) + kappa * c * plain)


def roofline_crossing(E: float, kappa: int, c: float, T_star: float) -> float | None:
    """The batch size where S(B) falls to 1; None if S <= 1 already at B -> 0 (speculation never wins).
    S is flat up to T*/(kappa+1), then E / (B(kappa+1)/T* + kappa c) down to T*, then constant
    E / (kappa + 1 + kappa c) < 1, so the crossing is in the middle regime."""
    if E / (1.0 + kappa * c) <= 1.0:
        return None
    return float(T_star * (E - kappa * c) / (kappa + 1))


def fit_knee(T, t) -> dict:
    """Fit t(T) = t1 max(1, T/T*) by least squares on log t (T* on a fine log grid, t1 closed form
    for each T*). Returns {"T_star", "t1", "rms_log_error"}."""
    T = np.asarray(T, dtype=np.float64)
    logt = np.log(np.asarray(t, dtype=np.float64))
    grid = np.exp(np.linspace(math.log(max(0.5, T.min() / 2)), math.log(T.max() * 4), 2000))
    best = None
    for ts in grid:
        shape = np.log(np.maximum(1.0, T / ts))
        logt1 = float(np.mean(logt - shape))
        err = float(np.sqrt(np.mean((logt - logt1 - shape) ** 2)))
        if best is None or err < best[0]:
            best = (err, ts, logt1)
    err, ts, logt1 = best
    return {"T_star": float(ts), "t1": float(math.exp(logt1)), "rms_log_error": err}


def fit_affine(T, t) -> dict:
    """Least-squares t(T) = t0 + s T (relative errors weighted equally: weights 1/t). T_half = t0 / s
    is where a step costs twice a one-position step -- the knee of a machine without a flat part."""
    T = np.asarray(T, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)
    A = np.stack([np.ones_like(T), T], axis=1) / t[:, None]
    (t0, slope), *_ = np.linalg.lstsq(A, np.ones_like(t), rcond=None)
    pred = t0 + slope * T
    err = float(np.sqrt(np.mean(np.log(np.maximum(pred, 1e-12) / t) ** 2)))
    return {"t0": float(t0), "slope": float(slope), "T_half": float(t0 / slope) if slope > 0 else None,
            "rms_log_error": err}


def fitted_alpha(accepted: int, rejections: int) -> float:
    """MLE of the i.i.d. rate from verifies (a geometric censored at kappa): accepted / (accepted +
    verifies that ended in a rejection) -- the engine's SpecMetrics.alpha."""
    n = accepted + rejections
    return accepted / n if n else float("nan")


def crossing_from_curve(B, S) -> float | None:
    """First crossing of 1 by a measured S(B) (B increasing), interpolated in log B; None if S stays
    above 1, 0.0 if it starts below."""
    B = np.asarray(B, dtype=np.float64)
    S = np.asarray(S, dtype=np.float64)
    if S.size == 0:
        return None
    if S[0] < 1.0:
        return 0.0
    for i in range(1, S.size):
        if S[i] < 1.0 <= S[i - 1]:
            f = (S[i - 1] - 1.0) / (S[i - 1] - S[i])
            return float(math.exp(math.log(B[i - 1]) + f * (math.log(B[i]) - math.log(B[i - 1]))))
    return None
