"""Load a user's adapter: `pkg.module:factory` or `path/to/file.py:factory`.

The factory is called with no arguments (once per fresh adapter the audit needs) and must return an adapter (`adapters.protocol`). Every
way this can go wrong -- no such module or file, no such attribute, the factory raising, an object
without `name`/`capabilities` -- is an AdapterError with one line naming it (exit 2 in the CLI).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys

from specverify.errors import AdapterError

from .protocol import CAPABILITIES


def load(spec: str):
    """The adapter a plug-in's factory returns (checked: name and capabilities)."""
    return load_factory(spec)()


def import_attr(spec: str, what: str = "plug-in"):
    """The callable `attr` of `pkg.module:attr` or `path/to/file.py:attr` (one-line AdapterErrors naming
    `what` and the spec for every way this can fail)."""
    target, _, attr = spec.rpartition(":")
    if not target or not attr:
        raise AdapterError(f"{what} {spec!r}: expected pkg.module:factory or path/to/file.py:factory")
    if target.endswith(".py") or os.sep in target:
        if not os.path.isfile(target):
            raise AdapterError(f"{what} {spec!r}: no such file {target!r}")
        name = f"specverify_plugin_{abs(hash(os.path.abspath(target)))}"
        try:
            module_spec = importlib.util.spec_from_file_location(name, target)
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[name] = module
            module_spec.loader.exec_module(module)
        except Exception as exc:  # noqa: BLE001 - the user's file may raise anything
            raise AdapterError(f"{what} {spec!r}: importing {target} raised {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as exc:
            raise AdapterError(f"{what} {spec!r}: no module named {exc.name!r}") from exc
        except Exception as exc:  # noqa: BLE001
            raise AdapterError(f"{what} {spec!r}: importing {target} raised {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    factory = getattr(module, attr, None)
    if factory is None:
        raise AdapterError(f"{what} {spec!r}: {target} has no attribute {attr!r}")
    if not callable(factory):
        raise AdapterError(f"{what} {spec!r}: {attr} is not callable")
    return factory


def load_factory(spec: str):
    """The plug-in's factory, wrapped so that every call returns a checked adapter."""
    factory = import_attr(spec)
    attr = spec.rpartition(":")[2]
    return lambda: instantiate(factory, spec, attr)


def instantiate(factory, spec: str, attr: str):
    """Call a plug-in factory and check what it returns (one-line AdapterErrors)."""
    try:
        adapter = factory()
    except Exception as exc:  # noqa: BLE001
        raise AdapterError(f"plug-in {spec!r}: {attr}() raised {type(exc).__name__}: {exc}".splitlines()[0]) from exc
    caps = getattr(adapter, "capabilities", None)
    if not caps:
        raise AdapterError(f"plug-in {spec!r}: the adapter has no capabilities (one or more of {', '.join(CAPABILITIES)})")
    if not getattr(adapter, "name", None):
        try:
            adapter.name = spec
        except AttributeError:
            raise AdapterError(f"plug-in {spec!r}: the adapter has no name") from None
    return adapter
