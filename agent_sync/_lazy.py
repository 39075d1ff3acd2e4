"""Lazy package attributes, so importing a package does not load every provider SDK."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_getattr"]


def lazy_getattr(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` that imports ``name`` from ``modules[name]`` on first use.

    Args:
        package: The package's ``__name__`` (relative module names resolve against it).
        modules: Attribute name -> module that defines it, e.g. ``{"X": ".x"}``.
    """

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__
