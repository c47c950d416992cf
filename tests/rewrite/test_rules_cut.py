"""The rules that cut arithmetic (contraction, vectorization, element-wise identities): where they
apply, where they must not, what they save in the cost model, and that the max/min semantics of
the verifiers agree. The conformance suite (tests/rewrite/test_rules.py) proves and random-tests
every one of them like every rule."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite import GraphBuilder, cost, evaluate, random_inputs
from rewrite.prove import prove_graphs, prove_pair
from rewrite.rules import Rule, catalogue
from rewrite.rules._helpers import op
from rewrite.rules.base import Dims
from rewrite.rules.pattern import P, V
from rewrite.verify import Verifier
from tests.rewrite.rule_fixtures import rules_by_name

CUT = [
    "diagonal_of_matmul",
    "sum_of_matmul",
    "sum_rows_of_matmul",
    "sum_cols_of_matmul",
    "sum_of_sum",
    "factor_out_of_sum",
    "sum_of_product_as_dot",
    "sum_of_product_as_matvec",
    "sum_of_stack",
    "max_of_stack",
    "collect_linear_terms",
    "factor_common_operand",
    "collect_power",
    "pow_small_int",
    "mul_by_one",
    "lerp_form",
    "pow_of_scaled",
    "stack_of_rows",
]


def _rule(name: str) -> Rule:
    return rules_by_name()[name]


def _apply_all(name: str, g):  # noqa: ANN001, ANN202
    rule = _rule(name)
    sites = rule.matches(g)
    assert sites, f"{name} has no site"
    return rule.apply(g, sites[-1])  # the outermost site (anchors come in topological order)


def _same_values(a, b, seed: int = 0) -> None:  # noqa: ANN001
    xs = random_inputs(a, seed=seed)
    for u, v in zip(evaluate(a, xs), evaluate(b, xs)):
        np.testing.assert_allclose(u, v, rtol=1e-4, atol=1e-4)


def test_every_cut_rule_is_in_the_catalogue_with_what_it_trades():
    by = {r.name: r for r in catalogue()}
    for name in CUT:
        r = by[name]
        assert r.family == "algebra" and r.trades and r.doc
    assert {by[n].trades.get("compute") for n in CUT} >= {"-", "~"}


# ---------------------------------------------------------------- contraction
def _product(n: int, k: int, m: int, reduce: str):  # noqa: ANN202
    b = GraphBuilder("p")
    a, w = b.input("a", (n, k)), b.input("b", (k, m))
    p = op(b, "mm", a, w)
    y = op(b, "diagonal", p) if reduce == "diag" else op(b, "sum", p, dims=(0, 1))
    return b.build([y])


def test_diagonal_of_a_square_product_becomes_a_rowwise_sum_and_saves_flops():
    g = _product(64, 32, 64, "diag")
    h = _apply_all("diagonal_of_matmul", g)
    assert "mm" not in {n.op for n in h}
    assert cost(h, "cpu").flops * 20 < cost(g, "cpu").flops  # n k products, not n^2 k
    _same_values(g, h)
    assert prove_pair(g, h)[0] == "proved"


def test_diagonal_rule_refuses_a_non_square_product_or_an_offset():
    assert not _rule("diagonal_of_matmul").matches(_product(4, 3, 5, "diag"))
    b = GraphBuilder("off")
    a, w = b.input("a", (4, 3)), b.input("b", (3, 4))
    g = b.build([op(b, "diagonal", op(b, "mm", a, w), offset=1)])
    assert not _rule("diagonal_of_matmul").matches(g)


def test_sum_of_product_is_a_dot_of_column_and_row_sums():
    g = _product(16, 8, 12, "sum")
    h = _apply_all("sum_of_matmul", g)
    assert cost(h, "cpu").flops * 10 < cost(g, "cpu").flops
    _same_values(g, h)


def test_factor_leaves_a_sum_only_when_constant_along_the_summed_dims():
    b = GraphBuilder("f")
    a, x = b.input("a", (5, 4)), b.input("x", (4,))
    over_rows = b.build([op(b, "sum", op(b, "mul", a, x), dims=(0,))])
    _same_values(over_rows, _apply_all("factor_out_of_sum", over_rows))
    b = GraphBuilder("g")
    a, x = b.input("a", (5, 4)), b.input("x", (4,))
    over_cols = b.build([op(b, "sum", op(b, "mul", a, x), dims=(1,))])
    assert not _rule("factor_out_of_sum").matches(over_cols)  # x varies along dim 1
    assert _rule("sum_of_product_as_matvec").matches(over_cols)  # ... which is a GEMV


def test_sum_of_sum_merges_dims_with_and_without_keepdim():
    for keep in (False, True):
        b = GraphBuilder("s")
        x = b.input("x", (2, 3, 4, 5))
        inner = op(b, "sum", x, dims=(1,), keepdim=keep)
        g = b.build([op(b, "sum", inner, dims=(2,), keepdim=keep)])
        h = _apply_all("sum_of_sum", g)
        assert [n.attrs["dims"] for n in h if n.op == "sum"] == [(1, 3) if not keep else (1, 2)]
        _same_values(g, h)


# ---------------------------------------------------------------- vectorization
def _rows(n: int, k: int, order: list[int] | None = None, wide: bool = False):  # noqa: ANN202
    b = GraphBuilder("rows")
    a = b.input("a", (n, k))
    x = b.input("x", (n, k) if wide else (k,))
    pieces = []
    for i in order or range(n):
        r = op(b, "reshape", op(b, "slice", a, dim=0, start=i, end=i + 1), shape=(k,))
        f = op(b, "mul", op(b, "add", r, x if not wide else op(b, "sum", x, dims=(0,))), r)
        pieces.append(op(b, "reshape", f, shape=(1, k)))
    return b.build([op(b, "concat", *pieces, dim=0)])


def test_a_stack_of_rows_becomes_one_expression_of_the_array():
    g = _rows(6, 5)
    h = _apply_all("stack_of_rows", g)
    assert len(h) < 6 and "concat" not in {n.op for n in h}
    _same_values(g, h)


def test_stack_of_rows_refuses_rows_out_of_order():
    assert not _rule("stack_of_rows").matches(_rows(4, 3, order=[1, 0, 2, 3]))


def test_stack_of_rows_keeps_a_shared_computation_shared():
    g = _rows(3, 4, wide=True)  # sum(x, 0) is one computation repeated per row: a shared leaf
    _same_values(g, _apply_all("stack_of_rows", g))


# ---------------------------------------------------------------- element-wise identities
def test_linear_terms_collect_and_cancel():
    b = GraphBuilder("lin")
    a, c = b.input("a", (3, 4)), b.input("c", (3, 4))
    t = op(b, "sub", op(b, "sub", op(b, "add", a, c), a), a)
    g = b.build([op(b, "sub", op(b, "add", t, op(b, "mul", c, c)), c)])  # a + c - a - a + c*c - c
    h = _apply_all("collect_linear_terms", g)
    assert sorted(n.op for n in h if n.op not in ("input", "const")) == ["mul", "sub"]
    _same_values(g, h)
    b = GraphBuilder("two")
    a, c = b.input("a", (3,)), b.input("c", (3,))
    assert not _rule("collect_linear_terms").matches(b.build([op(b, "add", a, c)]))


def test_linear_terms_merge_equal_computations():
    b = GraphBuilder("dup")
    a, c = b.input("a", (3,)), b.input("c", (3,))
    three = op(b, "mul", b.const(3.0, "float32"), op(b, "mul", a, c))
    g = b.build([op(b, "add", op(b, "mul", a, c), three)])  # (a c) + 3 (a c): two products
    h = _apply_all("collect_linear_terms", g)
    assert sum(n.op == "mul" for n in h) == 2  # one product, one scaling by 4
    _same_values(g, h)


@pytest.mark.parametrize(("k", "muls"), [(4, 2), (5, 3), (8, 3)])
def test_power_by_repeated_squaring(k: int, muls: int):
    b = GraphBuilder("pow")
    x = b.input("x", (4,))
    y = x
    for _ in range(k - 1):
        y = op(b, "mul", y, x)
    g = b.build([y])
    h = _apply_all("collect_power", g)
    assert sum(n.op == "mul" for n in h) == muls
    _same_values(g, h)


def test_small_integer_powers_become_products_and_reciprocals():
    for k, ops in ((2.0, ["mul"]), (-2.0, ["mul", "reciprocal"]), (1.0, [])):
        b = GraphBuilder("p")
        x = b.input("x", (5,))
        g = b.build([op(b, "pow", x, b.const(k, "float32"))])
        h = _apply_all("pow_small_int", g)
        assert sorted(n.op for n in h if n.op not in ("input", "const")) == ops
        assert prove_graphs(g, h)[0] == "proved"
    b = GraphBuilder("frac")
    x = b.input("x", (5,))
    assert not _rule("pow_small_int").matches(b.build([op(b, "pow", x, b.const(2.5, "float32"))]))


def _lerp(order: int, one: float = 1.0, shared: bool = True):  # noqa: ANN202
    """``p * a + (1 - a) * q`` with the sum's and each product's operands in the order the bits
    of ``order`` say (github_8's row: ``x * a + (1 - a) * y``, ``x``, ``y`` vectors)."""
    b = GraphBuilder(f"lerp{order}")
    a, x, y = b.input("a", (3, 4)), b.input("x", (4,)), b.input("y", (4,))
    other = a if shared else b.input("c", (3, 4))

    def mul(u, v, flip: bool):  # noqa: ANN001, ANN202
        return op(b, "mul", *((v, u) if flip else (u, v)))

    t1 = mul(x, other, bool(order & 1))
    t2 = mul(op(b, "sub", b.const(one, "float32"), a), y, bool(order & 2))
    return b.build([op(b, "add", *((t2, t1) if order & 4 else (t1, t2)))])


@pytest.mark.parametrize("order", range(8))
def test_lerp_takes_any_operand_order_and_does_half_the_work(order: int):
    g = _lerp(order)
    h = _apply_all("lerp_form", g)
    assert sorted(n.op for n in h if n.op not in ("input", "const")) == ["add", "mul", "sub"]
    assert [n.type.shape for n in h if n.op == "sub"] == [(4,)]  # p - q at the vectors' shape
    assert cost(h, "cpu").flops < cost(g, "cpu").flops
    _same_values(g, h)
    assert prove_graphs(g, h)[0] == "proved"


def test_lerp_needs_one_minus_the_shared_operand():
    assert not _rule("lerp_form").matches(_lerp(0, one=2.0))  # 2 - a: no interpolation
    assert not _rule("lerp_form").matches(_lerp(0, shared=False))  # p * c + (1 - a) * q


def _scaled_pow(c: float, k: float, first: bool = True):  # noqa: ANN202
    b = GraphBuilder("sp")
    x = op(b, "assume", b.input("x", (3, 4)), domain="positive")
    s = op(b, "sqrt", x)
    scaled = op(b, "mul", *((b.const(c, "float32"), s) if first else (s, b.const(c, "float32"))))
    return b.build([op(b, "pow", scaled, b.const(k, "float32"))])


def test_a_scaled_power_frees_the_power_for_the_domain_rules():
    g = _scaled_pow(2.0, 2.0, first=False)  # (2 sqrt(A)) ** 2: synth_6 after collecting terms
    h = _apply_all("pow_of_scaled", g)
    assert [n.attrs["value"].array.item() for n in h if n.op == "const"] == [2.0, 4.0]
    h = _apply_all("sqrt_squared", _apply_all("pow_small_int", h))
    assert sorted(n.op for n in h if n.op not in ("input", "const")) == ["assume", "mul"]
    _same_values(g, h)  # 4 * A
    assert prove_graphs(g, h)[0] == "proved"


def test_scaled_power_only_where_the_constant_stays_exact():
    rule = _rule("pow_of_scaled")
    assert rule.matches(_scaled_pow(0.5, 8.0)) and rule.matches(_scaled_pow(3.0, 3.0))
    assert not rule.matches(_scaled_pow(0.1, 3.0))  # 0.1 ** 3 is not a float32
    assert not rule.matches(_scaled_pow(2.0, 2.5)) and not rule.matches(_scaled_pow(2.0, 1.0))


# ---------------------------------------------------------------- max and min semantics
def _wrong_max_rule() -> Rule:
    """amax over a stack -> its first piece: wrong, and both verifiers must say so."""

    def sample(d: Dims):  # noqa: ANN202
        b = GraphBuilder("wrong")
        n = d()
        xs = [b.input(f"x{i}", (n,)) for i in range(2)]
        cat = op(b, "concat", *[op(b, "reshape", x, shape=(1, n)) for x in xs], dim=0)
        return b.build([op(b, "amax", cat, dims=(0,))])

    return Rule(
        "wrong_max",
        "algebra",
        (P("amax", P("concat", V("a"), V("b"))),),
        lambda ed, m: [m.node("a").inputs[0]],
        sample,
        {"compute": "-"},
        "amax(stack([a, b])) -> a (wrong)",
    )


def test_max_rules_are_proven_and_a_wrong_one_is_refuted_by_both_verifiers():
    from rewrite.prove import prove_rule

    assert prove_rule(_rule("max_of_stack")).verdict == "proved"
    wrong = _wrong_max_rule()
    assert prove_rule(wrong).verdict == "refuted"
    g = wrong.sample_graph(0, lo=3, hi=5)
    assert not Verifier(mode="field").check_rule(wrong, [g]).ok


# ---------------------------------------------------------------- rules on a promised domain
def _explog(domain: str | None):  # noqa: ANN202
    b = GraphBuilder("explog")
    x = b.input("x", (3,))
    if domain is not None:
        x = op(b, "assume", x, domain=domain)
    return b.build([op(b, "exp", op(b, "log", x))])


def test_domain_rules_fire_only_under_the_promise_they_need():
    rule = _rule("exp_of_log")
    assert not rule.exact and rule.matches(_explog("positive"))
    assert not rule.matches(_explog("nonnegative")) and not rule.matches(_explog(None))


def test_the_prover_needs_the_promise():
    g, h = _explog("positive"), _explog("positive")
    proved = prove_graphs(g, _apply_all("exp_of_log", h))[0]
    assert proved == "proved"
    for domain in (None, "nonnegative"):  # exp(log(0)) is not 0: no proof without x > 0
        g = _explog(domain)
        b = GraphBuilder("x")
        x = b.input("x", (3,))
        bare = b.build([op(b, "assume", x, domain=domain) if domain else op(b, "mul", x, 1.0)])
        assert prove_graphs(g, bare, timeout_ms=2000)[0] != "proved"


def test_sign_follows_sums_products_and_roots():
    from rewrite.rules.domain import sign

    b = GraphBuilder("s")
    p = op(b, "assume", b.input("p", (3,)), domain="positive")
    q = op(b, "assume", b.input("q", (3,)), domain="nonnegative")
    r = b.input("r", (3,))
    vals = [op(b, "add", p, q), op(b, "mul", p, q), op(b, "sqrt", q), op(b, "exp", r),
            op(b, "div", q, p), op(b, "sub", p, p), op(b, "mul", p, r)]  # fmt: skip
    g = b.build(vals)
    got = [sign(g, v) for v in g.outputs]
    assert got == ["positive", "nonnegative", "nonnegative", "positive", "nonnegative", None, None]
