"""Deliberately wrong rules and shared objects for the rule, prover and verifier tests."""

from __future__ import annotations

import functools

import pytest

from rewrite.builder import GraphBuilder
from rewrite.rules import P, Rule, V, catalogue
from rewrite.rules._helpers import op, outs
from rewrite.verify import VerdictCache, cupy_works


@functools.cache
def session_cache() -> VerdictCache:
    """An in-memory verdict cache shared by one test session (proofs run once per session)."""
    return VerdictCache(None)


@functools.cache
def rules_by_name() -> dict[str, Rule]:
    """The built-in catalogue by name."""
    return {r.name: r for r in catalogue()}


#: Backends to parametrize GPU-capable tests over (cupy skipped without a CUDA device).
BACKENDS = [
    "numpy",
    pytest.param(
        "cupy",
        marks=[pytest.mark.gpu, pytest.mark.skipif(not cupy_works(), reason="no CUDA device")],
    ),
]


def _softmax_sample(d):  # noqa: ANN001, ANN202
    b = GraphBuilder("sm")
    shape = (d(), d())
    x, y = b.input("x", shape), b.input("y", shape)
    return b.build([op(b, "softmax", op(b, "add", x, y), dim=-1)])


def wrong_softmax() -> Rule:
    """softmax(x + y) -> softmax(x) + softmax(y) (wrong)."""
    return Rule(
        "wrong_softmax_of_sum",
        "algebra",
        (P("softmax", P("add", V("x"), V("y"))),),
        lambda ed, m: [
            op(ed, "add", op(ed, "softmax", m["x"], dim=-1), op(ed, "softmax", m["y"], dim=-1))
        ],
        _softmax_sample,
        {"compute": "+"},
        "softmax(x + y) -> softmax(x) + softmax(y)",
    )


def _square_mm(d):  # noqa: ANN001, ANN202
    b = GraphBuilder("sq")
    n = d()
    a, w = b.input("a", (n, n)), b.param("w", (n, n))
    return b.build([op(b, "transpose", op(b, "mm", a, w), dim0=0, dim1=1)])


def wrong_transpose() -> Rule:
    """(A B)^T -> A^T B^T (wrong: the order must swap)."""
    t = lambda ed, v: op(ed, "transpose", v, dim0=0, dim1=1)  # noqa: E731
    return Rule(
        "wrong_transpose_of_matmul",
        "algebra",
        (P("transpose", P("mm", V("a"), V("b"))),),
        lambda ed, m: [op(ed, "mm", t(ed, m["a"]), t(ed, m["b"]))],
        _square_mm,
        {"memory": "~"},
        "(A B)^T -> A^T B^T",
        pre=lambda m: m.shape("a")[0] == m.shape("a")[1] == m.shape("b")[1],
    )


def _k_sample(d):  # noqa: ANN001, ANN202
    b = GraphBuilder("k")
    m, k, n = d(), 2 * d(), d()
    x, w = b.input("x", (m, k)), b.param("w", (k, n))
    return b.build([op(b, "mm", x, w)])


def wrong_k_shard() -> Rule:
    """A K-sharded matmul that keeps device 0's partial sum (no all-reduce)."""

    def build(ed, m):  # noqa: ANN001, ANN202
        xs, ws = outs(ed, "shard", m["x"], dim=1, n=2), outs(ed, "shard", m["w"], dim=0, n=2)
        return [op(ed, "mm", xs[0], ws[0])]

    return Rule(
        "wrong_k_shard_without_all_reduce",
        "sharding",
        (P("mm", V("x"), V("w")),),
        build,
        _k_sample,
        {"communication": "-"},
        "x W -> x[:, :K/2] W[:K/2] (all-reduce missing)",
        pre=lambda m: m.shape("x")[1] % 2 == 0,
    )


def wrong_rules() -> list[Rule]:
    """The three deliberately wrong rules of the issue."""
    return [wrong_softmax(), wrong_transpose(), wrong_k_shard()]
