"""Rules valid on a domain the program promises (family ``algebra``, not exact in the field).

``exp(log(x)) = x`` holds for ``x > 0`` only, ``x / sqrt(x) = sqrt(x)`` too, ``sqrt(x) ** 2 = x``
for ``x >= 0``, ``x ** a / x ** b = x ** (a - b)`` for ``x != 0``. A program states such a promise
with ``assume`` nodes (`rewrite.arrays.import_program(..., domains=...)`: its inputs are
positive, say); `sign` carries it through the ops that keep it (sums and products of positive
values, ``exp``, ``sqrt``, reductions, layout ops), and each rule's precondition asks it.

The prover proves these rules under the promise, for every value of the domain, with the facts
of real analysis they need (`rewrite.prove.domain_axioms`); random testing runs in float mode
(``exact=False``), where the ``assume`` nodes map the drawn inputs into their domain: the field
has no ``exp`` turning sums into products. The search checks every rewrite of these rules, and
every graph holding one, in float mode too.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from rewrite.builder import GraphBuilder
from rewrite.ir import Graph, Value
from rewrite.rules._helpers import op
from rewrite.rules.base import Dims, Rule
from rewrite.rules.pattern import Match, P, V

__all__ = ["domain_rules", "sign"]

_POS, _NONNEG = "positive", "nonnegative"
#: Ops whose output is an input element (or a sum/mean/max of input elements): they keep a sign.
_KEEP = frozenset(
    {"reshape", "expand", "slice", "permute", "transpose", "diagonal", "concat", "split", "sum",
     "mean", "amax", "amin", "maximum", "minimum", "mm", "matmul", "bmm"}
)  # fmt: skip
_memo: OrderedDict[tuple[int, Value], str | None] = OrderedDict()


def sign(g: Graph, v: Value) -> str | None:
    """``"positive"``, ``"nonnegative"`` or None (unknown) for the values of ``v``, from the
    ``assume`` nodes and constants it is computed from."""
    key = (g.uid, v)
    if key in _memo:
        return _memo[key]
    out = _sign(g, v)
    _memo[key] = out
    if len(_memo) > 65536:
        _memo.popitem(last=False)
    return out


def _weakest(signs: list[str | None]) -> str | None:
    if any(s is None for s in signs):
        return None
    return _NONNEG if _NONNEG in signs else _POS


def _sign(g: Graph, v: Value) -> str | None:
    n = g.node(v.node)
    if n.op == "assume":
        return str(n.attrs["domain"])
    if n.op == "const":
        a = np.asarray(n.attrs["value"].array, dtype=np.float64)
        return _POS if (a > 0).all() else (_NONNEG if (a >= 0).all() else None)
    if n.op in ("exp", "sigmoid", "softmax"):
        return _POS
    if n.op in ("abs", "relu"):
        return _NONNEG
    ins = [sign(g, u) for u in n.inputs]
    if n.op in _KEEP or n.op == "sqrt":
        return _weakest(ins)
    if n.op in ("reciprocal", "rsqrt"):
        return _POS if ins[0] == _POS else None
    if n.op in ("add", "mul") and None not in ins:
        if n.op == "add":
            return _POS if _POS in ins else _NONNEG
        return _POS if all(s == _POS for s in ins) else _NONNEG
    if n.op == "div" and ins[1] == _POS:
        return ins[0]
    if n.op == "pow" and ins[0] == _POS:
        return _POS
    return None


def _positive(m: Match, *names: str) -> bool:
    return all(sign(m.graph, m[n]) == _POS for n in names)


def _int_const(g: Graph, v: Value) -> int | None:
    n = g.node(v.node)
    if n.op != "const" or n.type.numel != 1:
        return None
    k = float(np.asarray(n.attrs["value"].array).reshape(()))
    return int(k) if k == int(k) and abs(k) <= 64 else None


def _powers_pre(m: Match) -> bool:
    a, b = (_int_const(m.graph, m[k]) for k in ("a", "b"))
    same = m.node("pa").types[0] == m.node("pb").types[0] == m.root_node().types[0]
    return a is not None and b is not None and a > b and same and _positive(m, "x")


def _powers_build(ed, m: Match) -> list[Value]:  # noqa: ANN001
    a, b = (_int_const(m.graph, m[k]) for k in ("a", "b"))
    assert a is not None and b is not None  # the precondition holds
    k = a - b
    dtype = m.root_node().types[0].dtype
    return [m["x"] if k == 1 else op(ed, "pow", m["x"], ed.const(float(k), dtype=dtype))]


def _ratio_build(ed, m: Match) -> list[Value]:  # noqa: ANN001
    return [op(ed, "div" if m.node("mid").op == "sub" else "mul", m["a"], m["b"])]


def _sample(d: Dims, kind: str) -> Graph:
    b = GraphBuilder(f"domain_{kind}")
    shape = (d(), d())
    x = op(b, "assume", b.input("x", shape), domain=_POS if kind != "sqrt" else _NONNEG)
    y = op(b, "assume", b.input("y", shape), domain=_POS)
    if kind == "explog":
        out = op(b, "exp", op(b, "log", op(b, "add", x, y)))
    elif kind == "ratio":
        out = op(b, "exp", op(b, "sub", op(b, "log", x), op(b, "log", y)))
    elif kind == "divsqrt":
        out = op(b, "div", x, op(b, "sqrt", x))
    elif kind == "sqrt":
        s = op(b, "sqrt", x)
        out = op(b, "mul", s, s)
    else:
        out = op(b, "div", *(op(b, "pow", x, b.const(k, "float32")) for k in (6.0, 4.0)))
    return b.build([out])


def domain_rules() -> list[Rule]:
    """The rules relying on a promised domain (``exact=False``: float random tests)."""
    return [
        Rule(
            "exp_of_log",
            "algebra",
            (P("exp", P("log", V("x"))),),
            lambda ed, m: [m["x"]],
            lambda d: _sample(d, "explog"),
            {"compute": "-", "memory": "-"},
            "exp(log(x)) -> x for x > 0",
            pre=lambda m: _positive(m, "x"),
            exact=False,
        ),
        Rule(
            "exp_of_log_ratio",
            "algebra",
            (P("exp", P(("sub", "add"), P("log", V("a")), P("log", V("b")), name="mid")),),
            _ratio_build,
            lambda d: _sample(d, "ratio"),
            {"compute": "-", "memory": "-"},
            "exp(log a - log b) -> a / b (and + -> a * b) for a, b > 0",
            pre=lambda m: _positive(m, "a", "b"),
            exact=False,
        ),
        Rule(
            "div_by_own_sqrt",
            "algebra",
            (P("div", V("x"), P("sqrt", V("x"))),),
            lambda ed, m: [op(ed, "sqrt", m["x"])],
            lambda d: _sample(d, "divsqrt"),
            {"compute": "-"},
            "x / sqrt(x) -> sqrt(x) for x > 0",
            pre=lambda m: _positive(m, "x") and m.type("x") == m.root_node().types[0],
            exact=False,
        ),
        Rule(
            "sqrt_squared",
            "algebra",
            (P("mul", P("sqrt", V("x"), name="s1"), P("sqrt", V("x"), name="s2")),),
            lambda ed, m: [m["x"]],
            lambda d: _sample(d, "sqrt"),
            {"compute": "-"},
            "sqrt(x) * sqrt(x) -> x for x >= 0",
            pre=lambda m: (
                sign(m.graph, m["x"]) is not None and m.type("x") == m.root_node().types[0]
            ),
            exact=False,
        ),
        Rule(
            "div_of_powers",
            "algebra",
            (P("div", P("pow", V("x"), V("a"), name="pa"), P("pow", V("x"), V("b"), name="pb")),),
            _powers_build,
            lambda d: _sample(d, "powers"),
            {"compute": "-"},
            "x**a / x**b -> x**(a - b) for integers a > b and x > 0",
            pre=_powers_pre,
            exact=False,
        ),
    ]
