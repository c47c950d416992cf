"""The search state of an island (`rewrite.optimize.engine`): the population's `Entry`, and the
`EngineState` snapshot that `Engine.state` returns and `Engine.from_state` / `Engine.restore`
take (the only way state enters or leaves an engine: the parallel islands and the baselines use
it too).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from rewrite.costmodel import CostVector
from rewrite.errors import SearchError
from rewrite.ir import Graph
from rewrite.optimize.matching import SiteTable
from rewrite.optimize.result import Step
from rewrite.rules.base import Rule, Site

__all__ = ["Check", "EngineState", "Entry", "StrategyState", "Verification"]


Check = tuple[Rule, Graph, Site]
"""A region check of one rewrite: ``(rule, graph before the rewrite, site)``."""


@dataclass(eq=False)
class Verification:
    """The one record of what is verified in an entry's rewrite history.

    The in-process engine (`Engine.verify`), the islands' replay of a history in another
    process (`rewrite.optimize.parallel`) and the progress islands report to each other all
    read and write this record, so a graph rebuilt anywhere carries every pending check of its
    unverified ancestors.

    Invariant: every step ``i`` of the history with ``upto <= i < length`` has its check, in
    ``checks`` when ``i >= start`` and otherwise in the ``parent`` record (which holds the same
    history up to ``start``). Records are mutable and shared: verifying a child's steps that it
    inherited also advances the parent's record. Not thread-safe (an engine owns its entries).

    Attributes:
        upto: How many leading steps of the history are verified (an index into it).
        length: Steps in the history.
        checks: Checks of steps ``length - len(checks)`` to ``length - 1``.
        parent: The record of the history's first ``start`` steps while some of them are
            unverified (None once ``upto >= start``).
    """

    upto: int
    length: int
    checks: tuple[Check, ...] = ()
    parent: Verification | None = None

    def __post_init__(self) -> None:
        if not 0 <= self.upto <= self.length or len(self.checks) > self.length:
            raise SearchError(
                f"A Verification needs 0 <= upto <= length and at most `length` checks, but got "
                f"upto={self.upto}, length={self.length}, {len(self.checks)} checks."
            )
        if self.upto < self.start and (self.parent is None or self.parent.length != self.start):
            raise SearchError(
                f"A Verification verified up to step {self.upto} with checks from step "
                f"{self.start} needs the record of the first {self.start} steps as its parent; "
                f"pass the parent entry's record or the missing checks."
            )
        self._trim()

    @classmethod
    def done(cls, length: int) -> Verification:
        """The record of a fully verified history of ``length`` steps."""
        return cls(length, length)

    @classmethod
    def extend(cls, parent: Verification, checks: Sequence[Check]) -> Verification:
        """The record of ``parent``'s history followed by rewrites with ``checks``."""
        return cls(parent.upto, parent.length + len(checks), tuple(checks), parent)

    @property
    def start(self) -> int:
        """The first step whose check this record holds itself."""
        return self.length - len(self.checks)

    @property
    def verified(self) -> bool:
        """Whether every step of the history is verified."""
        return self.upto == self.length

    def advance(self, upto: int) -> None:
        """Mark the first ``upto`` steps verified (capped at ``length``; never goes back), and
        the parent's records with them."""
        r: Verification | None = self
        while r is not None and r.upto < min(upto, r.length):
            r.upto = min(upto, r.length)
            nxt = r.parent
            r._trim()
            r = nxt

    def _trim(self) -> None:
        """Drop what verified steps no longer need (the parent link, checks already run)."""
        if self.upto >= self.start:
            self.parent = None
            self.checks = self.checks[self.upto - self.start :]

    def verify(self, check: Callable[[Rule, Graph, Site], bool]) -> bool:
        """Run every pending check of the history in order, recording each one that passes.

        Args:
            check: Runs one region check, ``check(rule, graph, site) -> passed``.

        Returns:
            Whether every step is now verified (False at the first failing check; the steps
            before it stay recorded as verified).
        """
        chain: list[Verification] = []  # this record, then its ancestors still needed
        r: Verification | None = self
        while r is not None:
            chain.append(r)
            r = r.parent if r.upto < r.start else None
        done = 0
        for rec in reversed(chain):  # oldest first: what an ancestor verified holds here too
            rec.upto = max(rec.upto, min(done, rec.length))
            for i in range(max(rec.upto, rec.start), rec.length):
                rule, graph, site = rec.checks[i - rec.start]
                if not check(rule, graph, site):
                    return False
                rec.upto = i + 1
            rec._trim()
            done = rec.upto
        return self.verified


@dataclass(eq=False)
class Entry:
    """A graph in the population.

    Attributes:
        graph: The graph.
        cost: Its cost vector.
        y: Raw objective values.
        steps: Rewrites from the input graph.
        feasible: Inside the constraint region.
        record: Its `Verification` record (how many leading steps are verified, and the checks
            of the others).
        sites: Its site table (computed on first use).
        costs: Its named costs (per-device figures for sharded graphs, see `Context.measure`).
    """

    graph: Graph
    cost: CostVector
    y: np.ndarray
    steps: tuple[Step, ...]
    feasible: bool
    record: Verification
    sites: SiteTable | None = field(default=None, repr=False)
    costs: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.record.length != len(self.steps):
            raise SearchError(
                f"An Entry's verification record must cover its {len(self.steps)} steps, but "
                f"it covers {self.record.length}."
            )

    @property
    def verified(self) -> bool:
        """Every rewrite from the input has passed a region check."""
        return self.record.verified

    @property
    def verified_upto(self) -> int:
        """How many leading rewrites of the history are verified (the record's ``upto``)."""
        return self.record.upto


class StrategyState(Protocol):
    """A `rewrite.optimize.engine.StepStrategy`'s own search state (e.g. a baseline's heap,
    `rewrite.optimize.baselines.BaselineState`), kept in the `EngineState`."""

    def copy(self) -> StrategyState:
        """A copy that later steps of the original do not change (entries may be shared)."""
        ...


@dataclass(frozen=True)
class EngineState:
    """The whole search state of one `Engine` (see `Engine.state`).

    A snapshot: later steps of the engine it came from do not change it, and restoring it does
    not tie the restored engine to it. Entries are shared, not copied: an `Entry`'s graph, cost
    and history never change, only its `Verification` record and its cached site table, which a
    restored engine reads the same way.

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
        strategy: The step strategy's own state (None for ``stochastic``, which keeps none, and
            before the first step).
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
