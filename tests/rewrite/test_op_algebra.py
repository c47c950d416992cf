"""The verifier fields of `OpDef` (linear, field_exact, layout, pass_ints, degree, random_map).

The prover, the field interpreter, the degree bound and the source sampler read these fields
through `ops_where`; these tests pin the derived sets of the built-in ops (they equal the lists
the four modules used to keep by hand) and the invariants those modules rely on.
"""

from __future__ import annotations

import numpy as np
import pytest

from rewrite import prove
from rewrite.builder import GraphBuilder
from rewrite.ops import BUILTIN_OPS, OpDef, get_op, ops_where
from rewrite.ops import base as ops_base
from rewrite.rules._helpers import op
from rewrite.verify import degree_bound
from rewrite.verify import field as F
from rewrite.verify.interp import Evaluator
from rewrite.verify.sources import index_bounds

_LAYOUT = {
    "reshape",
    "expand",
    "slice",
    "split",
    "diagonal",
    "assume",
    "permute",
    "transpose",
    "concat",
    "index_select",
    "embedding",
    "where",
    "all_gather",
    "shard",
}
_MAPS = {"exp", "log", "sqrt", "tanh", "sigmoid", "gelu", "erf", "sin", "cos", "relu", "abs"}
_SUMS = {"add", "sub", "neg", "sum", "all_reduce", "reduce_scatter"}
_PRODUCTS = {"mul", "mm", "bmm", "matmul", "linear", "addmm", "conv2d"}
#: Golden derived sets of the built-in ops: field -> value -> op names.
GOLDEN: dict[tuple[str, object], set[str]] = {
    ("linear", True): _SUMS | _LAYOUT | _PRODUCTS | {"mean"},
    ("field_exact", True): _SUMS | _LAYOUT | {"mul"},
    ("layout", True): _LAYOUT,
    ("pass_ints", True): (_LAYOUT - {"index_select", "embedding"}) | {"cast"},
    ("random_map", True): _MAPS,
    ("degree", "max"): _SUMS | _LAYOUT | {"mean", "cast"},
    ("degree", "sum"): _PRODUCTS,
    ("degree", "fresh"): _MAPS
    | {"amax", "amin", "maximum", "minimum", "reciprocal", "rsqrt", "max_pool2d"}
    | {"eq", "ne", "lt", "le", "gt", "ge", "logical_not", "logical_and", "logical_or"},
}


@pytest.mark.parametrize(("name", "value"), sorted(GOLDEN, key=str))
def test_derived_sets_of_builtin_ops_are_golden(name, value):
    assert ops_where(**{name: value}) & BUILTIN_OPS == GOLDEN[(name, value)]


@pytest.mark.parametrize("name", sorted(BUILTIN_OPS))
def test_verifier_fields_are_consistent(name):
    d = get_op(name)
    assert d.degree in (None, *ops_base.DEGREES)
    if d.layout:
        assert d.field_exact, "a layout op runs its reference implementation in the field"
    if d.field_exact:
        assert d.linear, "an op exact in the field is multilinear"
    if d.linear:
        assert d.degree in ("max", "sum")
    if d.random_map:
        assert d.degree == "fresh" and d.arity == (1, 1) and not d.linear
    if d.pass_ints:
        assert d.degree == "max", "integers passed through keep the input degree"
    if d.kind == "view":
        assert d.layout, "a view only re-describes memory, so it moves elements"
    if d.kind in ("source", "opaque"):
        assert not (d.linear or d.random_map or d.pass_ints) and d.degree is None


def test_field_additive_fast_path_is_field_exact():
    assert F._ADDITIVE.issubset(ops_where(field_exact=True) - ops_where(layout=True))


def test_every_builtin_op_has_field_semantics():
    covered = ops_where(field_exact=True) | ops_where(random_map=True) | set(F._SPECIAL)
    # sources are drawn by the evaluator, opaque ops have none, logical and/or see bools only
    assert BUILTIN_OPS - covered == {"input", "param", "opaque", "logical_and", "logical_or"}


def test_prover_semantics_cover_the_float_ops():
    covered = ops_where(linear=True) | ops_where(random_map=True) | set(prove._SPECIAL)
    assert BUILTIN_OPS - covered == {
        # sources are variables, opaque ops have no semantics, pooling is not modelled
        *("input", "param", "opaque", "avg_pool2d", "max_pool2d"),
        # comparisons and logic on floats are rejected (on integers: `prove._int_symbolic`);
        # maximum and minimum are real If terms
        *("eq", "ne", "lt", "le", "gt", "ge"),
        *("logical_not", "logical_and", "logical_or"),
    }


def test_ops_where_rejects_unknown_fields():
    with pytest.raises(ValueError, match="no fields"):
        ops_where(linearity=True)


def test_register_rejects_unknown_degree(op_registry):
    bad = OpDef("test_bad_degree", lambda ins, a: ins, lambda xp, a, at: tuple(a), degree="cube")
    with pytest.raises(ValueError, match="degree"):
        ops_base.register(bad)


def test_a_new_op_needs_only_its_opdef(op_registry):
    """An op registered with verifier fields is a random map in the field, fresh in the degree
    bound and passes an index through, without touching the verifier modules."""
    before = ops_where(random_map=True)
    ops_base.register(
        OpDef(
            "test_softsign",
            lambda ins, a: ins,
            lambda xp, arrs, a: (arrs[0] / (1 + abs(arrs[0])),),
            **ops_base.RANDOM_MAP,
        )
    )
    ops_base.register(
        OpDef(
            "test_copy",
            lambda ins, a: ins,
            lambda xp, arrs, a: (arrs[0].copy(),),
            **ops_base.LAYOUT,
        )
    )
    assert ops_where(random_map=True) == before | {"test_softsign"}

    b = GraphBuilder("new")
    x = b.input("x", (2, 3))
    g = b.build([op(b, "mul", op(b, "test_softsign", x), x), x])
    assert degree_bound(g) == 2
    f = F.FieldOps(np, 0)
    y, xs = Evaluator(f).outputs(g)
    assert np.array_equal(y, f.mod(f.rmap("test_softsign|[]", xs) * xs))

    b = GraphBuilder("index")
    ids = b.input("ids", (4,), dtype="int64")
    g = b.build([op(b, "embedding", b.param("w", (5, 3)), op(b, "test_copy", ids))])
    assert index_bounds(g) == {("input", "ids"): 5}
