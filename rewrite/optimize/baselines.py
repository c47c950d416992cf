"""Baselines in the same engine: greedy hill climbing and TASO-style best-first search.

Both use the engine's rules, cost model, verification, deduplication and Pareto archive, and
ignore the rule priors and credit (they enumerate every site of every rule). One step evaluates
one neighbor, so step budgets and steps per second compare directly with the stochastic search.
Costs are scalarized as the mean of the objectives normalized by the input's cost.

* ``greedy``: steepest-descent hill climbing. The neighbors of the current graph (one rewrite
  each) are evaluated one per step in a random order; once all are, the search moves to the
  best one if it lowers the scalarized cost, else it has converged (``exhausted``).
* ``best_first``: TASO's backtracking search. A heap holds every kept graph by scalarized cost;
  the best is popped and its neighbors evaluated one per step; a neighbor is kept (pushed) unless
  some frontier point times ``alpha`` is at most its cost everywhere (the engine's alpha test,
  TASO's ``cost < alpha * best`` for vectors). The heap holds at most ``20 * population`` graphs
  (the worst are dropped).

Each is a `rewrite.optimize.engine.StepStrategy` (`Greedy`, `BestFirst`) that the engine steps.
A baseline's own state (the expansion under way, the heap) is a `BaselineState`, passed in and
returned by its ``step``; the engine keeps it in its `rewrite.optimize.engine.EngineState`.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from rewrite.errors import SearchError
from rewrite.optimize.engine import Engine
from rewrite.optimize.result import Step
from rewrite.optimize.state import Entry, StrategyState

__all__ = ["BaselineState", "BestFirst", "Greedy", "scalar"]


def scalar(engine: Engine, entry: Entry) -> float:
    """Mean of the entry's objectives normalized by the input's cost."""
    return float(np.mean(entry.y / engine.ctx.scale))


@dataclass
class _Expansion:
    """Neighbors of one graph still to evaluate."""

    entry: Entry
    todo: list[tuple[int, int]]
    best: Entry | None = None

    def copy(self) -> _Expansion:
        return _Expansion(self.entry, list(self.todo), self.best)


@dataclass
class BaselineState:
    """Search state of a baseline: the expansion under way and (best-first) the heap.

    Attributes:
        expansion: The graph whose neighbors are being evaluated, None before the first.
        heap: ``(scalarized cost, push number, entry)`` of the kept graphs (best-first).
        pushed: Entries pushed so far (the tie-breaking push number of the next one).
    """

    expansion: _Expansion | None = None
    heap: list[tuple[float, int, Entry]] = field(default_factory=list)
    pushed: int = 0

    def copy(self) -> BaselineState:
        """A copy that later steps do not change (entries are shared)."""
        exp = None if self.expansion is None else self.expansion.copy()
        return BaselineState(exp, list(self.heap), self.pushed)

    def push(self, cost: float, entry: Entry) -> None:
        """Push ``entry`` on the heap with its scalarized ``cost``."""
        heapq.heappush(self.heap, (cost, self.pushed, entry))
        self.pushed += 1


def _neighbors(engine: Engine, entry: Entry, shuffle: bool) -> list[tuple[int, int]]:
    sites = engine.sites_of(entry)
    todo = [(ri, si) for ri, name in enumerate(engine.ctx.names) for si in range(len(sites[name]))]
    for name in engine.ctx.names:
        if sites[name]:
            engine.stats.count(name, "applicable")
    if shuffle:
        order = engine.rng.permutation(len(todo))
        todo = [todo[i] for i in order]
    return todo


def _neighbor(engine: Engine, exp: _Expansion) -> Entry | None:
    parent = exp.entry
    ri, si = exp.todo.pop()
    sites = engine.sites_of(parent)
    if si >= len(sites[engine.ctx.names[ri]]):
        return None  # a stale site was pruned from the table
    out = engine.rewrite(parent.graph, parent.cost, sites, ri, si)
    if out is None:
        return None
    graph, c, table, site = out
    rule = engine.ctx.rules[ri]
    return engine.entry(
        parent, graph, c, table, [Step(rule.name, site)], [(rule, parent.graph, site)]
    )


def _baseline_state(engine: Engine, state: StrategyState | None, name: str) -> BaselineState:
    """``state``, or a new `BaselineState` holding the input graph for the first step.

    Raises:
        SearchError: If ``state`` is not a `BaselineState`.
    """
    if state is None:
        new = BaselineState()
        new.push(scalar(engine, engine.root), engine.root)
        return new
    if not isinstance(state, BaselineState):
        raise SearchError(
            f"A baseline continues from a BaselineState, but got {type(state).__name__}; "
            f"restore a state taken from an engine with strategy {name!r}."
        )
    return state


@dataclass(frozen=True)
class Greedy:
    """Steepest-descent hill climbing (``greedy``, see the module docstring)."""

    name: ClassVar[str] = "greedy"

    def step(self, engine: Engine, state: StrategyState | None) -> tuple[BaselineState, bool, bool]:
        """One neighbor evaluated (see `rewrite.optimize.engine.StepStrategy.step`; ``state``
        is updated in place).

        Raises:
            SearchError: If ``state`` is not a `BaselineState`.
        """
        own = _baseline_state(engine, state, self.name)
        return own, *_greedy(engine, own)


@dataclass(frozen=True)
class BestFirst:
    """TASO's backtracking best-first search (``best_first``, see the module docstring)."""

    name: ClassVar[str] = "best_first"

    def step(self, engine: Engine, state: StrategyState | None) -> tuple[BaselineState, bool, bool]:
        """One neighbor evaluated (see `rewrite.optimize.engine.StepStrategy.step`; ``state``
        is updated in place).

        Raises:
            SearchError: If ``state`` is not a `BaselineState`.
        """
        own = _baseline_state(engine, state, self.name)
        return own, *_best_first(engine, own)


def _greedy(engine: Engine, state: BaselineState) -> tuple[bool, bool]:
    if state.expansion is None:
        state.expansion = _Expansion(engine.root, _neighbors(engine, engine.root, True))
    exp = state.expansion
    improved = False
    if exp.todo:
        child = _neighbor(engine, exp)
        if child is not None:
            accepted, improved = engine.evaluate(child)
            if accepted and (exp.best is None or scalar(engine, child) < scalar(engine, exp.best)):
                exp.best = child
    if not exp.todo:
        best = exp.best
        if best is None or scalar(engine, best) >= scalar(engine, exp.entry) - 1e-15:
            return improved, True
        if not engine.verify(best):
            return improved, True
        state.expansion = _Expansion(best, _neighbors(engine, best, True))
    return improved, False


def _best_first(engine: Engine, state: BaselineState) -> tuple[bool, bool]:
    exp = state.expansion
    while exp is None or not exp.todo:
        if not state.heap:
            return False, True
        _, _, entry = heapq.heappop(state.heap)
        exp = state.expansion = _Expansion(entry, _neighbors(engine, entry, False)[::-1])
    child = _neighbor(engine, exp)
    if child is None:
        return False, False
    accepted, improved = engine.evaluate(child)
    if accepted:
        state.push(scalar(engine, child), child)
        cap = 20 * engine.config.population
        if len(state.heap) > cap:
            state.heap = heapq.nsmallest(cap, state.heap)
            heapq.heapify(state.heap)
    return improved, False
