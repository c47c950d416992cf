"""Equality saturation (`strategy="saturate"`): results, limits, fallbacks, skipped rules."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("egglog")

from rewrite.builder import GraphBuilder  # noqa: E402
from rewrite.costmodel import cost  # noqa: E402
from rewrite.errors import SearchConfigError, SearchError  # noqa: E402
from rewrite.ir import Graph  # noqa: E402
from rewrite.optimize.api import search  # noqa: E402
from rewrite.optimize.config import SearchConfig  # noqa: E402
from rewrite.optimize.engine import Context, Engine  # noqa: E402
from rewrite.optimize.pareto import non_dominated  # noqa: E402
from rewrite.optimize.runner import default_rules  # noqa: E402
from rewrite.optimize.saturate import SaturationLimits, inexpressible, saturate  # noqa: E402
from rewrite.optimize.saturate.translate import REASONS, translate  # noqa: E402
from rewrite.reference import evaluate, random_inputs, random_params  # noqa: E402
from rewrite.rules.base import Dims, Rule  # noqa: E402
from rewrite.rules.pattern import P, V  # noqa: E402
from tests.rewrite.search_rules import (  # noqa: E402
    NEG_NEG,
    TEST_RULES,
    WRONG_EXP,
    chain_graph,
)

DIMS = [64, 8, 64, 8, 64]
CHAIN = chain_graph(DIMS, negs=2)


def _sat(graph: Graph = CHAIN, rules=TEST_RULES, limits=None, **knobs):
    return saturate(graph, rules, limits=limits, config=knobs, verify_cache=None)


def _chain_orders(dims: list[int]) -> list[Graph]:
    """Every parenthesization of the chain ``x W1 .. Wk`` (no negations)."""
    b = GraphBuilder("chain")
    leaves = [b.input("x", (dims[0], dims[1]))]
    leaves += [b.param(f"w{i}", (dims[i], dims[i + 1])) for i in range(1, len(dims) - 1)]

    def trees(lo: int, hi: int) -> list:
        if lo == hi:
            return [leaves[lo]]
        out = []
        for k in range(lo, hi):
            for a, c in itertools.product(trees(lo, k), trees(k + 1, hi)):
                out.append(b.mm(a, c))
        return out

    return [b.build([t]) for t in trees(0, len(leaves) - 1)]


def _equal_on_random_inputs(a: Graph, b: Graph, seed: int = 0) -> bool:
    ins, params = random_inputs(a, seed), random_params(a, seed)
    return all(
        np.allclose(x, y, rtol=1e-4, atol=1e-5)
        for x, y in zip(evaluate(a, ins, params), evaluate(b, ins, params))
    )


def test_saturation_finds_the_best_chain_order_and_drops_double_negations() -> None:
    res = _sat()
    assert res.stop_reason == "exhausted"  # saturated
    best = min(cost(g).latency for g in _chain_orders(DIMS))
    assert res.best("latency").cost["latency"] == pytest.approx(best, rel=1e-9)
    g = res.best("latency").graph
    assert "neg" not in g.op_counts()
    assert _equal_on_random_inputs(CHAIN, g)
    info = res.strategy_info
    assert info["ilp"] == "optimal" and info["e_nodes"] >= len(CHAIN)
    assert {"greedy:latency", "ilp:latency"} <= set(info["extracted"])


def test_result_is_a_search_result_like_the_others() -> None:
    res = search(
        CHAIN, {"strategy": "saturate", "max_steps": 10**6}, rules=TEST_RULES, verify_cache=None
    )
    Y = np.array([s.objectives for s in res.pareto])
    assert non_dominated(Y).all()
    for sol in res.pareto:
        assert sol.checked in ("input", "reduced", "real")  # the final whole-graph check ran
        assert cost(sol.graph).as_dict()["latency"] == pytest.approx(sol.cost["latency"])
        assert {s.rule for s in sol.steps} <= {r.name for r in TEST_RULES}
    m = res.metrics()
    assert m["rule.test_mm_assoc_left.fired"] > 0 and m["steps"] == res.stats.steps
    assert res.summary()["strategy_info"]["stop"] == "exhausted"


@pytest.mark.parametrize(
    ("limits", "knobs", "reason"),
    [
        ({"nodes": 12}, {}, "nodes"),
        ({"iterations": 1}, {}, "iterations"),
        ({"time": 1e-9}, {}, "time"),
        ({}, {"max_steps": 2}, "steps"),
    ],
)
def test_a_limit_stops_saturation_and_what_it_has_is_extracted(limits, knobs, reason) -> None:
    res = _sat(limits=limits, **knobs)
    assert res.stop_reason == reason
    best = res.best("latency")
    assert best.cost["latency"] <= res.input_cost["latency"]
    assert _equal_on_random_inputs(CHAIN, best.graph)
    if reason == "steps":
        assert res.stats.steps == 2


def test_ilp_timeout_falls_back_to_greedy_and_says_so() -> None:
    res = _sat(limits={"ilp_time": 1e-9})
    assert "greedy used" in res.strategy_info["ilp"]
    assert "ilp:latency" not in res.strategy_info["extracted"]
    assert _equal_on_random_inputs(CHAIN, res.best("latency").graph)
    greedy_only = _sat(limits={"extraction": "greedy"})
    assert "ilp" not in greedy_only.strategy_info
    assert greedy_only.best("latency").cost == res.best("latency").cost


def _needs_exp_producer(d: Dims) -> Graph:
    b = GraphBuilder("neg_exp")
    return b.build([b.neg(b.exp(b.input("x", (d(), d()))))])


CONTEXT_RULE = Rule(
    name="test_context_pre",
    family="algebra",
    pattern=(P("neg", V("x")),),
    build=lambda ed, m: [ed.neg(m["x"])],
    sample=_needs_exp_producer,
    trades={"kernels": "~"},
    doc="neg(x) -> neg(x) when x comes from exp (reads the graph beyond its pattern)",
    pre=lambda m: m.node("x").op == "exp",
)


def test_inexpressible_rules_are_listed_with_reasons_and_skipped() -> None:
    skipped = {s.rule: s.reason for s in inexpressible([*TEST_RULES, CONTEXT_RULE])}
    assert skipped == {"test_context_pre": REASONS["context"]}
    catalogue = {s.rule: s.reason for s in inexpressible(default_rules())}
    assert catalogue["cse_unary"] == REASONS["sharing"]
    assert catalogue["rematerialize_elementwise"] == REASONS["sharing"]
    sharding = [r for r in default_rules() if r.family == "sharding"]
    assert {s.reason for s in inexpressible(sharding, devices=2)} == {REASONS["sharding"]}
    trs, sk, _ = translate([*TEST_RULES, CONTEXT_RULE])
    assert [t.rule.name for t in trs] == [r.name for r in TEST_RULES]
    res = _sat(rules=[*TEST_RULES, CONTEXT_RULE])
    assert res.strategy_info["skipped_rules"] == [
        {"rule": "test_context_pre", "reason": REASONS["context"]}
    ]
    assert res.stop_reason == "exhausted" and res.reduction("latency") > 0


def test_a_wrong_rule_is_rejected_by_the_region_check() -> None:
    b = GraphBuilder("expadd")
    x, y = b.input("x", (8, 8)), b.input("y", (8, 8))
    g = b.build([b.exp(b.add(x, y))])
    res = _sat(g, rules=[WRONG_EXP, NEG_NEG])
    m = res.metrics()
    assert m["rule.test_wrong_exp_split.rejected"] >= 1
    assert m["rule.test_wrong_exp_split.fired"] == 0
    assert all(s.graph.hash == g.hash for s in res.pareto)


def test_catalogue_saturation_of_a_small_transformer_block_is_valid() -> None:
    b = GraphBuilder("block")
    x = b.input("x", (16, 32))
    h = b.layer_norm(x, b.param("g", (32,)), b.param("beta", (32,)), normalized_shape=(32,))
    q = b.linear(h, b.param("wq", (32, 32)), b.param("bq", (32,)))
    k = b.linear(h, b.param("wk", (32, 32)), b.param("bk", (32,)))
    s = b.mm(q, b.transpose(k, dim0=0, dim1=1))
    y = b.add(x, b.gelu(b.mm(s, h)))
    g = b.build([b.relu(y)])
    res = saturate(g, limits={"nodes": 2_000, "ilp_time": 5.0}, verify_cache=None)
    best = res.best("latency")
    assert best.cost["latency"] < res.input_cost["latency"]
    assert best.graph.input_names == g.input_names and best.graph.output_types == g.output_types
    assert _equal_on_random_inputs(g, best.graph, seed=3)


def test_bad_limits_and_engine_misuse_are_refused() -> None:
    with pytest.raises(SearchConfigError, match="nodes must be an int >= 1"):
        SaturationLimits(nodes=0)
    with pytest.raises(SearchConfigError, match="extraction must be one of"):
        SaturationLimits(extraction="lp")
    with pytest.raises(SearchConfigError, match="Unknown saturation limits"):
        SaturationLimits.coerce({"node": 5})
    with pytest.raises(SearchConfigError, match="ilp_time must be a number of seconds > 0"):
        search(CHAIN, {"strategy": "saturate"}, rules=TEST_RULES, saturation={"ilp_time": -1})
    cfg = SearchConfig(strategy="saturate")
    ctx = Context(CHAIN, TEST_RULES, np.full(3, 1 / 3), cfg, "h100", None)
    with pytest.raises(SearchError, match="does not step an Engine"):
        Engine(ctx, 0).step()


def test_graphs_nothing_checked_are_labelled_none_not_regions() -> None:
    """Without region checks and without the whole-graph check, no check ran: the graphs say
    ``checked="none"`` (they said "regions"), and the metrics count them. A graph that differs
    from the input is never labelled "input", even where its extraction recorded no steps
    (here: double negations merged away, which creates no e-node), and the whole-graph check
    runs on it."""
    res = _sat(limits=SaturationLimits(verify=False), final_check=False)
    rewritten = [s for s in res.pareto if s.graph.digest != CHAIN.digest]
    assert rewritten and all(s.checked == "none" for s in rewritten)
    assert res.metrics()["final_check.none"] == len(rewritten)
    checked = _sat(final_check=False)
    assert all(s.checked == "regions" for s in checked.pareto if s.graph.digest != CHAIN.digest)
    assert "final_check.none" not in checked.metrics()
    whole = _sat()
    assert all(
        s.checked in ("reduced", "real") for s in whole.pareto if s.graph.digest != CHAIN.digest
    )
    assert whole.final_checks  # it ran
