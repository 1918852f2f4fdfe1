"""What crosses between the audit and an adapter's worker (`specverify.isolation`): the arrays of a
call's arguments, named and swapped for tokens in the pickle; the shared arenas they travel through and
the worker's way to find the ones an adapter wrote to; results as plain data; the factory, by reference.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import importlib
import importlib.util
import inspect
import io
import mmap
import os
import pickle
import sys
import tempfile
import types

import numpy as np

from specverify.adapters.torchtoy import as_torch
from specverify.errors import AdapterError, InputError
from specverify.reference.toy import ToyModel

# the adapter methods the battery may call: each present one is mirrored as a method of the handle
METHODS = ("verify", "verify_block", "verify_trees", "verify_tree", "verify_seeded", "generate", "bitwise")
# attributes copied from the adapter when it has them (name, version and capabilities always are)
ATTRIBUTES = ("audit_defaults", "row_dtype", "models")
WALK_DEPTH = 4              # how deep into the arguments arrays are looked for (batch.target_probs: 1)
ALIGN = 64                  # bytes: every array starts at a multiple of this in an arena
MIN_ARENA = 1 << 20         # bytes: the smallest arena


def named_arrays(names, args, kwargs) -> list[tuple[str, np.ndarray]]:
    """(name, array) of every plain numpy array reachable from the arguments through dataclass fields,
    public attributes, tuples, lists and dicts, each array once, named by its first path."""
    found: dict[int, tuple[str, np.ndarray]] = {}
    seen: set[int] = set()

    def walk(obj, path, depth):
        if type(obj) is np.ndarray:
            if not obj.dtype.hasobject:
                found.setdefault(id(obj), (path, obj))
            return
        if depth >= WALK_DEPTH or id(obj) in seen or isinstance(obj, (str, bytes, int, float, type, types.ModuleType)):
            return
        seen.add(id(obj))
        if isinstance(obj, (tuple, list)):
            for i, v in enumerate(obj):
                walk(v, f"{path}[{i}]", depth + 1)
        elif isinstance(obj, dict):
            for k, v in obj.items():
                walk(v, f"{path}[{k!r}]", depth + 1)
        elif dataclasses.is_dataclass(obj):
            for f in dataclasses.fields(obj):
                if not f.name.startswith("_"):
                    walk(getattr(obj, f.name, None), f"{path}.{f.name}", depth + 1)
        elif hasattr(obj, "__dict__") and not callable(obj):
            for k, v in vars(obj).items():
                if not k.startswith("_"):
                    walk(v, f"{path}.{k}", depth + 1)

    for i, arg in enumerate(args):
        walk(arg, names[i] if i < len(names) else f"args[{i}]", 0)
    for key, arg in kwargs.items():
        walk(arg, key, 0)
    return list(found.values())


def callables_in(args, kwargs) -> list:
    """The callable arguments (functions, bound methods, partials): they stay on the audit's side."""
    kinds = (types.FunctionType, types.MethodType, types.BuiltinFunctionType, functools.partial)
    return [v for v in (*args, *kwargs.values()) if isinstance(v, kinds)]


class Encoder(pickle.Pickler):
    """Pickles the arguments with the named arrays and callbacks replaced by tokens ("a", i) / ("c", j),
    toy models without their memo and torch toy models as their toy model; for the worker
    (`worker`), functions and classes of the audit's main script as its file and qualified name."""

    def __init__(self, file, arrays, callbacks, worker: bool):
        super().__init__(file, pickle.HIGHEST_PROTOCOL)
        self.worker = worker
        self.tokens = {id(a): ("a", i) for i, (_, a) in enumerate(arrays)}
        self.tokens.update({id(f): ("c", j) for j, f in enumerate(callbacks)})

    def persistent_id(self, obj):
        return self.tokens.get(id(obj))

    def reducer_override(self, obj):
        cls = type(obj)
        if self.worker and isinstance(obj, (types.FunctionType, type)) and obj.__module__ == "__main__" \
                and "<" not in obj.__qualname__:
            main = getattr(sys.modules["__main__"], "__file__", None)
            if main:
                return resolve_ref, (("ref", "__main__", obj.__qualname__, os.path.abspath(main)),)
        if cls is ToyModel:
            return ToyModel, (obj.vocab_size, obj.seed, obj.scale, obj.zero_frac, obj.base, obj.noise)
        if cls.__module__ == as_torch.__module__ and hasattr(obj, "toy"):
            return as_torch, (obj.toy,)
        return NotImplemented


def encode(obj, arrays, callbacks, worker: bool) -> bytes:
    buf = io.BytesIO()
    Encoder(buf, arrays, callbacks, worker).dump(obj)
    return buf.getvalue()


class Decoder(pickle.Unpickler):
    """Unpickles what `Encoder` wrote, tokens resolved to `arrays[i]` and `callback(j, ...)`."""

    def __init__(self, data: bytes, arrays, callback):
        super().__init__(io.BytesIO(data))
        self.arrays, self.callback = arrays, callback

    def persistent_load(self, token):
        kind, i = token
        return self.arrays[i] if kind == "a" else functools.partial(self.callback, i)


def _libc_memcmp():
    """libc's memcmp (2-3x faster than numpy's comparison, no temporary), or None where there is none."""
    try:
        memcmp = ctypes.CDLL(None).memcmp
    except (OSError, AttributeError):
        return None
    memcmp.restype = ctypes.c_int
    memcmp.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t]
    return memcmp


_MEMCMP = _libc_memcmp()


def same_bytes(x: np.ndarray, y: np.ndarray) -> bool:
    """Whether two arrays of one shape and dtype hold the same bytes (-0.0 differs from 0.0; NaN is NaN)."""
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    if x.nbytes == 0:
        return True
    if _MEMCMP is not None:
        return _MEMCMP(x.__array_interface__["data"][0], y.__array_interface__["data"][0], x.nbytes) == 0
    return bool(np.array_equal(x.reshape(-1).view(np.uint8), y.reshape(-1).view(np.uint8)))


def portable(value):
    """A result as plain data the audit can unpickle without the adapter's modules: tensors and other
    array-likes as arrays, an object with `tokens` (an engine's generate result) as a namespace."""
    if isinstance(value, (np.ndarray, np.generic, str, bytes, int, float, bool, type(None))):
        return value
    if isinstance(value, list):
        return [portable(v) for v in value]
    if isinstance(value, tuple):                     # a named tuple as a plain one
        return tuple(portable(v) for v in value)
    if isinstance(value, dict):
        return {k: portable(v) for k, v in value.items()}
    if hasattr(value, "tokens"):
        keep = ("tokens", "num_steps", "num_drafted", "num_accepted")
        return types.SimpleNamespace(**{k: portable(getattr(value, k)) for k in keep if hasattr(value, k)})
    if hasattr(value, "__array__"):
        try:
            return np.asarray(value)
        except Exception:  # noqa: BLE001 - e.g. a tensor on a device: sent as it is
            return value
    return value


def describe(adapter) -> dict:
    """The adapter's attributes the battery reads, as plain data (the same in both modes)."""
    name = getattr(adapter, "name", None)
    version = getattr(adapter, "version", None)
    attributes = {}
    for key in ATTRIBUTES:
        if hasattr(adapter, key):
            value = getattr(adapter, key)
            try:
                pickle.dumps(value)
            except Exception:  # noqa: BLE001 - an attribute that cannot cross is sent as text
                value = str(value)
            attributes[key] = value
    return {
        "name": None if name is None else str(name),
        "version": None if version is None else str(version),
        "capabilities": sorted(str(c) for c in (getattr(adapter, "capabilities", None) or ())),
        "methods": [m for m in METHODS if hasattr(adapter, m)],
        "attributes": attributes,
    }


def failure(exc: BaseException) -> tuple[str, str]:
    """(kind, message) of an exception raised building or calling the adapter: "adapter" (its own
    AdapterError message), "input" (an InputError naming a bad engine), "what" (prefixed with the
    call's what by the audit)."""
    if isinstance(exc, AdapterError):
        return "adapter", str(exc)
    return "what", f"raised {type(exc).__name__}: {exc}"


def raise_failure(kind: str, message: str, what: str):
    if kind == "adapter":
        raise AdapterError(message)
    if kind == "input":
        raise InputError(message)
    raise AdapterError(f"{what}: {message}".splitlines()[0])


def label(spec) -> str:
    """How an engine spec is named in messages: the name, or the factory's qualified name."""
    if isinstance(spec, str):
        return spec
    return getattr(spec, "__qualname__", None) or getattr(spec, "name", None) or type(spec).__name__


def factory_ref(spec):
    """How the worker gets the factory: ("name", spec), ("ref", module, qualname, file) for a
    module-level function or class, ("pickle", bytes) for other picklable callables."""
    if isinstance(spec, str):
        return ("name", spec)
    hint = ('pass it as "pkg.module:factory" or "path/to/file.py:factory", or audit it in-process '
            "(isolated=False)")
    if not callable(spec) or hasattr(spec, "capabilities") and not inspect.isclass(spec):
        raise AdapterError(f"{label(spec)}: an adapter instance cannot be moved to an adapter process; {hint}")
    module, qualname = getattr(spec, "__module__", None), getattr(spec, "__qualname__", "")
    if inspect.isfunction(spec) or inspect.isclass(spec):
        if not module or "<" in qualname:
            raise AdapterError(f"factory {qualname or spec!r}: a local function, lambda or class cannot be "
                               f"imported by the adapter process; {hint}")
        file = getattr(sys.modules.get(module), "__file__", None)
        file = file and os.path.abspath(file)
        if module == "__main__" and not file:
            raise AdapterError(f"factory {qualname}: defined in an interactive __main__; {hint}")
        return ("ref", module, qualname, file)
    try:
        return ("pickle", pickle.dumps(spec))
    except Exception as exc:  # noqa: BLE001
        raise AdapterError(f"factory {label(spec)}: cannot be sent to the adapter process "
                           f"({type(exc).__name__}: {exc}); {hint}".splitlines()[0]) from exc


def resolve_ref(ref):
    """The callable a `factory_ref` names, in the worker: the factory, or a script's function run()
    is given (`Encoder`)."""
    kind = ref[0]
    if kind == "name":
        from specverify.adapters.registry import factory
        return factory(ref[1])
    if kind == "pickle":
        return pickle.loads(ref[1])
    _, module, qualname, file = ref
    mod = None
    if module != "__main__":
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name != module or not file:
                raise
    if mod is None:
        name = "__mp_main__" if module == "__main__" else module   # a script's main guard stays off
        mod = sys.modules.get(name)
        if getattr(mod, "__file__", None) != file:                # executed once per worker
            spec = importlib.util.spec_from_file_location(name, file)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
    obj = mod
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj



class Arena:
    """A shared memory file mapped here: `view(offset, shape, dtype)` is an array over its bytes.
    `private`: the worker's mapping of an argument arena -- what the adapter writes lands in private
    copies of the pages written (`clean` still shows the file, the audit's bytes), so the audit's
    side never changes and a write is found by `WrittenPages` instead of comparing everything."""

    def __init__(self, size: int, fd: int | None = None, private: bool = False):
        self.size = size
        self.fd = fd if fd is not None else _memory_file(size)
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


class WrittenPages:
    """The pages of a private file mapping this process has written to: /proc/self/pagemap marks
    each present page as a file page (bit 61) unless it is the process's own copy -- a written one."""

    PRESENT, SWAPPED, FILE = 1 << 63, 1 << 62, 1 << 61

    def __init__(self):
        self.fd = os.open("/proc/self/pagemap", os.O_RDONLY)     # OSError where there is none

    def pages(self, address: int, nbytes: int) -> np.ndarray:
        """Indices (from the page at `address`, page-aligned) of the written pages among those covering
        [address, address + nbytes)."""
        first = address // mmap.PAGESIZE
        count = -(-(address + nbytes) // mmap.PAGESIZE) - first
        entries = np.frombuffer(os.pread(self.fd, 8 * count, 8 * first), np.uint64)
        live = (entries & np.uint64(self.PRESENT | self.SWAPPED)) != 0
        return np.flatnonzero(live & ((entries & np.uint64(self.FILE)) == 0))

    @classmethod
    def probe(cls) -> "WrittenPages | None":
        """An instance if the pagemap tells written pages apart here (checked on a scratch mapping)."""
        try:
            written = cls()
            arena = Arena(4 * mmap.PAGESIZE, private=True)
            arena.close_fd()
            arena.bytes[: 3 * mmap.PAGESIZE:mmap.PAGESIZE].sum()         # pages 0-2 read, only page 1 written
            arena.bytes[mmap.PAGESIZE + 5] = 1
            ok = written.pages(arena.address, arena.size).tolist() == [1] and arena.clean[mmap.PAGESIZE + 5] == 0
            arena.close()
        except (OSError, ValueError, AttributeError):
            return None
        return written if ok else None


def _memory_file(size: int) -> int:
    """A file descriptor of `size` bytes of shared memory with no name (nothing to leak on a kill)."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("specverify-arena", os.MFD_CLOEXEC)
    else:                                                   # elsewhere: an unlinked temporary file
        fd, path = tempfile.mkstemp(prefix="specverify-arena-")
        os.unlink(path)
    os.ftruncate(fd, size)
    return fd


def layout_of(arrays) -> tuple[list[int], int]:
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
