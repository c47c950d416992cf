"""Shape-reduced checks: size relations, the size map, reduced graphs, and their soundness."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite import GraphBuilder
from rewrite.errors import ShapeReductionError
from rewrite.rules import default_registry
from rewrite.rules._helpers import op, outs
from rewrite.verify import Verifier
from rewrite.verify.reduce import reduce_graph, reduce_pair
from rewrite.verify.sizes import (
    Relation,
    SizeRelations,
    size_relations,
    solve_sizes,
    valid_size_map,
)
from tests.rewrite.rule_fixtures import BACKENDS, wrong_rules


def _rel(sizes, relations, pinned=()):  # noqa: ANN001, ANN202
    rels = frozenset(Relation(k, tuple(sorted(a)), tuple(sorted(b))) for k, a, b in relations)
    every = set(sizes) | set(pinned) | {x for r in rels for x in (*r.lhs, *r.rhs)}
    return SizeRelations(frozenset(every), rels, frozenset(pinned))


def _attention_block(s: int = 48, h: int = 4, e: int = 16) -> GraphBuilder:
    """x[1, s, h*e] -> qkv split -> heads -> causal attention -> merged heads."""
    b = GraphBuilder("attn")
    d = h * e
    x = b.input("x", (1, s, d))
    qkv = op(b, "linear", x, b.param("w", (3 * d, d)))
    heads = []
    for t in outs(b, "split", qkv, sizes=(d, d, d), dim=2):
        heads.append(op(b, "transpose", op(b, "reshape", t, shape=(1, s, h, e)), dim0=1, dim1=2))
    y = op(b, "sdpa", *heads, is_causal=True)
    y = op(b, "reshape", op(b, "transpose", y, dim0=1, dim1=2), shape=(1, s, d))
    return b.build([y])


def test_size_map_keeps_every_relation_and_distinct_sizes():
    # GPT-2's widths with a halved model width: 768 = 12 * 64 = 384 + 384, 2304 = 3 * 768
    rel = _rel(
        [12, 64, 256, 384, 768, 1024, 2304, 3072, 50257],
        [
            ("prod", (768,), (12, 64)),
            ("sum", (384, 384), (768,)),
            ("sum", (768, 768, 768), (2304,)),
            ("lt", (256,), (1024,)),
        ],
    )
    sigma = solve_sizes(rel)
    assert valid_size_map(sigma, rel)
    assert sigma[768] == sigma[12] * sigma[64] == 2 * sigma[384] and sigma[256] < sigma[1024]
    assert max(sigma.values()) <= 64  # every size shrinks to a few elements
    assert len(set(sigma.values())) == len(sigma)


def test_size_map_keeps_pins_and_falls_back_to_the_identity():
    rel = _rel([3, 7, 64, 96], [("sum", (32, 64), (96,))], pinned=[7])
    sigma = solve_sizes(rel)
    assert valid_size_map(sigma, rel) and sigma[7] == 7 and sigma[96] < 96
    # every size from 4 to 16 present, and 16 = 4 * 4: still injective, and 16 shrinks
    crowded = _rel(range(4, 17), [("prod", (16,), (4, 4))])
    sigma = solve_sizes(crowded)
    assert valid_size_map(sigma, crowded) and sigma[16] == sigma[4] ** 2 < 16
    # a relation no smaller sizes keep (7 * 11 = 77 with 77 pinned): the identity
    stuck = _rel([7, 11, 77], [("prod", (77,), (7, 11))], pinned=[77])
    assert solve_sizes(stuck) == {0: 0, 1: 1, 7: 7, 11: 11, 77: 77}


def test_reduced_graph_keeps_ids_and_maps_every_type():
    g = _attention_block()
    rel = size_relations(g)
    sigma = solve_sizes(rel)
    red = reduce_graph(g, sigma)
    assert set(red.nodes) == set(g.nodes) and red.outputs == g.outputs
    for node in g:
        mapped = tuple(tuple(sigma[d] for d in t.shape) for t in node.types)
        assert tuple(t.shape for t in red.node(node.id).types) == mapped
    assert max(t.numel for n in red for t in n.types) < max(t.numel for n in g for t in n.types)


@pytest.mark.parametrize("backend", BACKENDS)
def test_catalogue_rewrites_pass_reduced_checks(backend):
    g = _attention_block(s=40, h=4, e=12)
    v = Verifier(mode="auto", backend=backend)
    seen = 0
    for rule in default_registry():
        for site in rule.matches(g)[:1]:
            res = v.check_site(rule, g, site)
            assert res.ok and res.shapes in ("reduced", "real"), (rule.name, res)
            seen += res.shapes == "reduced"
    assert seen >= 5


@pytest.mark.parametrize("rule", wrong_rules(), ids=lambda r: r.name)
def test_wrong_rules_fail_reduced_checks(rule):
    g = rule.sample_graph(7, lo=24, hi=40)
    site = rule.matches(g)[0]
    res = Verifier(mode="auto").check_site(rule, g, site)
    assert not res.ok and res.shapes == "reduced"


def _rotate(s: int, d: int, cut: int):  # noqa: ANN202
    """concat(-x[:, cut:], x[:, :cut]) (rotate-half when cut = d / 2)."""
    b = GraphBuilder("rot")
    x = b.input("x", (s, d))
    hi = op(b, "slice", x, dim=1, start=cut, end=d)
    lo = op(b, "slice", x, dim=1, start=0, end=cut)
    return b.build([op(b, "concat", op(b, "neg", hi), lo, dim=1)])


def test_reduced_check_keeps_the_structure_a_wrong_rewrite_needs():
    v = Verifier(mode="field")
    # a rotation off by one element: 63, 64 and 65 must stay distinct with 63 + 65 = 2 * 64
    res = v.check(_rotate(96, 128, 64), _rotate(96, 128, 65), reduce=True)
    assert not res.ok and res.shapes == "reduced"
    # true only if a size were 1: reshape(transpose(x)) == x needs a == 1 or b == 1
    b = GraphBuilder("t")
    x = b.input("x", (24, 40))
    same = b.build([op(b, "neg", x)])
    b2 = GraphBuilder("t")
    x2 = b2.input("x", (24, 40))
    flipped = op(b2, "reshape", op(b2, "transpose", x2, dim0=0, dim1=1), shape=(24, 40))
    res = v.check(same, b2.build([op(b2, "neg", flipped)]), reduce=True)
    assert not res.ok and res.shapes == "reduced"
    # an equivalent rewrite of the rotation still passes reduced
    b3 = GraphBuilder("rot")
    x3 = b3.input("x", (96, 128))
    parts = [op(b3, "slice", x3, dim=1, start=a, end=e) for a, e in ((64, 96), (96, 128))]
    neg = op(b3, "concat", *(op(b3, "neg", p) for p in parts), dim=1)
    lo = op(b3, "slice", x3, dim=1, start=0, end=64)
    split = b3.build([op(b3, "concat", neg, lo, dim=1)])
    res = v.check(_rotate(96, 128, 64), split, reduce=True)
    assert res.ok and res.shapes == "reduced"


def _gather(ids: np.ndarray, vocab: int = 50):  # noqa: ANN202
    b = GraphBuilder("gather")
    w = b.param("w", (vocab, 32))
    return b.build([op(b, "embedding", w, b.const(ids))])


def test_where_reduction_is_not_used():
    # an index constant whose leading block points past the reduced vocabulary
    far = _gather(np.array([[49, 0, 3, 7]]))
    near = _gather(np.array([[0, 1, 2, 3]]))
    with pytest.raises(ShapeReductionError, match="indexes"):
        reduce_pair(far, far)
    assert reduce_pair(near, near) is not None
    res = Verifier(mode="field").check(far, _gather(np.array([[49, 0, 3, 8]])), reduce=True)
    assert not res.ok and res.shapes == "real"  # checked at the real shapes instead
    # strided slices and conv windows keep their sizes
    b = GraphBuilder("conv")
    x = b.input("x", (1, 32, 10, 10))
    y = op(b, "conv2d", x, b.param("w", (48, 32, 3, 3)), padding=(1, 1))
    g = b.build([op(b, "slice", y, dim=3, start=0, end=10, step=2)])
    sigma = solve_sizes(size_relations(g))
    assert sigma[10] == 10 and sigma[3] == 3 and sigma[5] == 5 and sigma[48] < 48


def _strided(unary: str):  # noqa: ANN202
    b = GraphBuilder("big")
    x = op(b, unary, b.input("x", (256, 256)))
    for d in (0, 1):  # strided slices pin every size
        x = op(b, "slice", x, dim=d, start=0, end=256, step=2)
    return b.build([x])


def test_unreduced_large_checks_are_not_run():
    g, h = _strided("relu"), _strided("abs")
    assert reduce_pair(g, h) is None
    small = Verifier(mode="field", max_bytes=1 << 10).check(g, h, reduce=True)
    assert not small.ok and not small.checked and "max_bytes" in small.detail
    res = Verifier(mode="field").check(g, h, reduce=True)
    assert res.checked and not res.ok and res.shapes == "real"


def test_deadline_stops_a_check():
    g = _attention_block()
    h = default_registry()["unfuse_attention"].apply(
        g, default_registry()["unfuse_attention"].matches(g)[0]
    )
    res = Verifier(mode="field").check(g, h, reduce=True, deadline=0.0)
    assert not res.checked and "deadline" in res.detail
    assert Verifier(mode="field").check(g, h, reduce=True).ok


def test_one_verifier_over_many_rewrites_with_a_full_memo():
    """Memo hits found before new values are remembered must survive their eviction."""
    b = GraphBuilder("wide")
    x = b.input("x", (16, 16))
    acc = None
    for i in range(12):
        y = op(b, "exp", op(b, "mul", x, b.param(f"w{i}", (16, 16))))
        y = op(b, "tanh", op(b, "add", y, b.param(f"c{i}", (16, 16))))
        acc = y if acc is None else op(b, "add", acc, y)
    g = b.build([acc])
    kids = [r.apply(g, s) for r in default_registry() for s in r.matches(g)]
    assert len(kids) > 20
    small = Verifier(mode="field", memo_bytes=3 * 16 * 16 * 8 * 2)  # about three values
    got = [small.check_rewrite(g, c).ok for c in kids]
    assert got == [Verifier(mode="field").check(g, c).ok for c in kids]
    assert small._batched().memo and small._batched()._bytes <= 3 * 16 * 16 * 8 * 2 * 2
