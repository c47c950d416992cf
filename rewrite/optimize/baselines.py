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
"""

from __future__ import annotations

import heapq
import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from rewrite.optimize.engine import Engine, Entry

__all__ = ["baseline_step", "scalar"]


def scalar(engine: Engine, entry: Entry) -> float:
    """Mean of the entry's objectives normalized by the input's cost."""
    return float(np.mean(entry.y / engine.ctx.scale))


@dataclass
class _Expansion:
    """Neighbors of one graph still to evaluate."""

    entry: Entry
    todo: list[tuple[int, int]]
    best: Entry | None = None


@dataclass
class _State:
    expansion: _Expansion | None = None
    heap: list[tuple[float, int, Entry]] = field(default_factory=list)
    counter: itertools.count = field(default_factory=itertools.count)


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
    from rewrite.optimize.result import Step

    rule = engine.ctx.rules[ri]
    return engine.entry(
        parent, graph, c, table, [Step(rule.name, site)], [(rule, parent.graph, site)]
    )


def baseline_step(engine: Engine) -> bool:
    """One step of the configured baseline; returns whether the frontier improved."""
    state = engine._strategy_state
    if state is None:
        state = engine._strategy_state = _State()
        state.heap.append((scalar(engine, engine.root), next(state.counter), engine.root))
    engine.steps += 1
    engine.stats.steps += 1
    if engine.config.strategy == "greedy":
        return _greedy(engine, state)
    return _best_first(engine, state)


def _greedy(engine: Engine, state: _State) -> bool:
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
            engine.exhausted = True
        elif engine.verify(best):
            state.expansion = _Expansion(best, _neighbors(engine, best, True))
        else:
            engine.exhausted = True
    return improved


def _best_first(engine: Engine, state: _State) -> bool:
    exp = state.expansion
    while exp is None or not exp.todo:
        if not state.heap:
            engine.exhausted = True
            return False
        _, _, entry = heapq.heappop(state.heap)
        exp = state.expansion = _Expansion(entry, _neighbors(engine, entry, False)[::-1])
    child = _neighbor(engine, exp)
    if child is None:
        return False
    accepted, improved = engine.evaluate(child)
    if accepted:
        heapq.heappush(state.heap, (scalar(engine, child), next(state.counter), child))
        cap = 20 * engine.config.population
        if len(state.heap) > cap:
            state.heap = heapq.nsmallest(cap, state.heap)
            heapq.heapify(state.heap)
    return improved
