"""The search state of an island (`rewrite.optimize.engine`): the population's `Entry`, and the
`EngineState` snapshot that `Engine.state` returns and `Engine.from_state` / `Engine.restore`
take (the only way state enters or leaves an engine: the parallel islands and the baselines use
it too).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from rewrite.cost import CostVector
from rewrite.errors import SearchError
from rewrite.ir import Graph
from rewrite.optimize.matching import SiteTable
from rewrite.optimize.result import Step
from rewrite.rules.base import Rule, Site

__all__ = ["EngineState", "Entry", "StrategyState"]


@dataclass(eq=False)
class Entry:
    """A graph in the population.

    Attributes:
        graph: The graph.
        cost: Its cost vector.
        y: Raw objective values.
        steps: Rewrites from the input graph.
        feasible: Inside the constraint region.
        verified: Every rewrite from the input has passed a region check.
        parent: The entry it was made from (dropped once verified).
        pending: ``(rule, graph before, site)`` of its own unverified rewrites.
        sites: Its site table (computed on first use).
        costs: Its named costs (per-device figures for sharded graphs, see `Context.measure`).
    """

    graph: Graph
    cost: CostVector
    y: np.ndarray
    steps: tuple[Step, ...]
    feasible: bool
    verified: bool
    parent: Entry | None = None
    pending: tuple[tuple[Rule, Graph, Site], ...] = ()
    sites: SiteTable | None = field(default=None, repr=False)
    costs: dict[str, float] = field(default_factory=dict)


class StrategyState(Protocol):
    """Search state of a non-stochastic strategy (see `rewrite.optimize.baselines`)."""

    def copy(self) -> StrategyState:
        """A copy that later steps of the original do not change (entries may be shared)."""
        ...


@dataclass(frozen=True)
class EngineState:
    """The whole search state of one `Engine` (see `Engine.state`).

    A snapshot: later steps of the engine it came from do not change it, and restoring it does
    not tie the restored engine to it. Entries are shared, not copied: an `Entry`'s graph, cost
    and history never change, only its verification marks (``verified``, ``pending``,
    ``parent``) and its cached site table, which a restored engine reads the same way.

    Attributes:
        root: The input graph's entry (never dropped from the population).
        population: The population, in order (order matters for seeded draws).
        frontier: The Pareto archive (verified, feasible entries).
        seen: Digests of every graph evaluated so far (the deduplication set).
        credit: ``n``-dim online credit, aligned with the context's rules.
        rng_state: ``bit_generator.state`` of the engine's `numpy.random.Generator`.
        steps: Steps taken.
        hv_trace: ``(step, seconds, hypervolume)`` each time the frontier changed.
        improvements: Frontier entries not yet reported to other islands.
        exhausted: No step can make a new child (the search space is spent).
        strategy: The baseline strategy's own state (None for ``stochastic`` or before its
            first step).
    """

    root: Entry
    population: tuple[Entry, ...]
    frontier: tuple[Entry, ...]
    seen: frozenset[bytes]
    credit: tuple[float, ...]
    rng_state: Mapping[str, Any]
    steps: int = 0
    hv_trace: tuple[tuple[int, float, float], ...] = ()
    improvements: tuple[Entry, ...] = ()
    exhausted: bool = False
    strategy: StrategyState | None = None

    def __post_init__(self) -> None:
        if not self.population:
            raise SearchError(
                "An EngineState's population must hold at least the root entry, but it is "
                "empty; pass population=(root,)."
            )
