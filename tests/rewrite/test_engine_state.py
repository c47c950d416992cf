"""The engine's explicit state: snapshots, round trips, and restored engines continuing exactly."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rewrite.errors import SearchError
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.engine import Context, Engine, EngineState
from rewrite.optimize.runner import make_verifier
from rewrite.optimize.strategies import step_strategy
from tests.rewrite.search_rules import TEST_RULES, chain_graph

CHAIN = chain_graph([128, 8, 128, 8, 128, 8, 128], negs=2)


def _ctx(**knobs) -> Context:
    cfg = SearchConfig(**{"max_steps": 200, "epsilon": 0.0, **knobs})
    prior = np.full(len(TEST_RULES), 1.0 / len(TEST_RULES))
    return Context(CHAIN, TEST_RULES, prior, cfg, "h100", make_verifier(cfg.seed, None))


def _steps(engine: Engine, n: int) -> list[bool]:
    return [engine.step() for _ in range(n) if not engine.exhausted]


def _digests(entries) -> list[bytes]:
    return [e.graph.digest for e in entries]


def _summary(engine: Engine) -> dict:
    """Everything a continued search must reproduce (timings and entry identities aside)."""
    st = engine.state()
    return {
        "population": _digests(st.population),
        "frontier": _digests(st.frontier),
        "improvements": _digests(st.improvements),
        "seen": st.seen,
        "credit": st.credit,
        "rng": st.rng_state,
        "steps": st.steps,
        "trace": [(s, hv) for s, _, hv in st.hv_trace],
        "hv": engine.hv,
        "exhausted": st.exhausted,
        "verified": [e.verified for e in st.population],
    }


def test_state_round_trips() -> None:
    ctx = _ctx(seed=3)
    engine = Engine(ctx, 3)
    _steps(engine, 40)
    state = engine.state()
    again = Engine.from_state(ctx, state)
    assert again.state() == state
    assert again.hv == engine.hv and again.root is engine.root


def test_state_is_a_snapshot() -> None:
    engine = Engine(_ctx(seed=1), 1)
    _steps(engine, 10)
    state = engine.state()
    frozen = (state.population, state.seen, state.credit, dict(state.rng_state), state.steps)
    _steps(engine, 30)
    assert (state.population, state.seen, state.credit, dict(state.rng_state), state.steps) == (
        frozen
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        state.steps = 0  # type: ignore[misc]


def test_initial_state_is_the_new_engines_state() -> None:
    ctx = _ctx(seed=2)
    new, restored = Engine(ctx, 2), Engine.from_state(ctx, Engine.initial_state(ctx, 2))
    assert _summary(restored) == _summary(new)  # entries compare by identity: digests here


@pytest.mark.parametrize("strategy", ["stochastic", "greedy", "best_first"])
def test_restored_engine_continues_exactly(strategy: str) -> None:
    """n steps, snapshot, restore on a new engine, k more steps == n + k steps in one go."""
    n, k = 25, 35
    step = step_strategy(strategy)
    whole = Engine(_ctx(seed=5, strategy=strategy), 5, step)
    improved_whole = _steps(whole, n + k)
    first = Engine(_ctx(seed=5, strategy=strategy), 5, step)
    improved_first = _steps(first, n)
    rest = Engine.from_state(first.ctx, first.state(), step)
    improved_rest = _steps(rest, k)
    assert improved_first + improved_rest == improved_whole
    assert _summary(rest) == _summary(whole)
    assert rest.stats.steps == len(improved_rest)  # counters start at zero on a restored engine


def test_restore_replaces_state_in_place() -> None:
    ctx = _ctx(seed=4)
    engine, other = Engine(ctx, 4), Engine(ctx, 9)
    _steps(engine, 20)
    other.restore(engine.state())
    assert other.state() == engine.state()
    assert _steps(other, 15) == _steps(engine, 15)


def test_bad_states_are_clear_errors() -> None:
    ctx = _ctx(seed=0)
    state = Engine(ctx, 0).state()
    with pytest.raises(SearchError, match="one entry per rule"):
        Engine.from_state(ctx, dataclasses.replace(state, credit=state.credit[:-1]))
    with pytest.raises(SearchError, match="at least the root"):
        EngineState(state.root, (), (), frozenset(), state.credit, state.rng_state)
