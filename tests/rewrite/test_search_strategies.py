"""Search strategies as a protocol: the registry the config's names select from, an engine
stepping a strategy it was given (one of the user's too, also on islands), and the engine
knowing no strategy but its own."""

from __future__ import annotations

import concurrent.futures as cf
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from rewrite.errors import SearchConfigError, SearchError
from rewrite.optimize.config import STRATEGIES, SearchConfig
from rewrite.optimize.engine import Context, Engine, StepStrategy
from rewrite.optimize.runner import make_verifier, run_engine
from rewrite.optimize.strategies import (
    STRATEGY_REGISTRY,
    EngineSearch,
    SearchProblem,
    get_strategy,
    step_strategy,
)
from tests.rewrite.search_rules import TEST_RULES, chain_graph
from tests.test_architecture import ROOT, import_graph

CHAIN = chain_graph([128, 8, 128, 8, 128, 8, 128], negs=2)
PRIOR = np.full(len(TEST_RULES), 1.0 / len(TEST_RULES))


@dataclass
class _Count:
    """A strategy's own state: how many steps it took."""

    n: int = 0

    def copy(self) -> _Count:
        return _Count(self.n)


@dataclass(frozen=True)
class _FromRoot:
    """A user's strategy: every child is one rewrite of the input graph."""

    name: ClassVar[str] = "from_root"

    def step(self, engine: Engine, state: _Count | None) -> tuple[_Count, bool, bool]:
        state = _Count() if state is None else state
        state.n += 1
        child = engine.make_child(engine.root, 1)
        return state, child is not None and engine.evaluate(child)[1], child is None


def _ctx(**knobs) -> Context:
    cfg = SearchConfig(**{"max_steps": 30, "epsilon": 0.0, **knobs})
    return Context(CHAIN, TEST_RULES, PRIOR, cfg, "h100", make_verifier(cfg.seed, None))


def test_the_registry_holds_every_strategy_the_config_names() -> None:
    assert sorted(STRATEGY_REGISTRY) == sorted(STRATEGIES)
    assert all(get_strategy(n).name == n for n in STRATEGIES)
    with pytest.raises(SearchConfigError, match="`strategy` must be one of"):
        get_strategy("annealing")
    with pytest.raises(SearchError, match="'saturate' does not step an Engine"):
        step_strategy("saturate")


def test_an_engine_steps_the_strategy_it_is_given() -> None:
    ctx = _ctx(seed=2)
    engine = Engine(ctx, 2, _FromRoot())
    reason = run_engine(engine, ctx.config, 0.0)
    assert reason in ("steps", "exhausted")
    state = engine.state()
    assert isinstance(state.strategy, _Count) and state.strategy.n == engine.steps > 0
    assert all(len(e.steps) <= 1 for e in engine.population)  # children of the root only
    # the state is a snapshot: the restored engine continues it, the snapshot stays put
    again = Engine.from_state(ctx, state, _FromRoot())
    again.step()
    assert state.strategy.n == engine.steps and again.state().strategy.n == engine.steps + 1


def test_an_engine_not_given_a_strategy_steps_only_its_own() -> None:
    Engine(_ctx(), 0).step()  # stochastic
    with pytest.raises(SearchError, match="step_strategy\\('greedy'\\)"):
        Engine(_ctx(strategy="greedy"), 0)


def test_islands_run_the_strategy_object_they_are_given() -> None:
    cfg = SearchConfig(max_steps=24, workers=2, island_steps=6, epsilon=0.0, seed=1)
    with cf.ThreadPoolExecutor(2) as pool:
        problem = SearchProblem(CHAIN, TEST_RULES, PRIOR, cfg, "h100", None, pool, False, None, 0.0)
        res = EngineSearch(_FromRoot()).run(problem)
    assert res.pareto and all(len(s.steps) <= 1 for s in res.pareto)


def test_the_engine_imports_no_strategy_but_its_own() -> None:
    _, graph = import_graph(ROOT, {"rewrite"})
    below = set(graph["rewrite.optimize.engine"])
    assert not below & {"rewrite.optimize.baselines", "rewrite.optimize.strategies"}
    assert "rewrite.optimize.engine" in graph["rewrite.optimize.baselines"]  # one way


def test_every_step_strategy_is_a_step_strategy() -> None:
    steps: list[StepStrategy] = [step_strategy(n) for n in STRATEGIES if n != "saturate"]
    assert [s.name for s in steps] == [n for n in STRATEGIES if n != "saturate"]
