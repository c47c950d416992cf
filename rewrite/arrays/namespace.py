"""A ``jax.numpy``-compatible namespace over PyTorch: array programs run as they are written.

`jnp` holds the ``jax.numpy`` functions array programs such as STENSO's use (element-wise math,
reductions with ``axis`` and ``keepdims``, ``dot``/``matmul``/``einsum``, ``diag``/``diagonal``/
``trace``, ``stack``/``concatenate``, ``reshape``/``transpose``, array constructors) with
``jax.numpy``'s semantics, computed by the PyTorch function of the same meaning: a program
importing ``jax.numpy as jnp`` runs unchanged on ``torch.Tensor`` inputs, eagerly, under
``torch.export`` (what `rewrite.arrays.import_program` traces) and under ``torch.compile``.

Arrays are ``torch.Tensor``s, so their methods and operators are PyTorch's (``A.T``, ``A @ B``,
``A.sum(axis=0)`` and ``A.reshape(...)`` behave as in numpy; JAX's functional updates ``A.at[i]``
do not exist on tensors). A ``jnp`` name this namespace does not hold raises `ArrayProgramError`
naming it and listing the names it has: the construct is said plainly, never guessed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rewrite.errors import ArrayProgramError

__all__ = ["SUPPORTED", "jnp"]


def _torch() -> Any:
    import torch

    return torch


def _dims(x: Any, axis: Any) -> tuple[int, ...]:
    """The reduced dims of ``axis`` (None: all of them)."""
    if axis is None:
        return tuple(range(x.ndim))
    return tuple(axis) if isinstance(axis, list | tuple) else (int(axis),)


def _reduce(fn: str) -> Any:
    def reduce(a: Any, axis: Any = None, keepdims: bool = False) -> Any:
        torch = _torch()
        a = _array(a)
        return getattr(torch, fn)(a, dim=_dims(a, axis), keepdim=bool(keepdims))

    reduce.__name__ = fn
    return reduce


def _array(x: Any, dtype: Any = None) -> Any:
    """``x`` as a tensor (a Python number or list becomes a float32/int64 constant)."""
    torch = _torch()
    if isinstance(x, torch.Tensor):
        return x if dtype is None else x.to(dtype)
    if dtype is None and isinstance(x, float | list | tuple):
        dtype = torch.float32 if not _all_ints(x) else None
    return torch.as_tensor(x, dtype=dtype)


def _all_ints(x: Any) -> bool:
    if isinstance(x, list | tuple):
        return all(_all_ints(v) for v in x)
    return isinstance(x, int)


def _pair(a: Any, b: Any) -> tuple[Any, Any]:
    """Two operands of a binary function, Python numbers taking the other's dtype."""
    torch = _torch()
    if not isinstance(a, torch.Tensor):
        a = torch.as_tensor(a, dtype=b.dtype if isinstance(b, torch.Tensor) else None)
    if not isinstance(b, torch.Tensor):
        b = torch.as_tensor(b, dtype=a.dtype)
    return a, b


def _dot(a: Any, b: Any) -> Any:
    torch = _torch()
    a, b = _pair(a, b)
    if a.ndim == 0 or b.ndim == 0:
        return a * b
    if a.ndim > 2 or b.ndim > 2:
        raise ArrayProgramError(
            f"jnp.dot of arrays of rank {a.ndim} and {b.ndim} (a sum over the last axis of a and "
            "the second-to-last of b) is not supported by rewrite.arrays; write jnp.matmul (a "
            "batched product) or jnp.einsum for the contraction meant."
        )
    return torch.matmul(a, b)


def _trace(a: Any, offset: int = 0, axis1: int = 0, axis2: int = 1) -> Any:
    torch = _torch()
    if a.ndim == 2 and offset == 0 and {axis1 % 2, axis2 % 2} == {0, 1}:
        return torch.trace(a)
    return torch.diagonal(a, offset, axis1, axis2).sum(-1)


def _transpose(a: Any, axes: Sequence[int] | None = None) -> Any:
    dims = tuple(reversed(range(a.ndim))) if axes is None else tuple(axes)
    return a.permute(dims)


def _reshape(a: Any, newshape: Any = None, *, shape: Any = None) -> Any:
    target = shape if shape is not None else newshape
    return _torch().reshape(a, (target,) if isinstance(target, int) else tuple(target))


def _binary(fn: str) -> Any:
    def binary(a: Any, b: Any) -> Any:
        return getattr(_torch(), fn)(*_pair(a, b))

    binary.__name__ = fn
    return binary


def _unary(fn: str) -> Any:
    def unary(a: Any) -> Any:
        return getattr(_torch(), fn)(_array(a))

    unary.__name__ = fn
    return unary


def _filled(value: float) -> Any:
    def filled(shape: Any, dtype: Any = None) -> Any:
        torch = _torch()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        return torch.full(shape, value, dtype=dtype or torch.float32)

    return filled


def _functions() -> dict[str, Any]:
    torch = _torch
    return {
        # element-wise
        "abs": _unary("abs"),
        "absolute": _unary("abs"),
        "exp": _unary("exp"),
        "log": _unary("log"),
        "sqrt": _unary("sqrt"),
        "tanh": _unary("tanh"),
        "sin": _unary("sin"),
        "cos": _unary("cos"),
        "negative": _unary("neg"),
        "reciprocal": _unary("reciprocal"),
        "square": lambda a: _torch().pow(_array(a), 2),
        "add": _binary("add"),
        "subtract": _binary("sub"),
        "multiply": _binary("mul"),
        "divide": _binary("true_divide"),
        "true_divide": _binary("true_divide"),
        "power": lambda a, b: _torch().pow(_array(a), b),
        "maximum": _binary("maximum"),
        "minimum": _binary("minimum"),
        "where": lambda c, a, b: _torch().where(c, *_pair(a, b)),
        # reductions
        "sum": _reduce("sum"),
        "mean": _reduce("mean"),
        "max": _reduce("amax"),
        "amax": _reduce("amax"),
        "min": _reduce("amin"),
        "amin": _reduce("amin"),
        # products
        "dot": _dot,
        "matmul": lambda a, b: _torch().matmul(a, b),
        "vdot": lambda a, b: _torch().matmul(a.reshape(-1), b.reshape(-1)),
        "inner": _dot,
        "outer": lambda a, b: _torch().outer(a.reshape(-1), b.reshape(-1)),
        "einsum": lambda spec, *ops: _torch().einsum(spec, *ops),
        "diag": lambda v, k=0: _torch().diag(v, k),
        "diagonal": lambda a, offset=0, axis1=0, axis2=1: _torch().diagonal(
            a, offset, axis1, axis2
        ),
        "trace": _trace,
        # layout
        "reshape": _reshape,
        "transpose": _transpose,
        "swapaxes": lambda a, i, j: _torch().swapaxes(a, i, j),
        "expand_dims": lambda a, axis: _torch().unsqueeze(a, axis),
        "squeeze": lambda a, axis=None: a.squeeze() if axis is None else a.squeeze(axis),
        "stack": lambda arrays, axis=0: _torch().stack(list(arrays), dim=axis),
        "concatenate": lambda arrays, axis=0: _torch().cat(list(arrays), dim=axis),
        # constructors
        "array": _array,
        "asarray": _array,
        "zeros": _filled(0.0),
        "ones": _filled(1.0),
        "zeros_like": lambda a: _torch().zeros_like(a),
        "ones_like": lambda a: _torch().ones_like(a),
        "full": lambda shape, value, dtype=None: _filled(value)(shape, dtype),
        # dtypes and constants (resolved lazily: torch imports only when a program runs)
        "float32": lambda: torch().float32,
        "float64": lambda: torch().float64,
        "int32": lambda: torch().int32,
        "int64": lambda: torch().int64,
        "bool_": lambda: torch().bool,
    }


_CONSTANTS = {"pi": math.pi, "e": math.e, "inf": math.inf, "nan": math.nan, "newaxis": None}
_DTYPES = ("float32", "float64", "int32", "int64", "bool_")
#: The ``jax.numpy`` names `jnp` holds.
SUPPORTED: tuple[str, ...] = tuple(sorted({*_functions(), *_CONSTANTS}))


class _Namespace:
    """The namespace object (see the module docstring); one shared, stateless instance."""

    __name__ = "jax.numpy"

    def __init__(self) -> None:
        self._fns = _functions()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if name in _CONSTANTS:
            return _CONSTANTS[name]
        fn = self._fns.get(name)
        if fn is None:
            raise ArrayProgramError(
                f"jnp.{name} is not supported by rewrite.arrays (the jax.numpy namespace over "
                f"PyTorch); it holds: {', '.join(SUPPORTED)}. Fix: write the computation with "
                f"these, or add jnp.{name} to rewrite.arrays.namespace."
            )
        return fn() if name in _DTYPES else fn

    def __dir__(self) -> list[str]:
        return list(SUPPORTED)

    def __repr__(self) -> str:
        return "<rewrite.arrays.jnp: jax.numpy over PyTorch>"


#: The ``jax.numpy``-compatible namespace (``import jax.numpy as jnp`` inside a loaded program).
jnp = _Namespace()
