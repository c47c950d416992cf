"""The op definition record, the registry, and helpers shared by the op modules.

Each op is an `OpDef`: shape/dtype inference, FLOP and byte counts, and a reference
implementation written against an array namespace ``xp`` (numpy by default; the verifier may
pass cupy). Implementations take ``(xp, arrays, attrs)`` and return one array per output as a
tuple.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rewrite.errors import ShapeError, UnknownOpError
from rewrite.ir import DTYPE_BYTES, TensorType

__all__ = [
    "KINDS",
    "REQUIRED",
    "OpDef",
    "get_op",
    "op_names",
    "op_table",
    "register",
]

#: Node kinds: ``kernel`` launches work; ``view`` only re-describes memory (free, aliases its
#: input 0); ``source`` is an input/param/const; ``opaque`` is an unknown op.
KINDS = ("kernel", "view", "source", "opaque")


class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


#: Marks an attribute without a default.
REQUIRED: Any = _Required()

Types = tuple[TensorType, ...]
InferFn = Callable[[Types, Mapping[str, Any]], Types]
CountFn = Callable[[Types, Types, Mapping[str, Any]], int]
ImplFn = Callable[[Any, Sequence[Any], Mapping[str, Any]], tuple[Any, ...]]
NormalizeFn = Callable[[Types, dict[str, Any]], dict[str, Any]]


def _default_flops(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    return 0


def io_bytes(ins: Types, outs: Types, attrs: Mapping[str, Any]) -> int:
    """Bytes read plus bytes written when every input and output touches memory once."""
    return sum(t.nbytes for t in ins) + sum(t.nbytes for t in outs)


@dataclass(frozen=True)
class OpDef:
    """Definition of one op.

    Attributes:
        name: Op name used in nodes.
        infer: ``(input types, attrs) -> output types``; raises `ShapeError` on bad input.
        impl: Reference implementation ``(xp, arrays, attrs) -> tuple of arrays``.
        flops: ``(input types, output types, attrs) -> FLOPs``.
        bytes: ``(input types, output types, attrs) -> bytes moved`` (kernels only).
        kind: One of `KINDS`.
        family: Grouping used by docs and rules (``elementwise``, ``matmul``, ``reduction``,
            ``norm``, ``shape``, ``conv``, ``attention``, ``source``, ``fused``, ``opaque``).
        attrs: Attribute name -> default (`REQUIRED` when it has none).
        arity: ``(min, max)`` number of inputs, ``max=None`` for variadic.
        normalize: Optional hook canonicalizing attrs given the input types (e.g. negative
            dims to positive) so equal ops hash equal.
        doc: One-line description.
    """

    name: str
    infer: InferFn
    impl: ImplFn
    flops: CountFn = _default_flops
    bytes: CountFn = io_bytes
    kind: str = "kernel"
    family: str = "elementwise"
    attrs: Mapping[str, Any] = field(default_factory=dict)
    arity: tuple[int, int | None] = (1, 1)
    normalize: NormalizeFn | None = None
    doc: str = ""

    def check_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Fill defaults, reject unknown or missing attributes, turn lists into tuples.

        Raises:
            ShapeError: Naming the op, the offending attribute and the allowed ones.
        """
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise ShapeError(
                f"op {self.name!r} accepts attributes {sorted(self.attrs)}, but got unknown "
                f"{sorted(unknown)}; remove them."
            )
        out: dict[str, Any] = {}
        for k, default in self.attrs.items():
            v = attrs.get(k, default)
            if v is REQUIRED:
                raise ShapeError(f"op {self.name!r} requires attribute {k!r}; pass {k}=... .")
            out[k] = _freeze(v)
        return out

    def check_arity(self, n: int) -> None:
        """Raise `ShapeError` unless ``n`` inputs fit `arity`."""
        lo, hi = self.arity
        if n < lo or (hi is not None and n > hi):
            want = f"{lo}" if lo == hi else f"{lo}..{'' if hi is None else hi}"
            raise ShapeError(f"op {self.name!r} takes {want} inputs, but got {n}.")


def _freeze(v: Any) -> Any:
    if isinstance(v, list | tuple):
        return tuple(_freeze(x) for x in v)
    if hasattr(v, "item") and hasattr(v, "dtype") and getattr(v, "ndim", 1) == 0:
        return v.item()  # numpy / torch scalar
    return v


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry (replacing nothing).

    Raises:
        ValueError: If an op of that name exists or the kind is unknown.
    """
    if op.name in _REGISTRY:
        raise ValueError(f"op names must be unique, but {op.name!r} is already registered.")
    if op.kind not in KINDS:
        raise ValueError(f"op kind must be one of {KINDS}, but {op.name!r} has {op.kind!r}.")
    _REGISTRY[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    """The `OpDef` named ``name``.

    Raises:
        UnknownOpError: If no such op is registered.
    """
    try:
        return _REGISTRY[name]
    except KeyError:
        raise UnknownOpError(
            f"op {name!r} is not registered; known ops: {', '.join(sorted(_REGISTRY))}. "
            "Use `opaque` for ops without semantics."
        ) from None


def op_names() -> list[str]:
    """Names of every registered op, sorted."""
    return sorted(_REGISTRY)


def op_table() -> str:
    """A markdown table of every registered op: family, kind, arity, attributes, description."""
    lines = [
        "| op | family | kind | inputs | attributes | description |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(_REGISTRY, key=lambda n: (_REGISTRY[n].family, n)):
        op = _REGISTRY[name]
        lo, hi = op.arity
        arity = f"{lo}" if lo == hi else f"{lo}..{'n' if hi is None else hi}"
        attrs = ", ".join(
            f"`{k}`" if v is REQUIRED else f"`{k}={v!r}`" for k, v in op.attrs.items()
        )
        lines.append(f"| `{name}` | {op.family} | {op.kind} | {arity} | {attrs} | {op.doc} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------- helpers
_FLOATS = ("bfloat16", "float16", "float32", "float64")
_INTS = ("bool", "uint8", "int8", "int16", "int32", "int64")
_ORDER = {d: i for i, d in enumerate(_INTS + _FLOATS)}


def category(dtype: str) -> int:
    """0 for bool, 1 for integers, 2 for floats."""
    return 0 if dtype == "bool" else (2 if dtype in _FLOATS else 1)


def promote(types: Sequence[TensorType]) -> str:
    """Result dtype of an element-wise op, following torch's promotion rules.

    Zero-dim tensors take part only when their category (bool < int < float) is higher than
    every dimensioned operand's.
    """
    dims = [t.dtype for t in types if t.shape]
    zero = [t.dtype for t in types if not t.shape]
    if not dims:
        return _join(zero)
    d = _join(dims)
    higher = [z for z in zero if category(z) > category(d)]
    return _join([d, *higher]) if higher else d


def _join(dtypes: Sequence[str]) -> str:
    best = dtypes[0]
    for d in dtypes[1:]:
        if d == best:
            continue
        if {best, d} == {"float16", "bfloat16"}:
            best = "float32"
        elif category(d) != category(best):
            best = d if category(d) > category(best) else best
        elif _ORDER[d] > _ORDER[best]:
            best = d
    return best


def broadcast(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """numpy/torch broadcast of ``shapes``.

    Raises:
        ShapeError: Naming the op and the shapes when they do not broadcast.
    """
    rank = max(len(s) for s in shapes)
    out = []
    for i in range(rank):
        d = 1
        for s in shapes:
            k = i - (rank - len(s))
            if k < 0 or s[k] == 1:
                continue
            if d not in (1, s[k]):
                raise ShapeError(
                    f"op {op!r} needs broadcastable input shapes (each dim equal or 1, aligned "
                    f"right), but got {list(shapes)}; reshape or expand an input first."
                )
            d = s[k]
        out.append(d)
    return tuple(out)


def norm_dim(op: str, dim: int, rank: int) -> int:
    """``dim`` in ``[0, rank)``; negative dims count from the end.

    Raises:
        ShapeError: When ``dim`` is out of range.
    """
    if not -rank <= dim < max(rank, 1):
        raise ShapeError(f"op {op!r} needs -{rank} <= dim < {rank}, but got dim={dim}.")
    return dim % rank if rank else 0


def numel(shape: Sequence[int]) -> int:
    """Product of ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return n


def check_float(op: str, t: TensorType) -> None:
    """Raise `ShapeError` unless ``t`` is a float tensor."""
    if t.dtype not in _FLOATS:
        raise ShapeError(f"op {op!r} needs a float input, but got {t}; cast it first.")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of ``dtype``."""
    return DTYPE_BYTES[dtype]
