"""The saturation loop and its result: match in egglog, apply in Python, extract, check.

Each iteration runs every translated rule's match once in egglog (seminaive: only matches that
involve what changed), reads the new matches, and applies them in a deterministic order
(`rewrite.optimize.saturate.apply`) until a limit is reached; matches left over wait for the
next iteration. The e-graph is saturated when an iteration finds no new match and none waits.
Then the graph is extracted for each objective (greedy; and by ILP for the first objective when
it finishes in time) and the extracted graphs, with the input graph, form the reported Pareto
set, checked whole against the input graph as the engine checks its frontier.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np

from rewrite.costmodel import cost
from rewrite.errors import GraphError, SearchError
from rewrite.ir import Graph
from rewrite.optimize.config import FINAL_CHECK_SHARE, SearchConfig
from rewrite.optimize.engine import Context
from rewrite.optimize.pareto import hypervolume, non_dominated
from rewrite.optimize.result import RunStats, SearchResult, Step
from rewrite.optimize.runner import build_result
from rewrite.optimize.saturate.apply import Applier
from rewrite.optimize.saturate.egraph import Snapshot, TermGraph
from rewrite.optimize.saturate.extract import (
    Costs,
    build_graph,
    dag_cost,
    greedy,
    ilp,
    node_costs,
)
from rewrite.optimize.saturate.limits import SaturationLimits
from rewrite.optimize.saturate.translate import Translation, translate
from rewrite.optimize.state import Entry, Verification
from rewrite.rules.base import Rule

__all__ = ["FIELDS", "objective_weights", "run_saturation"]

logger = logging.getLogger("rewrite.optimize.api")

#: The e-node cost fields extraction weighs (`rewrite.optimize.saturate.extract.node_costs`).
FIELDS = ("latency", "flops", "bytes", "kernels", "peak_memory")
#: Share of the saturation's time budget spent matching and applying (the rest: extraction).
SATURATE_SHARE = 0.6


def objective_weights(objective: str, input_cost: dict[str, float]) -> np.ndarray | None:
    """Weights of the cost fields that price ``objective`` (normalized by the input's value), or
    None for an objective no field prices (``communication``)."""
    if objective not in FIELDS:
        return None
    w = np.zeros(len(FIELDS))
    w[FIELDS.index(objective)] = 1.0 / max(input_cost[objective], 1e-30)
    return w


class _Loop:
    """State of one saturation (see the module docstring)."""

    def __init__(
        self,
        graph: Graph,
        trs: list[Translation],
        facts: str,
        limits: SaturationLimits,
        verifier: Any,
        stats: RunStats,
    ) -> None:
        self.trs, self.limits, self.stats = trs, limits, stats
        self.tg = TermGraph(trs, facts)
        self.handles, self.roots = self.tg.add_graph(graph)
        self.applier = Applier(self.tg, verifier, stats, limits.expand)
        self.backlog: list[deque[tuple[int, ...]]] = [deque() for _ in trs]
        self.seen: list[set[tuple[int, ...]]] = [set() for _ in trs]
        self.iterations = 0
        self.snap: Snapshot | None = None

    def _stop(self, deadline: float | None, max_steps: int) -> str | None:
        if deadline is not None and time.perf_counter() >= deadline:
            return "time"
        if self.stats.steps >= max_steps:
            return "steps"
        if self.e_nodes() >= self.limits.nodes:
            return "nodes"
        return None

    def _new_matches(self, snap: Snapshot) -> int:
        n = 0
        for k, tr in enumerate(self.trs):
            rows = snap.matches.get(tr.relation, [])
            fresh = sorted(r for r in rows if r not in self.seen[k])
            self.seen[k].update(fresh)
            self.backlog[k].extend(fresh)
            n += len(fresh)
        return n

    def _batch(self) -> deque[tuple[int, tuple[int, ...]]]:
        """This iteration's matches: up to ``limits.matches`` of each rule's backlog, rules
        taken in turn (so a time limit cuts every rule's share, not the last rules')."""
        multi = self.iterations <= self.limits.multi_iterations
        take: list[list[tuple[int, tuple[int, ...]]]] = []
        for k, b in enumerate(self.backlog):
            if not multi and len(self.trs[k].roots) > 1:
                b.clear()  # Tensat's iter_multi: multi-root rules run in the first iterations
                continue
            take.append([(k, b.popleft()) for _ in range(min(len(b), self.limits.matches))])
        return deque(m for group in itertools.zip_longest(*take) for m in group if m is not None)

    def e_nodes(self) -> int:
        """E-nodes now (those of the last snapshot plus the nodes added since: an upper bound)."""
        base = self.snap.nodes if self.snap is not None else 0
        return base + self.tg.added

    def waiting(self) -> int:
        """Matches found but not applied yet."""
        return sum(len(b) for b in self.backlog)

    def run(self, deadline: float | None, max_steps: int) -> str:
        """Saturate until a limit; returns the stop reason."""
        stats = self.stats
        while True:
            if self.iterations >= self.limits.iterations:
                return "iterations"
            reason = self._stop(deadline, max_steps)
            if reason is not None:
                return reason
            t0 = time.perf_counter()
            self.tg.run_matches()
            self.snap = snap = self.tg.snapshot([t.relation for t in self.trs])
            fresh = self._new_matches(snap)
            stats.times["match"] += time.perf_counter() - t0
            self.iterations += 1
            if not fresh and not self.waiting():
                return "exhausted"
            todo = self._batch()
            while todo:
                reason = self._stop(deadline, max_steps)
                if reason is not None:
                    for k, row in reversed(todo):
                        self.backlog[k].appendleft(row)
                    return reason
                k, row = todo.popleft()
                self.applier.apply(snap, self.trs[k], row)

    def final_snapshot(self) -> Snapshot:
        """The e-graph's classes after the last additions."""
        self.snap = self.tg.snapshot([])
        return self.snap


def _deadlines(cfg: SearchConfig, limits: SaturationLimits, t0: float) -> tuple[Any, Any]:
    """When saturation stops and when extraction must end (None: no limit)."""
    end = None
    if cfg.time_budget is not None:
        end = t0 + cfg.time_budget * (1.0 - (FINAL_CHECK_SHARE if cfg.final_check else 0.0))
    sat = None if limits.time is None else t0 + limits.time
    if end is not None:
        share = t0 + (end - t0) * SATURATE_SHARE
        sat = share if sat is None else min(sat, share)
    return sat, end


def _extractions(
    loop: _Loop,
    ctx: Context,
    limits: SaturationLimits,
    end: float | None,
    details: dict[str, Any],
) -> list[tuple[str, Graph, tuple[Step, ...]]]:
    """Graphs extracted for each objective: ``(label, graph, steps)``."""
    snap = loop.final_snapshot()
    costs = node_costs(loop.tg, snap, ctx.device)
    roots = [snap.class_of[h] for h in loop.roots]
    out: list[tuple[str, Graph, tuple[Step, ...]]] = []
    for j, obj in enumerate(ctx.objectives):
        w = objective_weights(obj, ctx.input_costs)
        if w is None:
            continue
        out += _extract_one(loop, ctx, snap, costs, roots, w, obj, j == 0, limits, end, details)
    details["e_nodes"] = snap.nodes
    details["e_classes"] = len(snap.members)
    return out


def _extract_one(
    loop: _Loop,
    ctx: Context,
    snap: Snapshot,
    costs: Costs,
    roots: list[int],
    w: np.ndarray,
    obj: str,
    primary: bool,
    limits: SaturationLimits,
    end: float | None,
    details: dict[str, Any],
) -> list[tuple[str, Graph, tuple[Step, ...]]]:
    t0 = time.perf_counter()
    choices = [("greedy", greedy(costs, snap, w))]
    details.setdefault("seconds_greedy", 0.0)
    details["seconds_greedy"] += time.perf_counter() - t0
    if primary and limits.extraction == "ilp":
        budget = limits.ilp_time
        if end is not None:
            budget = min(budget, max(end - time.perf_counter(), 0.0))
        if budget <= 0:
            details["ilp"] = "skipped: no time left; greedy used"
        else:
            upper = dag_cost(costs, snap, choices[0][1], roots, w)
            res = ilp(costs, snap, roots, w, budget, upper)
            details["seconds_ilp"] = res.seconds
            details["ilp"] = res.status if res.choice is not None else f"{res.status}; greedy used"
            if res.choice is not None:
                choices.append(("ilp", res.choice))
    out = []
    for method, choice in choices:
        try:
            g, used = build_graph(loop.tg, snap, costs, choice, ctx.graph, loop.handles)
        except (SearchError, GraphError) as err:
            details[f"{method}_{obj}"] = f"failed: {err}"
            if method == "ilp":
                details["ilp"] = f"{details['ilp']}; its graph failed ({err}); greedy used"
            continue
        created = loop.applier.created
        steps = tuple(created[n] for n in sorted(used) if n in created)
        out.append((f"{method}:{obj}", g, steps))
    return out


def _entries(
    ctx: Context, graphs: Sequence[tuple[str, Graph, tuple[Step, ...]]]
) -> tuple[list[Entry], dict[str, dict[str, float]]]:
    """The non-dominated feasible entries among the input and ``graphs`` (deduplicated), and
    each extraction's cost vector by label."""
    costs, y, ok = ctx.measure(ctx.graph, ctx.input_cost, ())
    cands = [Entry(ctx.graph, ctx.input_cost, y, (), ok, Verification.done(0), costs=costs)]
    by_label: dict[str, dict[str, float]] = {}
    seen = {ctx.graph.digest}
    for label, g, steps in graphs:
        c = cost(g, ctx.device)
        costs, y, ok = ctx.measure(g, c, steps)
        by_label[label] = costs
        if g.digest in seen:
            continue
        seen.add(g.digest)
        cands.append(Entry(g, c, y, steps, ok, Verification.done(len(steps)), costs=costs))
    feas = [e for e in cands if e.feasible]
    if not feas:
        return [], by_label
    keep = non_dominated(np.stack([e.y for e in feas]))
    return [feas[i] for i in np.flatnonzero(keep)], by_label


def _trace(
    ctx: Context, frontier: Sequence[Entry], steps: int, t0: float
) -> list[tuple[int, float, float]]:
    """The hypervolume trace: the input alone, then the extracted frontier (when it differs)."""
    y0 = np.array([[ctx.input_costs[o] for o in ctx.objectives]]) / ctx.scale
    hv0 = hypervolume(y0, ctx.ref)
    hv = hypervolume(np.stack([e.y for e in frontier]) / ctx.scale, ctx.ref) if frontier else 0.0
    trace = [(0, 0.0, hv0)]
    if not math.isclose(hv, hv0):
        trace.append((steps, time.perf_counter() - t0, hv))
    return trace


def run_saturation(
    graph: Graph,
    rules: Sequence[Rule],
    config: SearchConfig,
    device: Any,
    verifier: Any,
    limits: SaturationLimits,
    t0: float,
) -> SearchResult:
    """Equality saturation of ``graph`` with ``rules``, extracted with the engine's cost model.

    Args:
        graph: The input graph.
        rules: The rules (those an e-graph cannot run are skipped and listed in the result).
        config: The search config: ``objectives``, ``time_budget`` (matching and applying stop
            at `SATURATE_SHARE` of the loop's share, extraction at the end of it, final checks
            after), ``max_steps`` (rewrites added), ``memory_cap``, ``final_check*``, ``devices``.
        device: Cost-model device.
        verifier: A `rewrite.verify.Verifier` (every rewrite is region-checked before it joins
            the e-graph when ``limits.verify``).
        limits: E-graph limits and the extraction method.
        t0: `time.perf_counter` at the start of the call.

    Returns:
        A `SearchResult`; ``strategy_info`` holds the e-graph's figures, the extraction used and
        its status, each extraction's cost vector, and the skipped rules with their reasons.
    """
    trs, skipped, facts = translate(rules, config.devices)
    stats = RunStats()
    prior = np.full(len(rules), 1.0 / len(rules))
    ctx = Context(graph, rules, prior, config, device, verifier)
    sat_end, end = _deadlines(config, limits, t0)
    loop = _Loop(graph, trs, facts, limits, verifier if limits.verify else None, stats)
    reason = loop.run(sat_end, config.max_steps)
    t_sat = time.perf_counter() - t0
    details: dict[str, Any] = {
        "iterations": loop.iterations,
        "stop": reason,
        "rewrites": stats.steps,
        "unions": loop.tg.unions,
        "matches_waiting": loop.waiting(),
        "seconds_saturation": t_sat,
        "skipped_rules": [s.as_dict() for s in skipped],
        "limits": limits.as_dict(),
    }
    t1 = time.perf_counter()
    try:
        graphs = _extractions(loop, ctx, limits, end, details)
    finally:
        loop.tg.close()
    frontier, by_label = _entries(ctx, graphs)
    stats.times["cost"] += time.perf_counter() - t1
    details["extracted"] = by_label
    details["seconds_to_extracted"] = time.perf_counter() - t0
    trace = _trace(ctx, frontier, stats.steps, t0)
    logger.debug("saturation: %s", {k: v for k, v in details.items() if k != "skipped_rules"})
    result = build_result(
        ctx, frontier, trace, stats, reason, t0, 1, len(frontier), regions_checked=limits.verify
    )
    result.strategy_info = details
    return result
