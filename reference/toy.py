"""Seeded toy language models: a table prefix -> distribution over a small vocabulary.

A toy model has no weights. The logits of prefix s (a tuple of token ids) are a fixed function of
(seed, index(s), token), through the splitmix64 hash, so the same model can be rebuilt anywhere from
its parameters, and the exact law of any speculative procedure on it can be computed by enumeration
(`reference.laws`).

    index(s) = (V^len(s) - 1) / (V - 1) + sum_j s_j * V^(len(s)-1-j)   (all strings, by length then
                                                                      lexicographically)
    raw(s, v) = scale * logistic(u(seed, index(s), v))   u uniform in (0, 1) from the hash
    logits(s) = raw(s)                                    for a target model
              = base.raw(s) + noise * raw(s)              for a model derived from `base` (a draft)
    zero mask:  token v gets probability exactly 0 when u'(seed, index(s), v) < zero_frac (the
                highest-logit token of a row is never masked, so a row is never empty)

`probs(prefix, transform)` applies temperature / top-k / top-p (`reference.transforms`) in float64.
"""

from __future__ import annotations

from dataclasses import dataclass, field
import numpy as np

from specverify.errors import InputError

from .transforms import Transform, apply

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser, elementwise on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _uniform(seed: int, stream: int, index: np.ndarray, vocab: int) -> np.ndarray:
    """Uniforms in (0, 1), shape [len(index), vocab], from (seed, stream, prefix index, token)."""
    with np.errstate(over="ignore"):
        key = _splitmix64(np.uint64(seed & 0xFFFFFFFF) * np.uint64(0x100000001B3) + np.uint64(stream))
        h = _splitmix64(index.astype(np.uint64)[:, None] * np.uint64(0x9E3779B97F4A7C15) ^ key)
        h = _splitmix64(h + np.arange(vocab, dtype=np.uint64)[None, :])
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * 2.0**-53


def prefix_index(prefix, vocab: int) -> int:
    """The index of a prefix among all strings over the vocabulary (by length, then lexicographic)."""
    n = len(prefix)
    idx = (vocab**n - 1) // (vocab - 1)
    for t in prefix:
        n -= 1
        idx += int(t) * vocab**n
    return idx


def prefix_indices(tokens: np.ndarray, lengths: np.ndarray, vocab: int) -> np.ndarray:
    """Vectorised `prefix_index`: row r's prefix is tokens[r, :lengths[r]]."""
    tokens = np.asarray(tokens, np.int64)
    lengths = np.asarray(lengths, np.int64)
    n_max = tokens.shape[1] if tokens.ndim == 2 else 0
    idx = (np.power(vocab, lengths) - 1) // (vocab - 1)
    acc = np.zeros(lengths.shape, np.int64)
    for j in range(n_max):
        live = j < lengths
        acc = np.where(live, acc * vocab + tokens[:, j], acc)
    return idx + acc


@dataclass(frozen=True)
class ToyModel:
    """A seeded toy model. `base` + `noise` make a related model (a draft for `base`)."""

    vocab_size: int
    seed: int
    scale: float = 1.5
    zero_frac: float = 0.0
    base: "ToyModel | None" = None
    noise: float = 1.0
    _cache: dict = field(default_factory=dict, compare=False, repr=False, hash=False)

    def __post_init__(self):
        if not 2 <= self.vocab_size <= 4096:
            raise InputError(f"toy model: vocab_size {self.vocab_size} outside [2, 4096]")
        if not 0.0 <= self.zero_frac < 1.0:
            raise InputError(f"toy model: zero_frac {self.zero_frac} outside [0, 1)")
        if self.base is not None and self.base.vocab_size != self.vocab_size:
            raise InputError(f"toy model: vocab size {self.vocab_size} does not match its base's {self.base.vocab_size}")

    def draft(self, seed: int, noise: float = 1.0, zero_frac: float = 0.0) -> "ToyModel":
        """A draft model close to this one: its logits plus `noise` times independent ones."""
        return ToyModel(self.vocab_size, seed, self.scale, zero_frac, base=self, noise=noise)

    def _raw(self, index: np.ndarray) -> np.ndarray:
        u = _uniform(self.seed, 0, index, self.vocab_size)
        return self.scale * np.log(u / (1.0 - u))

    def logits_at(self, index: np.ndarray) -> np.ndarray:
        """Logits [len(index), V] for prefix indices (float64; -inf where the probability is 0)."""
        index = np.asarray(index, np.int64).reshape(-1)
        if self.base is None:
            logits = self._raw(index)
        else:
            logits = self.base._raw(index) + self.noise * self._raw(index)
        if self.zero_frac > 0:
            mask = _uniform(self.seed, 1, index, self.vocab_size) < self.zero_frac
            mask[np.arange(index.size), np.argmax(logits, axis=1)] = False
            logits = np.where(mask, -np.inf, logits)
        return logits

    def logits(self, prefix) -> np.ndarray:
        """Logits [V] of one prefix (a sequence of token ids)."""
        prefix = tuple(int(t) for t in prefix)
        if any(t < 0 or t >= self.vocab_size for t in prefix):
            raise InputError(f"toy model: prefix {prefix} has a token outside [0, {self.vocab_size})")
        return self.logits_at(np.array([prefix_index(prefix, self.vocab_size)]))[0]

    def probs(self, prefix, transform: Transform | None = None) -> np.ndarray:
        """The next-token distribution [V] after `prefix` (memoised)."""
        key = (tuple(int(t) for t in prefix), transform)
        row = self._cache.get(key)
        if row is None:
            row = apply(self.logits(key[0]), transform)
            self._cache[key] = row
        return row

    def probs_at(self, index: np.ndarray, transform: Transform | None = None) -> np.ndarray:
        """Distributions [len(index), V] for prefix indices."""
        return apply(self.logits_at(index), transform)

    def table(self, max_len: int, transform: Transform | None = None) -> np.ndarray:
        """Distributions of every prefix of length <= max_len, rows in `prefix_index` order."""
        n = (self.vocab_size ** (max_len + 1) - 1) // (self.vocab_size - 1)
        if n * self.vocab_size > 2**26:
            raise InputError(f"toy model: a table of {n} prefixes x {self.vocab_size} tokens is too large")
        return self.probs_at(np.arange(n), transform)


@dataclass(frozen=True)
class FixedRows:
    """A history-independent 'model' for one-step problems: the distribution at depth d (number of
    tokens after the root) is rows[d], whatever the tokens were."""

    rows: np.ndarray

    @property
    def vocab_size(self) -> int:
        return int(self.rows.shape[1])

    def probs(self, prefix, transform=None) -> np.ndarray:
        return self.rows[min(len(prefix), self.rows.shape[0] - 1)]
