"""`SearchConfig`: every knob of the rewrite search with its valid range (`KNOBS`)."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from rewrite.errors import SearchConfigError

__all__ = [
    "FINAL_CHECK_SHARE",
    "INT_KNOBS",
    "KNOBS",
    "STRATEGIES",
    "Knob",
    "SearchConfig",
    "knob_names",
]

STRATEGIES = ("stochastic", "greedy", "best_first", "saturate")
"""Search strategies: Tapestry-style Pareto search, the two baselines, and equality saturation
(`rewrite.optimize.saturate`)."""
FINAL_CHECK_SHARE = 0.1
"""Share of `SearchConfig.time_budget` kept for the final whole-graph checks."""


class Knob(NamedTuple):
    """Valid range of one numeric knob.

    Attributes:
        low: Smallest valid value.
        high: Largest valid value (``math.inf`` for unbounded).
    """

    low: float
    high: float


KNOBS: dict[str, Knob] = {
    "population": Knob(2, 100_000),
    "archive_size": Knob(1, 100_000),
    "tau": Knob(1e-3, 1e3),
    "m": Knob(1, 64),
    "alpha": Knob(1.0, 10.0),
    "beta": Knob(0.0, 1.0),
    "eta": Knob(1e-4, 1.0),
    "restart_prob": Knob(0.0, 1.0),
    "verify_rate": Knob(0.0, 1.0),
    "max_fusion_size": Knob(2, 1024),
    "window": Knob(1, 10**9),
    "epsilon": Knob(0.0, 1.0),
    "max_steps": Knob(1, 10**12),
    "time_budget": Knob(1e-3, math.inf),
    "max_size_ratio": Knob(1.0, 1000.0),
    "workers": Knob(1, 4096),
    "island_steps": Knob(1, 10**9),
    "devices": Knob(1, 4096),
}
"""Valid range of every numeric knob of `SearchConfig` (``None`` knobs skip the check)."""

INT_KNOBS = {
    "population",
    "archive_size",
    "m",
    "max_fusion_size",
    "window",
    "max_steps",
    "workers",
    "island_steps",
    "devices",
}
"""Knobs that take integer values."""


@dataclass(frozen=True)
class SearchConfig:
    """Every knob of `rewrite.search`, validated once on construction.

    Valid ranges are in `KNOBS`.

    Attributes:
        population: Graphs kept in the population (frontier plus explorers), in [2, 1e5].
        archive_size: Most graphs kept on the reported Pareto frontier; beyond it the most
            crowded points are dropped, in [1, 1e5].
        tau: Parent temperature: a graph of non-dominated rank ``r`` (0 = frontier) is picked as
            parent with probability proportional to ``exp(-r / tau)``, in [1e-3, 1e3].
        m: Rewrites applied to make one child, in [1, 64].
        alpha: Relaxation: a child is dropped when some frontier cost vector times ``alpha`` is
            at most the child's in every objective (TASO's alpha for vectors), in [1, 10].
        beta: Weight of the prior against online credit: rule ``r`` is drawn with probability
            proportional to ``prior_r ** beta * credit_r ** (1 - beta)`` among applicable rules,
            in [0, 1].
        eta: Learning rate of the online credit (an exponentially weighted average of frontier
            improvements per rule), in [1e-4, 1].
        restart_prob: Probability that a child starts from the input graph, in [0, 1].
        verify_rate: Fraction of children verified by random testing right after they are made;
            every graph is verified before it enters the frontier whatever this rate, in [0, 1].
        max_fusion_size: Largest fused group the fusion rules may build, in [2, 1024].
        window: ``W``: the search stops when hypervolume grew by less than ``epsilon`` over the
            last ``W`` steps, in [1, 1e9].
        epsilon: Hypervolume gain threshold (hypervolume of cost vectors normalized by the input
            cost, reference point 1.1 per objective), in [0, 1]; 0 disables this stop.
        max_steps: Step budget (children made), in [1, 1e12].
        time_budget: Wall-time budget in seconds of the whole call, final checks included
            (the search stops at ``1 - FINAL_CHECK_SHARE`` of it when ``final_check`` is on), or
            None for no limit.
        seed: Seed of the `numpy.random.Generator` behind every random choice, >= 0.
        objectives: Names of the cost-vector entries to minimize, 2 to 6 of them.
        memory_cap: Constraint region: graphs whose ``peak_memory`` (bytes) exceeds it stay in
            the population but are never reported; None for no cap.
        max_size_ratio: Children with more than this many times the input's node count are
            dropped, in [1, 1000].
        strategy: ``"stochastic"`` (Pareto search), ``"greedy"`` (hill climbing),
            ``"best_first"`` (TASO-style with alpha) or ``"saturate"`` (equality saturation in
            an egglog e-graph, `rewrite.optimize.saturate`; it ignores the priors and the
            stochastic knobs, runs in one process, and counts a step per rewrite added).
        workers: Worker processes (islands run on them); 1 runs in this process.
        island_steps: Steps an island runs per work item before it reports frontier
            improvements, in [1, 1e9].
        final_check: Check every reported graph against the input graph by whole-graph random
            testing before returning, on a shape-reduced instantiation of the pair (at the real
            shapes when the pair does not reduce and fits the verifier's ``max_bytes``).
        final_check_real: Also check every reported graph at the real shapes while the time
            budget lasts (every weight is then materialized: memory grows with the model).
        devices: Devices of the mesh the plan runs on, in [1, 4096]. With one device (the
            default) the sharding rules are left out and every reported figure is single-device;
            from two devices on, the 2-way sharding rules join the search and sharded graphs are
            costed per device (`rewrite.shard_cost`).
    """

    population: int = 24
    archive_size: int = 64
    tau: float = 0.3
    m: int = 1
    alpha: float = 1.05
    beta: float = 0.5
    eta: float = 0.1
    restart_prob: float = 0.05
    verify_rate: float = 0.05
    max_fusion_size: int = 8
    window: int = 200
    epsilon: float = 1e-5
    max_steps: int = 500
    time_budget: float | None = None
    seed: int = 0
    objectives: tuple[str, ...] = ("latency", "peak_memory")
    memory_cap: float | None = None
    max_size_ratio: float = 2.0
    strategy: str = "stochastic"
    workers: int = 1
    island_steps: int = 40
    final_check: bool = True
    final_check_real: bool = False
    devices: int = 1

    def __post_init__(self) -> None:
        for name, knob in KNOBS.items():
            value = getattr(self, name)
            if value is None and name == "time_budget":
                continue
            object.__setattr__(self, name, _check_number(name, value, knob))
        if (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, numbers.Integral)
            or self.seed < 0
        ):
            raise SearchConfigError(f"`seed` must be an int >= 0, but got {self.seed!r}.")
        object.__setattr__(self, "seed", int(self.seed))
        self._check_objectives()
        if self.memory_cap is not None and (
            isinstance(self.memory_cap, bool)
            or not isinstance(self.memory_cap, int | float)
            or not self.memory_cap > 0
            or not math.isfinite(self.memory_cap)
        ):
            raise SearchConfigError(
                f"`memory_cap` must be a finite number of bytes > 0 or None, but got "
                f"{self.memory_cap!r}."
            )
        if self.strategy not in STRATEGIES:
            raise SearchConfigError(
                f"`strategy` must be one of {STRATEGIES}, but got {self.strategy!r}."
            )
        for name in ("final_check", "final_check_real"):
            if not isinstance(getattr(self, name), bool):
                raise SearchConfigError(f"`{name}` must be a bool, got {getattr(self, name)!r}.")

    def _check_objectives(self) -> None:
        objs = self.objectives
        if isinstance(objs, str) or not isinstance(objs, Sequence):
            raise SearchConfigError(
                f"`objectives` must be a sequence of cost names, but got {objs!r}; "
                "e.g. ('latency', 'peak_memory')."
            )
        objs = tuple(objs)
        if not 2 <= len(objs) <= 6 or len(set(objs)) != len(objs):
            raise SearchConfigError(
                f"`objectives` must name 2 to 6 distinct cost entries, but got {list(objs)}."
            )
        if not all(isinstance(o, str) and o for o in objs):
            raise SearchConfigError(f"`objectives` must be non-empty strings, got {list(objs)}.")
        object.__setattr__(self, "objectives", objs)

    def replace(self, **changes: Any) -> SearchConfig:
        """A copy with ``changes`` applied (validated)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict of every knob (round-trips through `SearchConfig.from_dict`)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["objectives"] = list(self.objectives)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], base: SearchConfig | None = None) -> SearchConfig:
        """Build a config from a dict of knobs; knobs not given come from ``base``.

        Args:
            d: Knob name to value.
            base: Config supplying the knobs ``d`` leaves out (defaults if None).

        Raises:
            SearchConfigError: On an unknown knob or an invalid value.
        """
        if not isinstance(d, Mapping):
            raise SearchConfigError(f"A search config must be a dict, but got {d!r}.")
        names = knob_names()
        unknown = sorted(set(d) - set(names))
        if unknown:
            raise SearchConfigError(
                f"Unknown search-config knobs {unknown}; the knobs are {names}."
            )
        changes = dict(d)
        if "objectives" in changes and isinstance(changes["objectives"], list):
            changes["objectives"] = tuple(changes["objectives"])
        return dataclasses.replace(base or cls(), **changes)


def knob_names() -> list[str]:
    """Names of every `SearchConfig` knob, in declaration order."""
    return [f.name for f in dataclasses.fields(SearchConfig)]


def _check_number(name: str, value: Any, knob: Knob) -> int | float:
    is_int = name in INT_KNOBS
    ok_type = isinstance(value, numbers.Integral if is_int else numbers.Real)
    if isinstance(value, bool) or not ok_type:
        kind = "an int" if is_int else "a number"
        raise SearchConfigError(f"`{name}` must be {kind}, but got {value!r}.")
    if not math.isfinite(value) or not knob.low <= value <= knob.high:
        raise SearchConfigError(
            f"`{name}` must lie in [{knob.low}, {knob.high}], but got {value!r}."
        )
    return int(value) if is_int else float(value)
