"""Package names loaded on first use, so that importing a package imports no JAX.

``jaxdyn``, ``jaxdyn.runs`` and ``jaxdyn.sweep`` list each public name's private home module;
:func:`lazy_attributes` gives the package its module ``__getattr__`` and ``__dir__`` (PEP 562).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping


def lazy_attributes(
    namespace: dict, homes: Mapping[str, str]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the package whose globals are ``namespace``: a name in
    ``homes`` is imported from its module (relative to the package) on first use and cached in
    the package's globals; any other name raises ``AttributeError``."""
    package = namespace["__name__"]

    def __getattr__(name: str):
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home, package), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return __getattr__, __dir__
