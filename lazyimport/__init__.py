"""Lazy public names for a package's ``__init__`` (PEP 562), the one helper every package uses.

A package whose public names live in modules that are slow to import (torch, BoTorch,
SQLAlchemy) re-exports them lazily, so importing the package stays cheap::

    _EXPORTS = {"Study": "studies.study", "Storage": "studies.storage"}
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

(``lazy_exports(__name__, {}, submodules=("zoo",))`` makes ``package.zoo`` import the submodule
on first access.)

It sits below every package of the project (it imports only the standard library), so the
engine and the framework can both use it without importing each other.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Collection, Mapping
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, exports: Mapping[str, str], submodules: Collection[str] = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package`` for its lazy ``exports``.

    Args:
        package: The package's ``__name__``.
        exports: Public name -> the module that defines it (the export is that module's
            attribute of the same name).
        submodules: Names of submodules of ``package`` that load on first access.

    Returns:
        ``(__getattr__, __dir__)``. ``__getattr__`` imports the name's module on first access
        and stores the value in the package, so later accesses are plain attribute reads; it
        raises `AttributeError` for a name not in ``exports``. ``__dir__`` lists the package's
        names and the lazy ones.
    """

    def __getattr__(name: str) -> Any:
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")  # the import binds it
        where = exports.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(exports) | set(submodules))

    return __getattr__, __dir__
