"""Lazy public names for a package's ``__init__`` (PEP 562), the one helper every package uses.

A package whose public names live in modules that are slow to import (torch, BoTorch,
SQLAlchemy) re-exports them lazily, so importing the package stays cheap::

    _EXPORTS = {"Study": "studies.study", "zoo": "rewrite.zoo"}
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

It sits below every package of the project (it imports only the standard library), so the
engine and the framework can both use it without importing each other.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` for its lazy ``exports``.

    Args:
        package: The package's ``__name__``.
        exports: Public name -> the module it comes from: the module's attribute of that name,
            or, when the module is ``f"{package}.{name}"``, that submodule itself.

    Returns:
        ``(__getattr__, __dir__)``. ``__getattr__`` imports the name's module on first access
        and stores the value in the package, so later accesses are plain attribute reads; it
        raises `AttributeError` for a name not in ``exports``. ``__dir__`` lists the package's
        names and the lazy ones.
    """

    def __getattr__(name: str) -> Any:
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(where)
        value = module if where == f"{package}.{name}" else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
