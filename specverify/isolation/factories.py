"""How a factory reaches another process: `factory_ref(spec)` names it as plain data (an engine name,
a module and qualified name, or a pickle) and `resolve_ref(ref)` turns that back into the callable
there (an adapter worker, or a rank process of `specverify.ranks`)."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import pickle
import sys

from specverify.errors import AdapterError


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


def label(spec) -> str:
    """How error messages name what was given: an engine name, a factory's qualified name, an adapter's name."""
    if isinstance(spec, str):
        return spec
    return getattr(spec, "__qualname__", None) or getattr(spec, "name", None) or type(spec).__name__
