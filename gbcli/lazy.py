"""A package's attributes resolved on first use (PEP 562): `import gbcli` loads neither torch nor any
solver, and `gbcli.runs.sweep` imports its packages when first named. Imports nothing of gbcli."""

from __future__ import annotations

import importlib
import pkgutil
from typing import Callable


def attach(namespace: dict, names: dict[str, str] | None = None) -> tuple[Callable, Callable]:
    """(`__getattr__`, `__dir__`) for the package whose globals are `namespace`: a submodule is imported
    when first named, and a name in `names` (name -> its module) is read from that module and kept."""
    package, path = namespace["__name__"], namespace["__path__"]
    names = dict(names or {})

    def submodules() -> set[str]:   # the folder's listing: nothing is imported to know them
        return {m.name for m in pkgutil.iter_modules(path)}

    def __getattr__(name: str):
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            namespace[name] = value
            return value
        if not name.startswith("__") and name in submodules():
            return importlib.import_module(f"{package}.{name}")   # the import sets it on the package
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(names) | submodules())

    return __getattr__, __dir__
