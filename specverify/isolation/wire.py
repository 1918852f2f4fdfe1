"""What crosses between the audit and an adapter: the protocol's method names and parameters, the
adapter's attributes as plain data (`describe`), the arrays found in the arguments (`named_arrays`),
the pickling of arguments with their arrays and callbacks replaced by tokens (`Encoder` / `Decoder`),
results made plain (`portable`), byte comparison of arrays (`same_bytes`) and how failures are told
(`failure` / `raise_failure`)."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import io
import os
import pickle
import sys
import types

import numpy as np

from specverify.adapters.bitwise_level import BitwiseInfo, GreedyResult
from specverify.adapters.protocol import PROTOCOL
from specverify.errors import AdapterError, InputError
from specverify.reference.toy import ToyModel
from specverify.reference.torch_toy import as_torch

from .factories import resolve_ref

# the adapter methods the battery may call (`adapters.protocol.PROTOCOL`): each present one is mirrored
# as a method of the handle
METHODS = tuple(m.name for m in PROTOCOL)
# attributes copied from the adapter when it has them (name, version and capabilities always are)
ATTRIBUTES = ("audit_defaults", "row_dtype", "models", "processors", "draft_schedule", "acceptance_knobs", "verify_rule",
              "draft_sampling", "acceptance_skip", "span_drafter", "serving_model", "serving_features",
              "serving_float64_logprobs", "serving_codec", "serving_skips")
# parameter names of the protocol methods (`adapters.protocol.PROTOCOL`): they name the arrays in last_mutated
PARAMS = {m.name: m.params for m in PROTOCOL}
BITWISE_DATA = (GreedyResult, BitwiseInfo)     # results sent back as themselves (`adapters.bitwise_level`)
WALK_DEPTH = 4              # how deep into the arguments arrays are looked for (batch.target_probs: 1)


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


def callbacks_of(args, kwargs) -> list:
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
            return toy_model, (obj.vocab_size, obj.seed, obj.scale, obj.zero_frac, obj.base, obj.noise)
        if cls.__module__ == as_torch.__module__ and hasattr(obj, "toy"):
            return as_torch, (obj.toy,)
        return NotImplemented


@functools.lru_cache(maxsize=64)
def toy_model(*args) -> ToyModel:
    """The worker's one ToyModel per distinct toy: its memo of computed rows then lives across calls
    (a toy rebuilt for every call recomputed every row it was asked for)."""
    return ToyModel(*args)


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
    """libc's memcmp (faster than numpy's comparison, no temporary), or None where there is none."""
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
    if isinstance(value, BITWISE_DATA):             # the bitwise level's own records: fields made plain
        return dataclasses.replace(value, **{f.name: portable(getattr(value, f.name))
                                             for f in dataclasses.fields(value)})
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
    return "what", f"raised {type(exc).__name__}: {exc}" + install_hint(exc)


def install_hint(exc: BaseException) -> str:
    """The install line to append when `exc` is a missing module that one of specverify's extras
    brings (`specverify.extras`: " (pip install 'specverify[engine]')"), else an empty string."""
    from specverify.extras import EXTRA_OF, install_line

    name = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    return f" ({install_line([name])})" if name and name.split(".")[0] in EXTRA_OF else ""


def raise_failure(kind: str, message: str, what: str):
    if kind == "adapter":
        raise AdapterError(message)
    if kind == "input":
        raise InputError(message)
    raise AdapterError(f"{what}: {message}".splitlines()[0])
