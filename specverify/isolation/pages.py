"""Which pages of a private file mapping this process has written to (`WrittenPages`): how the worker
finds the inputs an adapter changed without comparing every array."""

from __future__ import annotations

import ctypes
import mmap
import os

import numpy as np

from .arena import Arena


class _ScanArg(ctypes.Structure):
    """struct pm_scan_arg of the PAGEMAP_SCAN ioctl (linux/fs.h, Linux >= 6.7)."""
    _fields_ = [(name, ctypes.c_uint64) for name in (
        "size", "flags", "start", "end", "walk_end", "vec", "vec_len", "max_pages",
        "category_inverted", "category_mask", "category_anyof_mask", "return_mask")]


class _PageRegion(ctypes.Structure):
    """struct page_region: [start, end) addresses of pages that matched."""
    _fields_ = [("start", ctypes.c_uint64), ("end", ctypes.c_uint64), ("categories", ctypes.c_uint64)]


class WrittenPages:
    """The pages of a private file mapping this process has written to: /proc/self/pagemap marks
    each present page as a file page (bit 61) unless it is the process's own copy -- a written one.
    Asked with the PAGEMAP_SCAN ioctl where the kernel has it (it returns only the matching regions,
    cheaper than reading every entry of a large batch), else by reading the entries."""

    PRESENT, SWAPPED, FILE = 1 << 63, 1 << 62, 1 << 61
    # PAGEMAP_SCAN = _IOWR('f', 16, struct pm_scan_arg) and its page categories
    SCAN = (3 << 30) | (ctypes.sizeof(_ScanArg) << 16) | (ord("f") << 8) | 16
    IS_FILE, IS_PRESENT, IS_SWAPPED = 1 << 2, 1 << 3, 1 << 4
    REGIONS = 256                       # regions one ioctl returns at most (then it goes on from there)

    def __init__(self):
        self.fd = os.open("/proc/self/pagemap", os.O_RDONLY)     # OSError where there is none
        self.ioctl = None                                          # set by probe() where the scan works
        self.vec = (_PageRegion * self.REGIONS)()

    def pages(self, address: int, nbytes: int) -> np.ndarray:
        """Indices (from the page at `address`, page-aligned) of the written pages among those covering
        [address, address + nbytes)."""
        if self.ioctl is not None:
            return self.scanned(address, nbytes)
        return self.read(address, nbytes)

    def read(self, address: int, nbytes: int) -> np.ndarray:
        first = address // mmap.PAGESIZE
        count = -(-(address + nbytes) // mmap.PAGESIZE) - first
        entries = np.frombuffer(os.pread(self.fd, 8 * count, 8 * first), np.uint64)
        live = (entries & np.uint64(self.PRESENT | self.SWAPPED)) != 0
        return np.flatnonzero(live & ((entries & np.uint64(self.FILE)) == 0))

    def scanned(self, address: int, nbytes: int) -> np.ndarray:
        page = mmap.PAGESIZE
        base = address // page * page
        end = -(-(address + nbytes) // page) * page
        out = []
        start = base
        while start < end:
            # pages not of the file (inverted FILE) that are present or swapped: the written ones
            arg = _ScanArg(ctypes.sizeof(_ScanArg), 0, start, end, 0, ctypes.addressof(self.vec), self.REGIONS, 0,
                           self.IS_FILE, self.IS_FILE, self.IS_PRESENT | self.IS_SWAPPED,
                           self.IS_FILE | self.IS_PRESENT | self.IS_SWAPPED)
            n = self.ioctl(self.fd, self.SCAN, ctypes.byref(arg))
            if n < 0:
                raise OSError(ctypes.get_errno(), "PAGEMAP_SCAN failed")
            out += [np.arange((r.start - base) // page, (r.end - base) // page) for r in self.vec[:n]]
            if arg.walk_end <= start:
                break
            start = arg.walk_end
        return np.concatenate(out).astype(np.int64) if out else np.zeros(0, np.int64)

    @classmethod
    def probe(cls) -> "WrittenPages | None":
        """An instance if the pagemap tells written pages apart here (checked on a scratch mapping)."""
        try:
            written = cls()
            arena = Arena(4 * mmap.PAGESIZE, private=True)
            arena.close_fd()
            arena.bytes[: 3 * mmap.PAGESIZE:mmap.PAGESIZE].sum()         # pages 0-2 read, only page 1 written
            arena.bytes[mmap.PAGESIZE + 5] = 1
            ok = written.read(arena.address, arena.size).tolist() == [1] and arena.clean[mmap.PAGESIZE + 5] == 0
            if ok:
                written.ioctl = _scan_ioctl()
                try:
                    if written.ioctl is not None and written.scanned(arena.address, arena.size).tolist() != [1]:
                        written.ioctl = None
                except OSError:                               # an older kernel: EINVAL / ENOTTY
                    written.ioctl = None
            arena.close()
        except (OSError, ValueError, AttributeError):
            return None
        return written if ok else None


def _scan_ioctl():
    """libc's ioctl for PAGEMAP_SCAN, or None where there is none."""
    try:
        ioctl = ctypes.CDLL(None, use_errno=True).ioctl
    except (OSError, AttributeError):
        return None
    ioctl.restype = ctypes.c_int
    ioctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
    return ioctl
