"""Tensor-level types of the IR: dtypes, `TensorType`, and the `ConstArray` a constant holds.

These describe tensors independently of any graph; `rewrite.ir` re-exports them, so
``from rewrite.ir import TensorType`` keeps working.
"""

from __future__ import annotations

import hashlib
from typing import Any, NamedTuple

import numpy as np

from rewrite.errors import GraphError

__all__ = ["DTYPE_BYTES", "ConstArray", "TensorType", "numpy_dtype"]

#: Bytes per element of every dtype the IR knows.
DTYPE_BYTES: dict[str, int] = {
    "bool": 1,
    "uint8": 1,
    "int8": 1,
    "int16": 2,
    "int32": 4,
    "int64": 8,
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
}

# numpy has no bfloat16: the numpy reference computes bfloat16 tensors in float32.
_NUMPY_DTYPES: dict[str, Any] = {k: np.dtype(k) for k in DTYPE_BYTES if k != "bfloat16"}
_NUMPY_DTYPES["bfloat16"] = np.dtype("float32")


def numpy_dtype(dtype: str) -> np.dtype:
    """The numpy dtype the reference implementation uses for an IR dtype.

    Args:
        dtype: An IR dtype name (a key of `DTYPE_BYTES`).

    Returns:
        The numpy dtype (``float32`` for ``bfloat16``, which numpy lacks).
    """
    try:
        return _NUMPY_DTYPES[dtype]
    except KeyError:
        raise GraphError(
            f"dtype must be one of {sorted(DTYPE_BYTES)}, but got {dtype!r}; "
            "map it to one of these at import."
        ) from None


class TensorType(NamedTuple):
    """Shape and dtype of one tensor."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def numel(self) -> int:
        """Number of elements."""
        n = 1
        for d in self.shape:
            n *= d
        return n

    @property
    def nbytes(self) -> int:
        """Size in bytes."""
        return self.numel * DTYPE_BYTES[self.dtype]

    @property
    def rank(self) -> int:
        """Number of dimensions."""
        return len(self.shape)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


class ConstArray:
    """An immutable array held by a ``const`` node, compared and hashed by content.

    Args:
        array: The value; copied and made read-only.
        dtype: The IR dtype; defaults to the array's dtype name.
    """

    __slots__ = ("array", "digest", "dtype")

    def __reduce__(self) -> tuple[Any, ...]:
        return (ConstArray, (self.array, self.dtype))

    def __init__(self, array: Any, dtype: str | None = None) -> None:
        arr = np.asarray(array)
        self.dtype = dtype or ("bool" if arr.dtype == np.bool_ else arr.dtype.name)
        arr = np.array(arr, dtype=numpy_dtype(self.dtype), order="C", copy=True)
        arr.flags.writeable = False
        self.array = arr
        h = hashlib.blake2b(digest_size=16)
        h.update(f"{self.dtype}{arr.shape}".encode())
        h.update(arr.tobytes())
        self.digest = h.hexdigest()

    @property
    def type(self) -> TensorType:
        """The tensor type of the constant."""
        return TensorType(tuple(int(d) for d in self.array.shape), self.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConstArray) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"ConstArray({self.type}, {self.digest})"
