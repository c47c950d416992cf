"""Test-only tiny rules built with the real `Rule` API, and small graphs to search on.

They stand in for nothing: the engine tests use them to exercise mechanics on graphs where the
right answer is known (matrix-chain order); the real catalogue is tested where it exists.
"""

from __future__ import annotations

import numpy as np

from rewrite.builder import GraphBuilder, GraphEditor
from rewrite.ir import Graph, Value
from rewrite.rules.base import Dims, Rule
from rewrite.rules.pattern import Match, P, V


def _chain3(d: Dims) -> Graph:
    m, k, n, p = d(), d(), d(), d()
    b = GraphBuilder("chain3")
    x = b.input("x", (m, k))
    w1 = b.param("w1", (k, n))
    w2 = b.param("w2", (n, p))
    return b.build([b.mm(b.mm(x, w1), w2)])


def _assoc_left(ed: GraphEditor, m: Match) -> list[Value]:
    return [ed.mm(m["a"], ed.mm(m["b"], m["c"]))]


def _assoc_right(ed: GraphEditor, m: Match) -> list[Value]:
    return [ed.mm(ed.mm(m["a"], m["b"]), m["c"])]


def _chain3_right(d: Dims) -> Graph:
    m, k, n, p = d(), d(), d(), d()
    b = GraphBuilder("chain3r")
    x = b.input("x", (m, k))
    w1 = b.param("w1", (k, n))
    w2 = b.param("w2", (n, p))
    return b.build([b.mm(x, b.mm(w1, w2))])


def _neg_neg(ed: GraphEditor, m: Match) -> list[Value]:
    return [m["x"]]


def _neg_sample(d: Dims) -> Graph:
    b = GraphBuilder("negneg")
    x = b.input("x", (d(), d()))
    return b.build([b.neg(b.neg(x))])


def _exp_split(ed: GraphEditor, m: Match) -> list[Value]:
    return [ed.add(ed.exp(m["x"]), ed.exp(m["y"]))]


def _exp_sample(d: Dims) -> Graph:
    b = GraphBuilder("expadd")
    s = (d(), d())
    x, y = b.input("x", s), b.input("y", s)
    return b.build([b.exp(b.add(x, y))])


MM_ASSOC_LEFT = Rule(
    name="test_mm_assoc_left",
    family="algebra",
    pattern=(P("mm", P("mm", V("a"), V("b")), V("c")),),
    build=_assoc_left,
    sample=_chain3,
    trades={"compute": "~"},
    doc="(AB)C -> A(BC)",
)
MM_ASSOC_RIGHT = Rule(
    name="test_mm_assoc_right",
    family="algebra",
    pattern=(P("mm", V("a"), P("mm", V("b"), V("c"))),),
    build=_assoc_right,
    sample=_chain3_right,
    trades={"compute": "~"},
    doc="A(BC) -> (AB)C",
)
NEG_NEG = Rule(
    name="test_neg_neg",
    family="algebra",
    pattern=(P("neg", P("neg", V("x"))),),
    build=_neg_neg,
    sample=_neg_sample,
    trades={"kernels": "-"},
    doc="-(-x) -> x",
)
WRONG_EXP = Rule(
    name="test_wrong_exp_split",
    family="algebra",
    pattern=(P("exp", P("add", V("x"), V("y"))),),
    build=_exp_split,
    sample=_exp_sample,
    trades={"compute": "~"},
    doc="exp(x + y) -> exp(x) + exp(y)  (WRONG: must be rejected)",
)

WRONG_DROP_NEG = Rule(
    name="test_wrong_drop_neg",
    family="algebra",
    pattern=(P("neg", V("x")),),
    build=_neg_neg,
    sample=_neg_sample,
    trades={"kernels": "-"},
    doc="-x -> x  (WRONG, and it looks profitable: must be rejected)",
)

TEST_RULES = [MM_ASSOC_LEFT, MM_ASSOC_RIGHT, NEG_NEG]


def chain_graph(dims: list[int], negs: int = 1, name: str = "chain") -> Graph:
    """``x @ W1 @ ... @ Wk`` multiplied left to right, with ``negs`` double negations at the end.

    Args:
        dims: ``k + 1`` sizes: ``x`` is ``dims[0] x dims[1]``, ``W_i`` is
            ``dims[i] x dims[i + 1]``.
        negs: Double negations appended to the output (sites of `NEG_NEG`).
    """
    b = GraphBuilder(name)
    y = b.input("x", (dims[0], dims[1]))
    for i in range(1, len(dims) - 1):
        y = b.mm(y, b.param(f"w{i}", (dims[i], dims[i + 1])))
    for _ in range(negs):
        y = b.neg(b.neg(y))
    return b.build([y])


def rng_chain(seed: int, k: int = 5) -> Graph:
    """A random matrix chain of ``k`` products with sizes in [2, 64]."""
    rng = np.random.default_rng(seed)
    return chain_graph([int(v) for v in rng.integers(2, 65, size=k + 2)])
