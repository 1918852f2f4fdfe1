"""Shared memory for arrays that cross: an `Arena` is an anonymous memory file mapped here (shared,
or privately in the worker so the adapter's writes stay its own), `arena_layout` / `capacity` place
arrays in one, a `Slot` tells the worker that the adapter kept a view of an input, a `Pin` is the
audit's side of a shared buffer (`AdapterHandle.buffer`)."""

from __future__ import annotations

import ctypes
import mmap
import os
import tempfile
import weakref

import numpy as np

ALIGN = 64                  # bytes: every array starts at a multiple of this in the arena
MIN_ARENA = 1 << 20         # bytes: the smallest arena


class Arena:
    """A shared memory file mapped here: `view(offset, shape, dtype)` is an array over its bytes.
    `private`: the worker's mapping of an argument arena -- what the adapter writes lands in private
    copies of the pages written (`clean` still shows the file, the audit's bytes), so the audit's
    side never changes and a write is found by `WrittenPages` instead of comparing everything."""

    def __init__(self, size: int, fd: int | None = None, private: bool = False):
        self.size = size
        self.fd = fd if fd is not None else memory_file(size)
        if private:
            self.map = mmap.mmap(self.fd, size, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_WRITE)
            self.clean = np.frombuffer(mmap.mmap(self.fd, size, prot=mmap.PROT_READ), np.uint8)
        else:
            self.map = mmap.mmap(self.fd, size)
            self.clean = None
        self.bytes = np.frombuffer(self.map, np.uint8)      # a view that keeps the mapping open
        self.address = self.bytes.__array_interface__["data"][0]

    def view(self, offset: int, shape, dtype) -> np.ndarray:
        return np.ndarray(shape, dtype, buffer=self.map, offset=offset)

    def close_fd(self):
        """Close the file descriptor (the mapping stays): once it has been passed on, or received."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def close(self):
        self.close_fd()
        self.bytes = self.clean = None  # the mapping closes when the last view of it goes
        self.map = None


def memory_file(size: int) -> int:
    """A file descriptor of `size` bytes of shared memory with no name (nothing to leak on a kill)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("specverify-arena", os.MFD_CLOEXEC)
    else:                                                   # elsewhere: an unlinked temporary file
        fd, path = tempfile.mkstemp(prefix="specverify-arena-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


def arena_layout(arrays) -> tuple[list[int], int]:
    """Arena offsets of the arrays and the bytes they need."""
    offsets, end = [], 0
    for _, a in arrays:
        offsets.append(end)
        end += -(-a.nbytes // ALIGN) * ALIGN
    return offsets, end


def capacity(size: int) -> int:
    """The size of an arena for `size` bytes: a power of two, at least MIN_ARENA."""
    return max(MIN_ARENA, 1 << (max(size, 1) - 1).bit_length())


class Slot:
    """One argument array as the adapter sees it (numpy reads `__array_interface__`): every array
    derived from it keeps this object alive, which tells the worker that the adapter kept an input."""

    def __init__(self, array: np.ndarray):
        self.array = array
        self.__array_interface__ = array.__array_interface__


class Pin:
    """The audit's side of one shared buffer: its memory (held weakly: the audit's arrays over it keep
    it alive, and its end tells the worker), where it is mapped here and its size."""

    def __init__(self, pid: int, memory: mmap.mmap, size: int):
        self.pid, self.size = pid, size
        self.memory = weakref.ref(memory)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(memory))

    def alive(self) -> bool:
        return self.memory() is not None
