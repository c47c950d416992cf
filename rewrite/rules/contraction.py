"""Rules that cut the arithmetic of reductions over products (family ``algebra``).

A diagonal, trace or sum of a matrix product needs only part of the product, and a reduction
can move before the product it reduces: ``diag(A B)`` is a row-wise sum of ``A * B^T`` (``n k``
products instead of ``n^2 k``), ``sum(A B)`` a dot of A's column sums with B's row sums, a sum of
``A B`` over rows a vector-matrix product of A's column sums. A factor constant along the reduced
dims leaves the sum (``sum_i A_ij x_j = x_j sum_i A_ij``); a sum of a product of a matrix and a
vector is a matrix-vector product (the GEMV of a BLAS library instead of a generated reduction);
two sums in a row are one; a sum over the dim a stack creates is a sum of the stacked arrays.

Every rule here is exact in the reals: z3 proves it on its proof instance and it is random-tested
in the finite field (`rewrite.prove`, `rewrite.verify`), like every rule of the catalogue.
"""

from __future__ import annotations

import functools

from rewrite.builder import GraphBuilder
from rewrite.ir import Graph, Node, TensorType, Value
from rewrite.rules._helpers import op
from rewrite.rules.base import Dims, Rule
from rewrite.rules.pattern import Match, P, V

__all__ = ["contraction_rules", "stacked_pieces"]

_PRODUCTS = ("mm", "matmul")


def _is_2d_product(m: Match, name: str = "prod") -> bool:
    n = m.node(name)
    return all(t.rank == 2 for t in n.in_types)


def _sums(m: Match, dims: tuple[int, ...]) -> bool:
    n = m.root_node()
    return tuple(n.attrs["dims"]) == dims and not n.attrs["keepdim"]


# ---------------------------------------------------------------- diagonal and sums of products
def _diag_pre(m: Match) -> bool:
    d, (a, b) = m.root_node().attrs, m.node("prod").in_types
    return (
        d["offset"] == 0
        and {d["dim1"], d["dim2"]} == {0, 1}
        and _is_2d_product(m)
        and a.shape[0] == b.shape[1]
    )


def _diag_build(ed, m: Match) -> list[Value]:  # noqa: ANN001
    bt = op(ed, "transpose", m["b"], dim0=0, dim1=1)
    return [op(ed, "sum", op(ed, "mul", m["a"], bt), dims=(1,))]


def _sum_all_build(ed, m: Match) -> list[Value]:  # noqa: ANN001
    cols = op(ed, "sum", m["a"], dims=(0,))
    rows = op(ed, "sum", m["b"], dims=(1,))
    return [op(ed, "sum", op(ed, "mul", cols, rows), dims=(0,))]


def _sample_product(d: Dims, kind: str) -> Graph:
    b = GraphBuilder(f"product_{kind}")
    n, k, m = d(), d(), d()
    a = b.input("a", (n, k))
    w = b.param("b", (k, n if kind == "diag" else m))
    p = op(b, "matmul" if kind == "cols" else "mm", a, w)
    if kind == "diag":
        y = op(b, "diagonal", p)
    else:
        dims = {"all": (0, 1), "rows": (0,), "cols": (1,)}[kind]
        y = op(b, "sum", p, dims=dims)
    return b.build([y])


def _product_rules() -> list[Rule]:
    prod = P(_PRODUCTS, V("a"), V("b"), name="prod")
    return [
        Rule(
            "diagonal_of_matmul",
            "algebra",
            (P("diagonal", prod),),
            _diag_build,
            lambda d: _sample_product(d, "diag"),
            {"compute": "-", "memory": "-"},
            "diag(A B) -> sum(A * B^T, dim 1) (n k products, not n^2 k; trace(A B) with a sum)",
            pre=_diag_pre,
        ),
        Rule(
            "sum_of_matmul",
            "algebra",
            (P("sum", prod),),
            _sum_all_build,
            lambda d: _sample_product(d, "all"),
            {"compute": "-", "memory": "-"},
            "sum(A B) -> sum(colsum(A) * rowsum(B)) (a dot of A's column and B's row sums)",
            pre=lambda m: _is_2d_product(m) and _sums(m, (0, 1)),
        ),
        Rule(
            "sum_rows_of_matmul",
            "algebra",
            (P("sum", prod),),
            lambda ed, m: [op(ed, "matmul", op(ed, "sum", m["a"], dims=(0,)), m["b"])],
            lambda d: _sample_product(d, "rows"),
            {"compute": "-", "memory": "-"},
            "sum(A B, dim 0) -> colsum(A) B (the reduction before the product)",
            pre=lambda m: _is_2d_product(m) and _sums(m, (0,)),
        ),
        Rule(
            "sum_cols_of_matmul",
            "algebra",
            (P("sum", prod),),
            lambda ed, m: [op(ed, "matmul", m["a"], op(ed, "sum", m["b"], dims=(1,)))],
            lambda d: _sample_product(d, "cols"),
            {"compute": "-", "memory": "-"},
            "sum(A B, dim 1) -> A rowsum(B) (the reduction before the product)",
            pre=lambda m: _is_2d_product(m) and _sums(m, (1,)),
        ),
    ]


# ---------------------------------------------------------------- moving reductions
def _merged_dims(m: Match) -> tuple[int, ...] | None:
    """The dims of ``x`` the two sums reduce together (None when their keepdims differ)."""
    inner, outer = m.node("inner"), m.root_node()
    if inner.attrs["keepdim"] != outer.attrs["keepdim"]:
        return None
    first = tuple(inner.attrs["dims"])
    if inner.attrs["keepdim"]:
        return tuple(sorted({*first, *outer.attrs["dims"]}))
    kept = [i for i in range(m.type("x").rank) if i not in first]
    return tuple(sorted({*first, *(kept[j] for j in outer.attrs["dims"])}))


def _invariant(x: TensorType, out: TensorType, dims: tuple[int, ...]) -> bool:
    """Whether ``x``, broadcast to ``out``, is constant along every one of ``dims``."""
    lead = out.rank - x.rank
    return all(d < lead or x.shape[d - lead] == 1 for d in dims)


def _factor_operands(m: Match) -> tuple[Value, Value] | None:
    """``(a, x)``: the mul's full-shaped operand and the one constant along the summed dims."""
    s, mul = m.root_node(), m.node("prod")
    dims, out = tuple(s.attrs["dims"]), mul.types[0]
    for a, x in ((m["a"], m["b"]), (m["b"], m["a"])):
        ta, tx = m.graph.type_of(a), m.graph.type_of(x)
        if ta.shape == out.shape and ta.dtype == out.dtype and _invariant(tx, out, dims):
            return a, x
    return None


def _factor_build(ed, m: Match) -> list[Value]:  # noqa: ANN001
    found = _factor_operands(m)
    assert found is not None  # the precondition holds
    a, x = found
    s, out = m.root_node(), m.node("prod").types[0]
    dims, keep = tuple(s.attrs["dims"]), s.attrs["keepdim"]
    tx = m.graph.type_of(x)
    full = (1,) * (out.rank - tx.rank) + tx.shape
    shape = tuple(n for i, n in enumerate(full) if keep or i not in dims)
    xr = op(ed, "reshape", x, shape=shape) if shape != tx.shape else x
    return [op(ed, "mul", op(ed, "sum", a, dims=dims, keepdim=keep), xr)]


def _sample_factor(d: Dims) -> Graph:
    b = GraphBuilder("factor_sum")
    n, k = d(), d()
    a, x = b.input("a", (n, k)), b.param("x", (k,))
    return b.build([op(b, "sum", op(b, "mul", x, a), dims=(0,))])


def _sample_sum_sum(d: Dims) -> Graph:
    b = GraphBuilder("sum_sum")
    x = b.input("x", (d(), d(), d()))
    return b.build([op(b, "sum", op(b, "sum", x, dims=(1,)), dims=(1,))])


def _reduction_rules() -> list[Rule]:
    return [
        Rule(
            "sum_of_sum",
            "algebra",
            (P("sum", P("sum", V("x"), name="inner")),),
            lambda ed, m: [
                op(ed, "sum", m["x"], dims=_merged_dims(m), keepdim=m.attr("inner", "keepdim"))
            ],
            _sample_sum_sum,
            {"compute": "-", "kernels": "-"},
            "sum(sum(x, d1), d2) -> sum(x, d1 + d2) (one reduction)",
            pre=lambda m: _merged_dims(m) is not None,
        ),
        Rule(
            "factor_out_of_sum",
            "algebra",
            (P("sum", P("mul", V("a"), V("b"), name="prod")),),
            _factor_build,
            _sample_factor,
            {"compute": "-", "memory": "~"},
            "sum(a * x, d) -> sum(a, d) * x for x constant along d (the product after the sum)",
            pre=lambda m: _factor_operands(m) is not None,
        ),
    ]


# ---------------------------------------------------------------- sums of products as contractions
def _contraction(m: Match) -> tuple[Value, Value] | None:
    """``(left, right)`` of the matmul a sum of a product is: a row-wise dot of a matrix with a
    vector (sum over the last dim) or the dot of two vectors."""
    s, mul = m.root_node(), m.node("prod")
    if s.attrs["keepdim"] or mul.types[0].dtype not in (
        "float32",
        "float64",
        "float16",
        "bfloat16",
    ):
        return None
    for a, x in ((m["a"], m["b"]), (m["b"], m["a"])):
        ta, tx = m.graph.type_of(a), m.graph.type_of(x)
        if tx.rank != 1 or ta.dtype != tx.dtype:
            continue
        if ta.rank in (1, 2) and ta.shape[-1] == tx.shape[0] and s.attrs["dims"] == (ta.rank - 1,):
            return a, x
    return None


def _sample_contraction(d: Dims, vector: bool) -> Graph:
    b = GraphBuilder("contraction")
    n, k = d(), d()
    x = b.param("x", (k,))
    a = b.input("a", (k,) if vector else (n, k))
    return b.build([op(b, "sum", op(b, "mul", x, a), dims=(0 if vector else 1,))])


def _contraction_build(ed, m: Match) -> list[Value]:  # noqa: ANN001
    found = _contraction(m)
    assert found is not None  # the precondition holds
    return [op(ed, "matmul", *found)]


def _contraction_pre(m: Match, rank: int) -> bool:
    found = _contraction(m)
    return found is not None and m.graph.type_of(found[0]).rank == rank


def _contraction_rules() -> list[Rule]:
    pattern = (P("sum", P("mul", V("a"), V("b"), name="prod")),)
    return [
        Rule(
            "sum_of_product_as_dot",
            "algebra",
            pattern,
            _contraction_build,
            functools.partial(_sample_contraction, vector=True),
            {"compute": "~", "kernels": "~"},
            "sum(a * x) -> a @ x for vectors (a BLAS dot in place of a generated reduction)",
            pre=functools.partial(_contraction_pre, rank=1),
        ),
        Rule(
            "sum_of_product_as_matvec",
            "algebra",
            pattern,
            _contraction_build,
            functools.partial(_sample_contraction, vector=False),
            {"compute": "~", "kernels": "~"},
            "sum(A * x, last dim) -> A @ x (a BLAS GEMV in place of a generated reduction)",
            pre=functools.partial(_contraction_pre, rank=2),
        ),
    ]


# ---------------------------------------------------------------- reductions of stacks
def stacked_pieces(g: Graph, cat: Node) -> list[Value] | None:
    """The arrays a ``concat`` stacks along a new dim (each ``reshape``d to insert a unit dim at
    the concat's dim), or None when it is not such a stack."""
    d, out = cat.attrs["dim"], cat.types[0]
    pieces = []
    for v in cat.inputs:
        r = g.node(v.node)
        t = g.type_of(v)
        if (
            r.op != "reshape"
            or t.shape[d] != 1
            or r.in_types[0].shape != t.shape[:d] + t.shape[d + 1 :]
        ):
            return None
        pieces.append(r.inputs[0])
    return pieces if out.shape[d] == len(pieces) else None


#: The element-wise op folding the pieces of a stack for each reduction over the stacked dim.
_FOLD = {"sum": "add", "amax": "maximum", "amin": "minimum"}


def _stack_pre(m: Match) -> bool:
    cat = m.node("cat")
    return stacked_pieces(m.graph, cat) is not None and _sums(m, (cat.attrs["dim"],))


def _stack_build(ed, m: Match) -> list[Value]:  # noqa: ANN001
    pieces = stacked_pieces(m.graph, m.node("cat"))
    assert pieces is not None  # the precondition holds
    fold, acc = _FOLD[m.root_node().op], pieces[0]
    for v in pieces[1:]:
        acc = op(ed, fold, acc, v)
    return [acc]


def _sample_stack(d: Dims, reduce: str) -> Graph:
    b = GraphBuilder("stack_reduce")
    n, k = d(), d()
    xs = [b.input(f"x{i}", (n, k)) for i in range(3)]
    cat = op(b, "concat", *[op(b, "reshape", x, shape=(n, 1, k)) for x in xs], dim=1)
    return b.build([op(b, reduce, cat, dims=(1,))])


def _stack_rules() -> list[Rule]:
    return [
        Rule(
            "sum_of_stack",
            "algebra",
            (P("sum", P("concat", variadic=True, name="cat")),),
            _stack_build,
            functools.partial(_sample_stack, reduce="sum"),
            {"memory": "-", "peak_memory": "-", "kernels": "~"},
            "sum(stack([x1..xk]), new dim) -> x1 + ... + xk (no stacked copy)",
            pre=_stack_pre,
            extra_nodes=lambda m: [v.node for v in m.node("cat").inputs],
        ),
        Rule(
            "max_of_stack",
            "algebra",
            (P(("amax", "amin"), P("concat", variadic=True, name="cat")),),
            _stack_build,
            functools.partial(_sample_stack, reduce="amax"),
            {"memory": "-", "peak_memory": "-", "kernels": "~"},
            "amax/amin(stack([x1..xk]), new dim) -> maximum(x1, ..., xk) (minimum)",
            pre=_stack_pre,
            extra_nodes=lambda m: [v.node for v in m.node("cat").inputs],
        ),
    ]


def contraction_rules() -> list[Rule]:
    """Reductions over products and stacks (family ``algebra``)."""
    return [*_product_rules(), *_reduction_rules(), *_contraction_rules(), *_stack_rules()]
