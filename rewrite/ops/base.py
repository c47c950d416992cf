"""The op definition record, the registry, and helpers shared by the op modules.

Each op is an `OpDef`: shape/dtype inference, FLOP and byte counts, and a reference
implementation written against an array namespace ``xp`` (numpy by default; the verifier may
pass cupy). Implementations take ``(xp, arrays, attrs)`` and return one array per output as a
tuple.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field, fields
from types import MappingProxyType
from typing import Any

from rewrite.errors import ShapeError, UnknownOpError
from rewrite.ir import DTYPE_BYTES, TensorType

__all__ = [
    "ADDITIVE",
    "DEGREES",
    "FRESH",
    "KINDS",
    "LAYOUT",
    "PRODUCT",
    "RANDOM_MAP",
    "REQUIRED",
    "Attr",
    "OpDef",
    "get_op",
    "op_names",
    "op_table",
    "ops_where",
    "register",
]

#: Node kinds: ``kernel`` launches work; ``view`` only re-describes memory (free, aliases its
#: input 0); ``source`` is an input/param/const; ``opaque`` is an unknown op.
KINDS = ("kernel", "view", "source", "opaque")
#: Values of `OpDef.degree` (besides None); see the `OpDef` docstring.
DEGREES = ("max", "sum", "fresh")


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
class Attr:
    """Allowed type and range of one op attribute, checked by `OpDef.check_attrs`.

    Attributes:
        kind: ``"int"``, ``"ints"`` (a tuple of ints), ``"float"`` (any real number),
            ``"bool"`` or ``"str"``.
        low: Smallest allowed number (of every element, for ``"ints"``).
        n: Exact length of an ``"ints"`` value (2 for the ``(h, w)`` pairs of conv and pooling).
        optional: ``None`` is allowed too.
        scalar: A single int is accepted where ``"ints"`` is expected (reduction ``dims=1``).
        choices: Allowed values of a ``"str"``.
    """

    kind: str
    low: float | None = None
    n: int | None = None
    optional: bool = False
    scalar: bool = False
    choices: tuple[str, ...] = ()

    def describe(self) -> str:
        """The rule in words, e.g. ``"a pair of ints >= 1, e.g. (1, 1)"``."""
        bound = "" if self.low is None else f" >= {self.low}"
        if self.kind == "ints":
            if self.n == 2:
                eg = max(int(self.low or 0), 1)
                text = f"a pair of ints{bound}, e.g. ({eg}, {eg})"
            else:
                text = f"a tuple of{'' if self.n is None else f' {self.n}'} ints{bound}"
            if self.scalar:
                text = f"an int{bound} or {text}"
        elif self.kind == "str" and self.choices:
            text = f"one of {list(self.choices)}"
        else:
            text = {"int": "an int", "float": "a finite number", "bool": "True or False"}.get(
                self.kind, f"a {self.kind}"
            ) + (bound if self.kind in ("int", "float") else "")
        return text + (" or None" if self.optional else "")

    def accepts(self, v: Any) -> bool:
        """Whether ``v`` (a frozen attribute value) satisfies the rule."""
        if v is None:
            return self.optional
        if self.kind == "ints":
            if self.scalar and _is_int(v):
                return self._in_range(v)
            return (
                isinstance(v, tuple)
                and (self.n is None or len(v) == self.n)
                and all(_is_int(x) and self._in_range(x) for x in v)
            )
        if self.kind == "int":
            return _is_int(v) and self._in_range(v)
        if self.kind == "float":
            return (
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and math.isfinite(v)
                and self._in_range(v)
            )
        if self.kind == "bool":
            return isinstance(v, bool)
        return isinstance(v, str) and (not self.choices or v in self.choices)

    def _in_range(self, x: float) -> bool:
        return self.low is None or x >= self.low


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


#: Shared attribute rules used by the op modules.
DIM = Attr("int")
BOOL = Attr("bool")
POS_PAIR = Attr("ints", low=1, n=2)
NONNEG_PAIR = Attr("ints", low=0, n=2)
EPS = Attr("float", low=0)


@dataclass(frozen=True)
class OpDef:
    """Definition of one op.

    The keyword-only fields (``linear`` to ``random_map``) describe the op's algebra for the
    verifiers (`rewrite.prove`, `rewrite.verify.field`, `rewrite.verify.degree`,
    `rewrite.verify.sources`), which read them through `ops_where`. Their defaults claim
    nothing: a verifier then needs its own rule for the op or rejects graphs using it. The
    presets `ADDITIVE`, `LAYOUT`, `PRODUCT`, `RANDOM_MAP` and `FRESH` bundle the usual
    combinations.

    Attributes:
        name: Op name used in nodes.
        infer: ``(input types, attrs) -> output types``; raises `ShapeError` on bad input.
        impl: Reference implementation ``(xp, arrays, attrs) -> tuple of arrays``.
        flops: ``(input types, output types, attrs) -> FLOPs``.
        bytes: ``(input types, output types, attrs) -> bytes moved`` (kernels only).
        kind: One of `KINDS`.
        family: Grouping used by docs and rules (``elementwise``, ``matmul``, ``reduction``,
            ``norm``, ``shape``, ``conv``, ``pool``, ``attention``, ``source``, ``fused``, ``opaque``).
            The cost model runs ``matmul``, ``attention`` and ``conv`` on the matmul unit and
            every other family (pooling included) on the vector unit.
        attrs: Attribute name -> default (`REQUIRED` when it has none).
        arity: ``(min, max)`` number of inputs, ``max=None`` for variadic.
        normalize: Optional hook canonicalizing attrs given the input types (e.g. negative
            dims to positive) so equal ops hash equal.
        doc: One-line description.
        checks: Attribute name -> `Attr` rule its value must satisfy (checked before
            ``normalize`` and ``infer``, so those may trust the types).
        linear: Multilinear: the reference implementation only adds, multiplies and moves input
            elements (or scales them by constants), so it runs unchanged on symbolic terms (the
            z3 prover evaluates it on z3 terms).
        field_exact: The reference implementation is exact on finite-field elements once its
            results are reduced mod p (no division, no contraction too long for float64), so
            the field interpreter runs it directly. Implies ``linear``.
        layout: Every output element is an input element (reshape, slice, gather, ``where``,
            ...), so field results need no reduction. Implies ``field_exact``.
        pass_ints: Integer inputs reach the outputs unchanged (layout ops other than gathers,
            casts), so a value passed through to an index stays a direct index (see
            `rewrite.verify.sources`).
        degree: How the polynomial degree of the outputs follows from the inputs' (see
            `rewrite.verify.degree`): ``"max"`` (additive and layout ops: the largest input
            degree), ``"sum"`` (products: the sum), ``"fresh"`` (a random map, field inverse or
            predicate: a new variable of degree 1), or None (the degree bound has its own rule
            for the op, or uses its conservative default).
        random_map: An element-wise non-linear function whose identities no rule may rely on:
            an uninterpreted function in the prover, a consistent random map in the field.
            Implies ``degree="fresh"``.
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
    checks: Mapping[str, Attr] = field(default_factory=dict)
    _: KW_ONLY
    linear: bool = False
    field_exact: bool = False
    layout: bool = False
    pass_ints: bool = False
    degree: str | None = None
    random_map: bool = False

    def check_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """Fill defaults, reject unknown or missing attributes, turn lists into tuples.

        Raises:
            ShapeError: Naming the op, the offending attribute and the allowed ones, or the
                attribute whose value breaks its `Attr` rule (with the value and the rule).
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
            rule = self.checks.get(k)
            if rule is not None and not rule.accepts(out[k]):
                raise ShapeError(
                    f"op {self.name!r} needs {k} to be {rule.describe()}, but got {k}={v!r}."
                )
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


#: Verifier presets (keyword arguments of `OpDef`), e.g. ``OpDef(..., **ADDITIVE)``: sums and
#: differences of elements; layout ops; products; opaque element-wise functions; other ops whose
#: outputs are new variables for the degree bound.
ADDITIVE: Mapping[str, Any] = MappingProxyType(
    {"linear": True, "field_exact": True, "degree": "max"}
)
LAYOUT: Mapping[str, Any] = MappingProxyType({**ADDITIVE, "layout": True, "pass_ints": True})
PRODUCT: Mapping[str, Any] = MappingProxyType({"linear": True, "degree": "sum"})
RANDOM_MAP: Mapping[str, Any] = MappingProxyType({"random_map": True, "degree": "fresh"})
FRESH: Mapping[str, Any] = MappingProxyType({"degree": "fresh"})

_REGISTRY: dict[str, OpDef] = {}
_DERIVED: dict[tuple[tuple[str, Any], ...], frozenset[str]] = {}


def register(op: OpDef) -> OpDef:
    """Add ``op`` to the registry (replacing nothing).

    Raises:
        ValueError: If an op of that name exists or the kind is unknown.
    """
    if op.name in _REGISTRY:
        raise ValueError(f"op names must be unique, but {op.name!r} is already registered.")
    if op.kind not in KINDS:
        raise ValueError(f"op kind must be one of {KINDS}, but {op.name!r} has {op.kind!r}.")
    stray = set(op.checks) - set(op.attrs)
    if stray:
        raise ValueError(
            f"op {op.name!r} has checks for {sorted(stray)}, which are not among its attrs "
            f"{sorted(op.attrs)}."
        )
    if op.degree is not None and op.degree not in DEGREES:
        raise ValueError(
            f"op degree must be None or one of {DEGREES}, but {op.name!r} has {op.degree!r}."
        )
    _REGISTRY[op.name] = op
    _DERIVED.clear()
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


def ops_where(**values: Any) -> frozenset[str]:
    """Names of the registered ops whose `OpDef` fields equal ``values``.

    E.g. ``ops_where(layout=True)`` or ``ops_where(degree="sum")``. Answers are cached until the
    next `register`, so the verifiers may ask on every node.

    Raises:
        ValueError: If a keyword is not an `OpDef` field.
    """
    key = tuple(sorted(values.items()))
    hit = _DERIVED.get(key)
    if hit is None:
        unknown = set(values) - {f.name for f in fields(OpDef)}
        if unknown:
            raise ValueError(f"OpDef has no fields {sorted(unknown)}.")
        hit = _DERIVED[key] = frozenset(
            name
            for name, op in _REGISTRY.items()
            if all(getattr(op, k) == v for k, v in values.items())
        )
    return hit


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
