"""Input validation for the reference: every public function checks its arguments here.

A distribution row must be finite, non-negative and sum to 1 within `SUM_ATOL` (absolute). Rows are
converted to float64 and otherwise kept exactly as given (no renormalisation), so that the tokens the
reference emits can be compared bit for bit with an implementation fed the same rows and coins.
Every failure raises `InputError` with a one-line message naming the argument, the row and the
problem.
"""

from __future__ import annotations

import numpy as np

from specverify.errors import InputError

SUM_ATOL = 1e-6
"""A probability row must satisfy |sum - 1| <= SUM_ATOL (float32 softmax rows sum within ~1e-7)."""


def prob_rows(x, name: str, vocab_size: int | None = None, n_rows: int | None = None) -> np.ndarray:
    """Return `x` as a C-contiguous float64 array of shape [rows, V], or raise InputError."""
    try:
        a = np.asarray(x, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: not a numeric array ({exc})") from None
    if a.ndim == 1:
        a = a[None, :]
    if a.ndim != 2:
        raise InputError(f"{name}: expected a [rows, vocab] array, got shape {a.shape}")
    if a.shape[1] == 0:
        raise InputError(f"{name}: empty vocabulary")
    if vocab_size is not None and a.shape[1] != vocab_size:
        raise InputError(f"{name}: vocab size {a.shape[1]} does not match {vocab_size}")
    if n_rows is not None and a.shape[0] != n_rows:
        raise InputError(f"{name}: expected {n_rows} rows, got {a.shape[0]}")
    finite = np.isfinite(a)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise InputError(f"{name}: row {r} has a non-finite entry ({float(a[r, c])}) at token {c}")
    if (a < 0).any():
        r, c = np.argwhere(a < 0)[0]
        raise InputError(f"{name}: row {r} has a negative probability {float(a[r, c])!r} at token {c}")
    sums = a.sum(axis=1)
    off = np.abs(sums - 1.0) > SUM_ATOL
    if off.any():
        r = int(np.argmax(off))
        raise InputError(f"{name}: row {r} sums to {float(sums[r])!r}, not 1 (tolerance {SUM_ATOL:g})")
    return np.ascontiguousarray(a)


def token_ids(x, name: str, vocab_size: int, allow_padding: bool = False) -> np.ndarray:
    """Return `x` as an int64 array of token ids in [0, V) (or -1 where padding is allowed)."""
    a = np.asarray(x)
    if a.size and not np.issubdtype(a.dtype, np.integer):
        if not np.all(np.isfinite(a)) or not np.all(a == np.round(a)):
            raise InputError(f"{name}: token ids must be integers")
    if a.size and np.issubdtype(a.dtype, np.unsignedinteger) and a.max() > np.iinfo(np.int64).max:
        raise InputError(f"{name}: token id {int(a.max())} does not fit int64")
    a = a.astype(np.int64)
    low = -1 if allow_padding else 0
    bad = (a < low) | (a >= vocab_size)
    if bad.any():
        i = int(np.flatnonzero(bad.ravel())[0])
        what = "[-1, V)" if allow_padding else "[0, V)"
        raise InputError(f"{name}: token id {int(a.ravel()[i])} at index {i} is outside {what} with V={vocab_size}")
    return a


def counts(x, name: str) -> np.ndarray:
    """Return `x` as a non-empty 1-D int64 array of counts >= 0; the dtype must be an integer type
    (a count of 1.5 or NaN is an error, not a silent 1)."""
    a = np.asarray(x)
    if a.ndim != 1 or a.size == 0:
        raise InputError(f"{name}: expected a non-empty 1-D array of per-request counts")
    if not np.issubdtype(a.dtype, np.integer):
        raise InputError(f"{name}: counts must have an integer dtype, got {a.dtype} ({a[:3].tolist()} ...)")
    if (a < 0).any():
        raise InputError(f"{name}: negative count {int(a.min())}")
    if np.issubdtype(a.dtype, np.unsignedinteger) and a.max() > np.iinfo(np.int64).max:
        raise InputError(f"{name}: count {int(a.max())} does not fit int64")
    return a.astype(np.int64)


def coins(x, name: str, n: int | None = None) -> np.ndarray:
    """Return `x` as 1-D float64 coins (of length n, if given); each must lie in [0, 1] (1.0 is out
    of contract but accepted, so that tests can inject it on purpose)."""
    try:
        a = np.asarray(x, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError) as exc:
        raise InputError(f"{name}: not an array of numbers ({exc})") from None
    if n is not None and a.shape[0] != n:
        raise InputError(f"{name}: expected {n} coins, got {a.shape[0]}")
    if not np.all(np.isfinite(a)) or (a < 0).any() or (a > 1).any():
        i = int(np.flatnonzero(~(np.isfinite(a) & (a >= 0) & (a <= 1)))[0])
        raise InputError(f"{name}: coin {float(a[i])!r} at index {i} is outside [0, 1]")
    return a


def usable_rows(batch) -> None:
    """Raise InputError unless every target and draft row of a verify batch sums to a finite positive
    number: rows with NaN, +-inf or nothing but zeros (what a broken model produces) have no law to
    sample, and the compiled kernels would return an id of V for an all-zero row. One pass of row sums,
    cheaper than `prob_rows` (rows the harness built are not re-validated)."""
    for name in ("target_probs", "draft_probs"):
        rows = getattr(batch, name, None)
        if rows is None or not rows.size:
            continue
        sums = rows.sum(axis=1)
        bad = ~(np.isfinite(sums) & (sums > 0))
        if bad.any():
            r = int(np.argmax(bad))
            raise InputError(f"{name}: row {r} sums to {float(sums[r])!r}: not a distribution "
                             f"(NaN, +-inf or all-zero rows are refused)")
