"""A model given by its next-token logits function: the exact law of a *real* model (a tiny Llama that
an engine runs in its own format) computed from the same weights in float64.

`TabulatedModel(vocab_size, logits_fn, name)` has the interface of `reference.toy.ToyModel`
(`logits`, `probs`, `logits_at`, `probs_at`), so every law in `reference.laws` and every engine-level
check works on it unchanged. `logits_fn(prefixes)` takes a list of prefixes (tuples of token ids,
all of one length) and returns float64 logits [len(prefixes), V], the next-token logits after each.
Rows are computed on first use and memoised; `prefetch(prompt, depth)` fills every extension of a
prompt up to `depth` tokens in one call per length (the laws enumerate exactly those).

Worked example (V = 2, prompt (1,), depth 2): prefixes (1,), then (1, 0), (1, 1), then (1, 0, 0),
(1, 0, 1), (1, 1, 0), (1, 1, 1): three calls of logits_fn with 1, 2 and 4 prefixes.

`handle` is whatever the adapter attaches (the folder of the exported model, a loaded pipeline); it
plays no part in the law. `law_key` identifies the model for the checks' law caches.
"""

from __future__ import annotations

import itertools

import numpy as np

from specverify.errors import InputError

from .transforms import Transform, apply


def prefix_of(index: int, vocab: int) -> tuple:
    """The prefix whose `reference.toy.prefix_index` is `index` (the inverse)."""
    index = int(index)
    n, start = 0, 0
    while start + vocab**n <= index:
        start += vocab**n
        n += 1
    rank, out = index - start, []
    for _ in range(n):
        rank, digit = divmod(rank, vocab)
        out.append(digit)
    return tuple(reversed(out))


def _detached(vocab_size: int, name: str, handle) -> "TabulatedModel":
    def no_logits(prefixes):
        raise InputError(f"tabulated model {name!r} crossed a process boundary without its logits; "
                         f"rebuild it from its handle {handle!r}")
    return TabulatedModel(vocab_size, no_logits, name, handle)


class TabulatedModel:
    """A model over `vocab_size` tokens whose logits come from `logits_fn`, memoised per prefix."""

    def __init__(self, vocab_size: int, logits_fn, name: str, handle=None):
        if int(vocab_size) < 2:
            raise InputError(f"tabulated model {name!r}: vocab_size {vocab_size} < 2")
        self.vocab_size = int(vocab_size)
        self.logits_fn = logits_fn
        self.name = str(name)
        self.handle = handle
        self._logits: dict = {}
        self._probs: dict = {}

    def __reduce__(self):
        # crossing a process boundary (an adapter in its worker): the name, vocabulary and handle go,
        # the logits function (a loaded model) and the memo stay; the adapter needs only the handle
        return (_detached, (self.vocab_size, self.name, self.handle))

    @property
    def law_key(self) -> tuple:
        return ("tabulated", self.name, self.vocab_size)

    def __repr__(self) -> str:
        return f"TabulatedModel({self.name!r}, V={self.vocab_size})"

    def _fill(self, prefixes: list) -> None:
        todo = [p for p in dict.fromkeys(prefixes) if p not in self._logits]
        by_len: dict = {}
        for p in todo:
            by_len.setdefault(len(p), []).append(p)
        for group in by_len.values():
            rows = np.asarray(self.logits_fn(group), np.float64)
            if rows.shape != (len(group), self.vocab_size):
                raise InputError(f"tabulated model {self.name!r}: logits_fn returned shape {rows.shape}, "
                                 f"expected {(len(group), self.vocab_size)}")
            if np.isnan(rows).any() or np.isposinf(rows).any():
                raise InputError(f"tabulated model {self.name!r}: logits_fn returned NaN or +inf")
            for p, row in zip(group, rows):
                self._logits[p] = row

    def prefetch(self, prompt, depth: int) -> None:
        """Compute the logits of every extension of `prompt` by 0..depth tokens (one call per length)."""
        prompt = tuple(int(t) for t in prompt)
        for n in range(depth + 1):
            self._fill([prompt + tail for tail in itertools.product(range(self.vocab_size), repeat=n)])

    def logits(self, prefix) -> np.ndarray:
        """Logits [V] (float64) after one prefix."""
        prefix = tuple(int(t) for t in prefix)
        if any(t < 0 or t >= self.vocab_size for t in prefix):
            raise InputError(f"tabulated model {self.name!r}: prefix {prefix} has a token outside [0, {self.vocab_size})")
        if prefix not in self._logits:
            self._fill([prefix])
        return self._logits[prefix]

    def probs(self, prefix, transform: Transform | None = None) -> np.ndarray:
        """The next-token distribution [V] after `prefix` (memoised)."""
        key = (tuple(int(t) for t in prefix), transform)
        row = self._probs.get(key)
        if row is None:
            row = self._probs[key] = apply(self.logits(key[0]), transform)
        return row

    def logits_at(self, index: np.ndarray) -> np.ndarray:
        """Logits [len(index), V] for prefix indices (`reference.toy.prefix_index` order)."""
        prefixes = [prefix_of(i, self.vocab_size) for i in np.asarray(index, np.int64).reshape(-1)]
        self._fill(prefixes)
        return np.stack([self._logits[p] for p in prefixes]) if prefixes else np.zeros((0, self.vocab_size))

    def probs_at(self, index: np.ndarray, transform: Transform | None = None) -> np.ndarray:
        return apply(self.logits_at(index), transform)
