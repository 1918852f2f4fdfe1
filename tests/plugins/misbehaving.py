"""Adapters that misbehave in one way each, for tests/test_isolation.py (factories named after the way)."""

import ctypes
import os
import sys

import numpy as np

from specverify.errors import AdapterError


class Base:
    name = "misbehaving"
    version = 2                      # not a str: the handle coerces it
    capabilities = {"chain"}

    def verify(self, batch, coins):
        from specverify.reference.chain import verify_batch
        return verify_batch(batch, coins)


class GilHog(Base):
    def verify(self, batch, coins):
        while True:                  # pure Python: holds the GIL between switch intervals, ignores signals
            pass


class GilHolder(Base):
    def verify(self, batch, coins):
        return sum(range(10**15))    # one C call that never releases the GIL: no Python thread runs meanwhile


class Exits(Base):
    def verify(self, batch, coins):
        print("about to exit")
        os._exit(3)


class Segfault(Base):
    def verify(self, batch, coins):
        ctypes.string_at(0)


class Chatty(Base):
    def __init__(self):
        print("chatty: built")

    def verify(self, batch, coins):
        print("chatty: python stdout")
        os.write(1, b"chatty: fd 1\n")
        os.write(2, b"chatty: fd 2\n")
        return super().verify(batch, coins)

    def die(self):
        print("chatty: last words")
        os._exit(1)


class Mutating(Base):
    def verify(self, batch, coins):
        out = super().verify(batch, coins)
        batch.target_probs[:] = 0.0            # after answering: the audit must not judge with these
        return out


class Retaining(Base):
    """Keeps the last batch and checks, at the next call, that it has not changed under it."""

    def __init__(self):
        self.kept = self.copy = None

    def verify(self, batch, coins):
        if self.kept is not None and not np.array_equal(self.kept.target_probs, self.copy):
            raise RuntimeError("a kept input changed between calls")
        self.kept, self.copy = batch, batch.target_probs.copy()
        return super().verify(batch, coins)


class Counter(Base):
    audit_defaults = {"samples": 1000}
    row_dtype = "float32"
    models = "toy"

    def __init__(self):
        self.calls = 0

    def count(self):
        self.calls += 1
        return self.calls


class Raises(Base):
    def verify(self, batch, coins):
        raise ValueError("bad rows\nsecond line")

    def verify_block(self, batch, coins):
        raise AdapterError("misbehaving: my own message")


class Progress(Base):
    capabilities = {"chain", "bitwise"}

    def bitwise_info(self):
        return None

    def decode_greedy(self, backend, *, progress=None):
        for step in range(3):
            progress(f"{backend} step {step}")
        return "label", None, {"steps": 3}


def gil_hog():
    return GilHog()


def gil_holder():
    return GilHolder()


def exits():
    return Exits()


def segfault():
    return Segfault()


def chatty():
    return Chatty()


def mutating():
    return Mutating()


def retaining():
    return Retaining()


def counter():
    return Counter()


def raises():
    return Raises()


def progress():
    return Progress()


def broken_factory():
    sys.stdout.write("factory output\n")
    raise KeyError("no such model")
