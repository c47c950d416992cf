"""Array backend selection for the verifier: one code path over numpy or cupy.

The verifier evaluates graphs through an array namespace ``xp``. `get_backend()` picks it once
per process:

* ``REWRITE_BACKEND=numpy`` forces numpy;
* ``REWRITE_BACKEND=cupy`` forces cupy and fails with `BackendError` when cupy is missing or no
  CUDA device works;
* unset (or ``auto``): cupy when ``cupy.is_available()`` is true *and* a one-time probe (a small
  float64 matrix product checked against numpy) succeeds, numpy otherwise.

The choice is cached; `get_backend(name)` with an explicit name bypasses the environment
(tests use it to parametrize over both backends).
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from rewrite.errors import BackendError

__all__ = ["BACKENDS", "Backend", "cupy_works", "get_backend"]

_log = logging.getLogger(__name__)

#: Backend names accepted by `get_backend` and ``REWRITE_BACKEND``.
BACKENDS = ("numpy", "cupy")


@dataclass(frozen=True)
class Backend:
    """An array namespace plus the two conversions the verifier needs.

    Attributes:
        name: ``"numpy"`` or ``"cupy"``.
        xp: The array module.
    """

    name: str
    xp: Any

    def asnumpy(self, a: Any) -> np.ndarray:
        """``a`` as a host numpy array."""
        return a.get() if self.name == "cupy" else np.asarray(a)

    def asarray(self, a: Any) -> Any:
        """``a`` as an array of this backend."""
        return self.xp.asarray(a)


@functools.cache
def cupy_works() -> bool:
    """Whether cupy imports, sees a CUDA device, and a one-time probe computes correctly."""
    try:
        import cupy  # type: ignore[import-not-found]
    except ImportError:
        return False
    try:
        if not cupy.is_available():
            return False
        a = np.arange(12, dtype=np.float64).reshape(3, 4)
        got = (cupy.asarray(a) @ cupy.asarray(a.T)).get()
        return bool(np.array_equal(got, a @ a.T))
    except Exception as exc:  # any CUDA driver/runtime failure means "no device"
        _log.info("cupy probe failed, using numpy: %s", exc)
        return False


@functools.cache
def _make(name: str) -> Backend:
    if name == "numpy":
        return Backend("numpy", np)
    if name == "cupy":
        try:
            import cupy  # type: ignore[import-not-found]
        except ImportError:
            raise BackendError(
                "the cupy backend was requested but cupy is not installed; install the `gpu` "
                "extra (pip install 'rewrite-tuner[gpu]') or set REWRITE_BACKEND=numpy."
            ) from None
        if not cupy_works():
            raise BackendError(
                "the cupy backend was requested but no working CUDA device was found "
                "(cupy.is_available() is false or the probe failed); unset REWRITE_BACKEND or "
                "set REWRITE_BACKEND=numpy."
            )
        return Backend("cupy", cupy)
    raise BackendError(f"backend must be one of {BACKENDS} or 'auto', but got {name!r}.")


def get_backend(name: str | None = None) -> Backend:
    """The array backend to evaluate with.

    Args:
        name: ``"numpy"``, ``"cupy"`` or ``"auto"``; None reads ``REWRITE_BACKEND`` (default
            ``auto``).

    Returns:
        The `Backend`.

    Raises:
        BackendError: When cupy is forced but unusable, or the name is unknown.
    """
    if name is None:
        name = os.environ.get("REWRITE_BACKEND", "auto").strip().lower() or "auto"
    if name == "auto":
        return _make("cupy") if cupy_works() else _make("numpy")
    return _make(name)
