"""Vectorization: a stack of one element-wise function applied row by row is the function of the
whole array (family ``algebra``).

``jnp.stack([f(a) for a in A])`` unrolls, under any tracer, into one copy of ``f`` per row of
``A``, each on a slice, and a stack of the results: ``n`` times the kernels and a copy. When the
``n`` copies are one element-wise expression in which only the row changes (the row of one or
more arrays of equal shape, at the stacked position; every other leaf the same value in each
copy, of a rank that broadcasts the same way against the row and the whole array), the stack is
``f(A)``: `stack_of_rows`. The rule reads the whole unrolled loop (its precondition walks the
``n`` expressions in step), so it is one rule object like any other; the z3 proof and the
random tests run on its sample instance, and every site the search applies it to is checked
again by the search's own random tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rewrite.builder import GraphBuilder
from rewrite.ir import Graph, TensorType, Value
from rewrite.ops import get_op
from rewrite.rules._helpers import op
from rewrite.rules.base import Dims, Rule
from rewrite.rules.contraction import stacked_pieces
from rewrite.rules.pattern import Match, P

__all__ = ["vectorize_rules"]

#: Largest depth of the lifted expression walked (a guard against pathological graphs).
_MAX_DEPTH = 64


@dataclass(frozen=True)
class _Lifted:
    """One position of the lifted expression: ``kind`` is ``"row"`` (the row of ``value``),
    ``"shared"`` (``value`` itself in every copy) or ``"op"`` (``op`` of ``children``)."""

    kind: str
    value: Value | None = None
    op: str = ""
    attrs: tuple[tuple[str, object], ...] = ()
    children: tuple[_Lifted, ...] = ()


@dataclass
class _Walk:
    """What lifting found: the stacked dim, the row sources, the shared leaves, the nodes read."""

    dim: int
    rows: set[Value]
    shared: set[Value]
    nodes: set[int]


def _row_of(g: Graph, vals: Sequence[Value], w: _Walk) -> Value | None:
    """The array whose rows ``vals`` are (row ``i`` at position ``i``, taken at the stacked dim),
    or None."""
    src = None
    for i, v in enumerate(vals):
        r = g.node(v.node)
        if r.op != "reshape":
            return None
        s = g.node(r.inputs[0].node)
        at = s.attrs
        if s.op != "slice" or (at["dim"], at["start"], at["end"], at["step"]) != (
            w.dim,
            i,
            i + 1,
            1,
        ):
            return None
        if src not in (None, s.inputs[0]):
            return None
        src = s.inputs[0]
        shape = g.type_of(src).shape
        if r.types[0].shape != shape[: w.dim] + shape[w.dim + 1 :]:
            return None
    return src


def _lift(g: Graph, vals: Sequence[Value], w: _Walk, depth: int = 0) -> _Lifted | None:
    """The expression the ``n`` copies ``vals`` are, with the row varying (or None)."""
    if depth > _MAX_DEPTH:
        return None
    hashes = g.node_hashes()
    if all(v == vals[0] for v in vals) or all(
        v.index == vals[0].index and hashes[v.node] == hashes[vals[0].node] for v in vals
    ):  # one value, or equal computations of shared values (a constant made once per row)
        w.shared.add(vals[0])
        return _Lifted("shared", vals[0])
    src = _row_of(g, vals, w)
    if src is not None:
        w.rows.add(src)
        for v in vals:
            w.nodes.update((v.node, g.node(v.node).inputs[0].node))
        return _Lifted("row", src)
    nodes = [g.node(v.node) for v in vals]
    first = nodes[0]
    opdef = get_op(first.op)
    if opdef.family != "elementwise" or opdef.kind != "kernel" or len(first.types) != 1:
        return None
    if any(
        n.op != first.op or n.attrs != first.attrs or len(n.inputs) != len(first.inputs)
        for n in nodes
    ):
        return None
    children = []
    for j in range(len(first.inputs)):
        child = _lift(g, [n.inputs[j] for n in nodes], w, depth + 1)
        if child is None:
            return None
        children.append(child)
    w.nodes.update(n.id for n in nodes)
    return _Lifted("op", None, first.op, tuple(sorted(first.attrs.items())), tuple(children))


def _analyse(m: Match) -> tuple[_Lifted, _Walk] | None:
    """The lifted expression of a stack of rows and what it reads, or None if it is not one."""
    g, cat = m.graph, m.root_node()
    pieces = stacked_pieces(g, cat)
    if pieces is None:
        return None
    w = _Walk(cat.attrs["dim"], set(), set(), {v.node for v in cat.inputs})
    tree = _lift(g, pieces, w)
    if tree is None or not w.rows:
        return None
    shapes = {g.type_of(x).shape for x in w.rows}
    if len(shapes) != 1:
        return None
    (shape,) = shapes
    row = shape[: w.dim] + shape[w.dim + 1 :]
    if shape[w.dim] != len(pieces) or any(g.type_of(p).shape != row for p in pieces):
        return None
    if any(g.type_of(v).rank + w.dim > len(row) for v in w.shared):
        return None  # a leaf aligning with the row's dims before the stacked one
    return tree, w


def _emit(ed, t: _Lifted) -> Value:  # noqa: ANN001
    if t.kind != "op":
        assert t.value is not None
        return t.value
    return op(ed, t.op, *(_emit(ed, c) for c in t.children), **dict(t.attrs))


def _build(ed, m: Match) -> list[Value]:  # noqa: ANN001
    found = _analyse(m)
    assert found is not None  # the precondition holds
    out = _emit(ed, found[0])
    want: TensorType = m.root_node().types[0]
    if ed.type_of(out).dtype != want.dtype:
        out = op(ed, "cast", out, dtype=want.dtype)
    return [out]


def _sample(d: Dims) -> Graph:
    b = GraphBuilder("stack_of_rows")
    n, k = d(), d()
    a, x, y = b.input("a", (n, k)), b.param("x", (k,)), b.param("y", (k,))
    one = b.const(1.0, "float32")
    rows = []
    for i in range(n):
        r = op(b, "reshape", op(b, "slice", a, dim=0, start=i, end=i + 1), shape=(k,))
        f = op(b, "add", op(b, "mul", x, r), op(b, "mul", op(b, "sub", one, r), y))
        rows.append(op(b, "reshape", f, shape=(1, k)))
    return b.build([op(b, "concat", *rows, dim=0)])


def vectorize_rules() -> list[Rule]:
    """The vectorization rule (family ``algebra``)."""
    return [
        Rule(
            "stack_of_rows",
            "algebra",
            (P("concat", variadic=True),),
            _build,
            _sample,
            {"kernels": "-", "memory": "-", "peak_memory": "-"},
            "stack([f(A[0]), ..., f(A[n-1])]) -> f(A) for element-wise f (a loop over rows, "
            "vectorized)",
            pre=lambda m: _analyse(m) is not None,
            extra_nodes=lambda m: sorted(found[1].nodes) if (found := _analyse(m)) else [],
        ),
    ]
