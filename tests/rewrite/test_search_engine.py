"""The search engine on small graphs with test-only rules: invariants, baselines, bad input."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest

from rewrite.builder import GraphBuilder
from rewrite.costmodel import cost
from rewrite.errors import PriorsError, SearchConfigError, SearchError
from rewrite.optimize.api import search
from rewrite.optimize.config import FINAL_CHECK_SHARE, SearchConfig
from rewrite.optimize.pareto import dominates, non_dominated
from rewrite.optimize.result import RULE_COUNTERS
from rewrite.verify import Verifier
from tests.rewrite.search_rules import NEG_NEG, TEST_RULES, WRONG_DROP_NEG, WRONG_EXP, chain_graph

CHAIN = chain_graph([256, 8, 256, 8, 256, 8, 256], negs=2)


def _run(graph=CHAIN, rules=TEST_RULES, **knobs):
    knobs.setdefault("max_steps", 120)
    return search(graph, SearchConfig(**knobs), rules=rules, verify_cache=None)


def _replay(graph, steps, rules):
    by_name = {r.name: r for r in rules}
    for s in steps:
        graph = by_name[s.rule].apply(graph, s.site)
    return graph


@pytest.mark.parametrize("strategy", ["stochastic", "greedy", "best_first"])
def test_result_invariants(strategy: str) -> None:
    res = _run(strategy=strategy, seed=3)
    Y = np.array([s.objectives for s in res.pareto])
    assert len(res.pareto) >= 1 and non_dominated(Y).all()
    hv = [t[2] for t in res.hv_trace]
    assert all(b >= a - 1e-12 for a, b in zip(hv, hv[1:]))
    assert res.hypervolume > res.hv_trace[0][2]  # the chain order can be improved
    assert res.reference == pytest.approx(tuple(1.1 * res.input_cost[o] for o in res.objectives))
    checker = Verifier(mode="field", tests=2, seed=11)
    for sol in res.pareto:
        assert _replay(CHAIN, sol.steps, TEST_RULES).hash == sol.graph.hash
        assert checker.check(CHAIN, sol.graph).ok
        assert cost(sol.graph).as_dict()["latency"] == pytest.approx(sol.cost["latency"])
        assert res.final_checks.get(sol.graph.hash, True)
    assert res.reduction("latency") > 0.3


def test_metrics_names_and_counts() -> None:
    res = _run(seed=1, verify_rate=1.0)
    m = res.metrics()
    for rule in TEST_RULES:
        for c in RULE_COUNTERS:
            assert f"rule.{rule.name}.{c}" in m
    fired = sum(m[f"rule.{r.name}.fired"] for r in TEST_RULES)
    assert fired > 0 and m["steps"] == 120
    for r in TEST_RULES:
        n = r.name
        assert m[f"rule.{n}.improved"] <= m[f"rule.{n}.accepted"]
        assert m[f"rule.{n}.fired"] <= m[f"rule.{n}.applicable"]
    assert all(isinstance(v, float) and np.isfinite(v) for v in m.values())
    for key in (
        "time.match",
        "time.apply",
        "time.verify",
        "time.cost",
        "steps_per_s",
        "cache.dedupe.hit_rate",
        "population.size",
        "frontier.size",
        "hypervolume",
    ):
        assert key in m
    assert sum(res.priors.values()) == pytest.approx(1.0)


@pytest.mark.parametrize("verify_rate", [1.0, 0.0])
def test_wrong_rules_are_rejected_and_never_reported(verify_rate: float) -> None:
    b = GraphBuilder("expadd")
    x, y = b.input("x", (16, 16)), b.input("y", (16, 16))
    w = b.param("w", (16, 16))
    g = b.build([b.neg(b.mm(b.exp(b.add(x, y)), w)), b.neg(b.neg(y))])
    rules = [NEG_NEG, WRONG_EXP, WRONG_DROP_NEG]
    res = search(
        g,
        SearchConfig(max_steps=40, verify_rate=verify_rate, objectives=("latency", "kernels")),
        priors={"test_wrong_exp_split": 0.4, "test_wrong_drop_neg": 0.4, "test_neg_neg": 0.2},
        rules=rules,
        verify_cache=None,
    )
    m = res.metrics()
    assert m["rule.test_wrong_drop_neg.rejected"] > 0
    for wrong in ("test_wrong_exp_split", "test_wrong_drop_neg"):
        assert all(wrong not in s.rules for s in res.pareto)
    if verify_rate == 1.0:
        assert m["rule.test_wrong_drop_neg.accepted"] == 0
    checker = Verifier(mode="field", tests=2, seed=3)
    assert all(checker.check(g, s.graph).ok for s in res.pareto)
    assert res.reduction("kernels") > 0  # the sound rule still fires


def test_memory_cap_region_is_never_reported() -> None:
    base = cost(CHAIN).peak_memory
    free = _run(seed=2, max_steps=150)
    best_peak = min(s.cost["peak_memory"] for s in free.pareto)
    cap = (base + best_peak) / 2
    res = _run(seed=2, max_steps=150, memory_cap=cap)
    assert res.pareto and all(s.cost["peak_memory"] <= cap for s in res.pareto)
    assert _run(seed=2, max_steps=30, memory_cap=best_peak / 4).pareto == []


def test_stop_rules() -> None:
    assert _run(max_steps=7).stop_reason == "steps"
    conv = _run(max_steps=10_000, window=20, epsilon=1e-3)
    assert conv.stop_reason in ("converged", "exhausted") and conv.stats.steps < 10_000
    timed = _run(max_steps=10**9, time_budget=0.5, epsilon=0.0)
    assert timed.stop_reason in ("time", "exhausted")  # the bound itself: the fake-clock test


def test_bad_input() -> None:
    with pytest.raises(SearchError, match="rewrite Graph"):
        search("gpt2", rules=TEST_RULES)  # type: ignore[arg-type]
    with pytest.raises(SearchConfigError, match="not cost-vector entries"):
        _run(objectives=("latency", "speed"))
    with pytest.raises(PriorsError, match="unknown rules"):
        search(CHAIN, priors={"nope": 1.0}, rules=TEST_RULES, verify_cache=None)
    with pytest.raises(SearchError, match="distinct"):
        search(CHAIN, rules=[NEG_NEG, NEG_NEG], verify_cache=None)
    with pytest.raises(SearchConfigError, match="SearchConfig"):
        search(CHAIN, config=3, rules=TEST_RULES)  # type: ignore[arg-type]


def test_frontier_dominance_is_strict() -> None:
    res = _run(seed=5, objectives=("latency", "peak_memory", "kernels"))
    Y = [np.array(s.objectives) for s in res.pareto]
    for a in Y:
        assert not any(dominates(b, a) for b in Y)


def test_sharded_children_are_costed_per_device() -> None:
    from rewrite.mesh_cost import shard_cost
    from rewrite.rules import catalogue

    rule = next(r for r in catalogue() if r.name == "megatron_mlp_2")
    g = rule.sample_graph(0, lo=256, hi=256)  # compute-bound: sharding pays off
    res = search(
        g,
        SearchConfig(
            max_steps=10, objectives=("latency", "peak_memory", "communication"), devices=2
        ),
        rules=[rule],
        verify_cache=None,
    )
    sharded = [s for s in res.pareto if s.steps]
    assert sharded, "the Megatron split halves per-device compute and must be on the frontier"
    for sol in sharded:
        sc = shard_cost(sol.graph)
        assert sol.cost["latency"] == pytest.approx(sc.latency)
        assert sol.cost["peak_memory"] == pytest.approx(max(sc.peak_memory))
        assert sol.cost["communication"] == pytest.approx(sc.communication) and sc.communication > 0
    capped = search(
        g,
        SearchConfig(
            max_steps=10, memory_cap=min(s.cost["peak_memory"] for s in sharded), devices=2
        ),
        rules=[rule],
        verify_cache=None,
    )
    assert capped.pareto and all(s.steps for s in capped.pareto)  # the input is over the cap


def test_reported_graphs_are_checked_whole_on_reduced_shapes() -> None:
    res = _run(seed=3)
    levels = {s.checked for s in res.pareto if s.steps}
    assert levels == {"reduced"} and all(res.final_checks.values())
    m = res.metrics()
    assert m["final_check.reduced"] == len([s for s in res.pareto if s.steps])
    assert m["final_check.regions"] == m["final_check.failed"] == 0
    real = _run(seed=3, final_check_real=True)
    assert {s.checked for s in real.pareto if s.steps} == {"real"}
    off = _run(seed=3, final_check=False)
    assert {s.checked for s in off.pareto if s.steps} == {"regions"} and not off.final_checks


def test_time_budget_bounds_the_call_and_marks_unchecked_graphs(monkeypatch) -> None:
    """A fake clock (1 ms per reading) makes the timing deterministic."""
    ticks = itertools.count()
    monkeypatch.setattr(time, "perf_counter", lambda: next(ticks) * 1e-3)
    budget = 0.1  # its 10 ms reserve holds fewer readings than a whole-graph check
    res = _run(max_steps=10**9, time_budget=budget, epsilon=0.0, seed=3)
    assert res.stop_reason == "time" and res.stats.steps > 0
    assert max(t for _, t, _ in res.hv_trace) <= budget * (1 - FINAL_CHECK_SHARE)
    assert res.wall_time <= budget + 0.02  # a few clock readings after the last check
    rewritten = [s for s in res.pareto if s.steps]
    assert rewritten and {s.checked for s in rewritten} <= {"reduced", "regions"}
    assert "regions" in {s.checked for s in rewritten}  # the reserve does not fit every check
    assert all(res.final_checks.get(s.graph.hash, True) for s in rewritten)
    unchecked = sum(s.checked == "regions" for s in rewritten)
    assert res.metrics()["final_check.regions"] == unchecked
