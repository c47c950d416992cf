"""Run statistics and the `SearchResult` of `rewrite.search`.

`RunStats` holds the counters a search accumulates (per rule, per phase, per cache); it is a plain
picklable object so worker processes can send their deltas to the driver, which adds them up.
`SearchResult.metrics()` flattens everything into ``dict[str, float]`` for tabular use (the
studies layer logs it per trial; the structured surrogate learns from it).

Metric names (all floats):

* ``rule.<name>.<counter>`` for counters ``applicable`` (a rewrite was being chosen and the rule
  had a site), ``fired`` (the rule was chosen and applied), ``verified`` / ``rejected`` (a
  random-testing check of one of its rewrites passed / failed), ``accepted`` (a child holding one
  of its rewrites joined the population) and ``improved`` (such a child entered the frontier);
* ``time.<phase>`` seconds for phases ``match``, ``apply``, ``verify``, ``cost`` and ``total``
  (wall clock, as is ``steps_per_s``; these and the verdict cache's counters depend on the
  machine, `MACHINE_METRICS`; every other metric repeats for a seeded run);
* ``cache.<name>.hits``, ``cache.<name>.misses`` and ``cache.<name>.hit_rate`` for the caches
  ``dedupe`` (graph hashes already seen), ``verify`` (verdicts reused, from the machine-wide
  verdict cache: earlier runs on the machine count) and ``match`` (a hit is a
  site table inherited from the parent graph and updated near the edit, a miss a full pass);
* ``work.rewrites`` (rewrites applied) and ``work.checks`` (verifier region checks): the
  run's effort in deterministic units;
* ``steps``, ``steps_per_s``, ``children``, ``dropped.<reason>``, ``population.size`` (final),
  ``population.mean``, ``frontier.size`` (final), ``frontier.mean``;
* ``hypervolume`` (final, of cost vectors normalized by the input's, reference point 1.1 per
  objective), ``hypervolume.input`` (the input graph's own), and
  ``best.<objective>.ratio`` (best frontier value over the input's, < 1 is an improvement);
  ``best.latency.measured_ratio`` once measured (`SearchResult.measured_ratio`), or
  ``best.latency.compiled_ratio`` when measured compiled (``search(..., measure="compile")``:
  both graphs through ``torch.compile``);
* ``final_check.<level>``: reported graphs per `Solution.checked` level (``real``, ``reduced``,
  ``regions``), and ``final_check.failed``: graphs dropped because a whole-graph check failed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewrite.ir import Graph
from rewrite.rules.base import Site

__all__ = [
    "CHECK_LEVELS",
    "RULE_COUNTERS",
    "MACHINE_METRICS",
    "RunStats",
    "SearchResult",
    "Solution",
    "Step",
]

RULE_COUNTERS = ("applicable", "fired", "verified", "rejected", "accepted", "improved")
"""Per-rule counters, in metric-name order."""

PHASES = ("match", "apply", "verify", "cost")
MACHINE_METRICS = ("time.*", "steps_per_s", "cache.verify.*")
"""`fnmatch` patterns of the metrics that depend on the machine, not on the seeded run: wall-clock
times (and the machine's load) and the hits of the machine-wide verdict cache (what earlier runs
verified). Every other metric repeats for a seeded search."""
CHECK_LEVELS = ("input", "real", "reduced", "regions", "none")
"""What a reported graph was checked by, strongest first (see `Solution.checked`)."""
CACHES = ("dedupe", "verify", "match")


class RunStats:
    """Counters of a (part of a) search run; `merge` adds another run's counters.

    Attributes:
        rules: Rule name -> counter name (`RULE_COUNTERS`) -> count.
        times: Phase (``match``, ``apply``, ``verify``, ``cost``) -> seconds.
        cache: Cache name -> ``[hits, misses]``.
        dropped: Reason -> number of children dropped for it.
        steps: Children made (every step makes one).
        pop_sum: Sum of the population size over steps (for the mean).
        front_sum: Sum of the frontier size over steps (for the mean).
    """

    def __init__(self) -> None:
        self.rules: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(RULE_COUNTERS, 0))
        self.times: dict[str, float] = dict.fromkeys(PHASES, 0.0)
        self.cache: dict[str, list[int]] = {c: [0, 0] for c in CACHES}
        self.dropped: dict[str, int] = defaultdict(int)
        self.steps = 0
        self.pop_sum: float = 0
        self.front_sum: float = 0

    def count(self, rule: str, counter: str, n: int = 1) -> None:
        """Add ``n`` to ``rule``'s ``counter``."""
        self.rules[rule][counter] += n

    def hit(self, cache: str, hit: bool) -> None:
        """Record one lookup of ``cache``."""
        self.cache[cache][0 if hit else 1] += 1

    def merge(self, other: RunStats) -> None:
        """Add every counter of ``other`` into this one."""
        for rule, counters in other.rules.items():
            mine = self.rules[rule]
            for k, v in counters.items():
                mine[k] += v
        for phase, secs in other.times.items():
            self.times[phase] = self.times.get(phase, 0.0) + secs
        for k, (h, m) in other.cache.items():
            mine_c = self.cache.setdefault(k, [0, 0])
            mine_c[0] += h
            mine_c[1] += m
        for k, v in other.dropped.items():
            self.dropped[k] += v
        self.steps += other.steps
        self.pop_sum += other.pop_sum
        self.front_sum += other.front_sum

    def __getstate__(self) -> dict[str, Any]:
        return {
            "rules": {k: dict(v) for k, v in self.rules.items()},
            "times": self.times,
            "cache": self.cache,
            "dropped": dict(self.dropped),
            "steps": self.steps,
            "pop_sum": self.pop_sum,
            "front_sum": self.front_sum,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]
        for k, v in state["rules"].items():
            self.rules[k].update(v)
        self.times.update(state["times"])
        self.cache.update(state["cache"])
        self.dropped.update(state["dropped"])
        self.steps, self.pop_sum, self.front_sum = (
            state["steps"],
            state["pop_sum"],
            state["front_sum"],
        )

    def to_metrics(self, rule_names: Sequence[str]) -> dict[str, float]:
        """Flat counters (see the module docstring); every rule of ``rule_names`` appears."""
        out: dict[str, float] = {}
        for rule in rule_names:
            counters = self.rules.get(rule) or dict.fromkeys(RULE_COUNTERS, 0)
            for c in RULE_COUNTERS:
                out[f"rule.{rule}.{c}"] = float(counters[c])
        for phase in PHASES:
            out[f"time.{phase}"] = float(self.times.get(phase, 0.0))
        for name in CACHES:
            h, m = self.cache.get(name, [0, 0])
            out[f"cache.{name}.hits"] = float(h)
            out[f"cache.{name}.misses"] = float(m)
            out[f"cache.{name}.hit_rate"] = h / (h + m) if h + m else 0.0
        for reason in ("duplicate", "alpha", "size", "rejected", "error"):
            out[f"dropped.{reason}"] = float(self.dropped.get(reason, 0))
        out["steps"] = float(self.steps)
        counts = [self.rules[r] for r in rule_names if r in self.rules]
        out["work.rewrites"] = float(sum(c["fired"] for c in counts))
        out["work.checks"] = float(sum(c["verified"] + c["rejected"] for c in counts))
        out["population.mean"] = self.pop_sum / self.steps if self.steps else 0.0
        out["frontier.mean"] = self.front_sum / self.steps if self.steps else 0.0
        return out


@dataclass(frozen=True)
class Step:
    """One rewrite on the way from the input graph: the rule and the site it rewrote."""

    rule: str
    site: Site


@dataclass(frozen=True)
class Solution:
    """One graph of the final Pareto set.

    Attributes:
        graph: The rewritten graph.
        cost: Its full cost vector (`rewrite.costmodel.COST_FIELDS` -> value).
        objectives: Its objective values, in `SearchResult.objectives` order.
        steps: The rewrites that turn the input graph into ``graph``, in order.
        checked: The strongest check it passed against the input graph (`CHECK_LEVELS`):
            ``"input"`` (it is the input graph), ``"real"`` (whole-graph random test at the
            real shapes), ``"reduced"`` (whole-graph random test of a shape-reduced
            instantiation), ``"regions"`` (only the region check of each of its rewrites:
            the whole-graph check was off, did not fit in the time budget or in memory), or
            ``"none"`` (no check ran: a strategy told not to region-check its rewrites, such as
            saturation with ``SaturationLimits(verify=False)``, and no whole-graph check).
    """

    graph: Graph
    cost: dict[str, float]
    objectives: tuple[float, ...]
    steps: tuple[Step, ...]
    checked: str = "regions"

    @property
    def rules(self) -> list[str]:
        """Rule names of `steps`, in order."""
        return [s.rule for s in self.steps]


@dataclass
class SearchResult:
    """What `rewrite.search` returns.

    Attributes:
        input_graph: The graph searched from.
        input_cost: Its cost vector (name -> value).
        objectives: Names of the minimized cost entries.
        pareto: Final Pareto set: verified, inside the constraint region, non-dominated; sorted
            by the first objective.
        reference: The hypervolume reference point in raw units (input cost x 1.1).
        hv_trace: ``(step, seconds, hypervolume)`` each time the frontier changed, starting with
            the input graph alone at step 0; hypervolume of normalized costs (see module doc).
        stats: The run's counters.
        rule_names: The rules the search ran with.
        priors: The resolved firing prior per rule.
        config: The `SearchConfig` used (as a dict).
        device: The cost model's device profile.
        stop_reason: ``"steps"``, ``"time"``, ``"converged"`` (hypervolume gain below epsilon
            over the window), ``"exhausted"`` (no rewrite applies / search space exhausted; for
            ``saturate``: the e-graph saturated), and for ``saturate`` ``"nodes"`` or
            ``"iterations"`` (an e-graph limit, `SaturationLimits`).
        wall_time: Seconds from start to return.
        workers: Worker processes used (1 = in-process).
        final_checks: Graph hash -> whether its whole-graph random test against the input passed
            (graphs whose test did not run are absent; empty when ``final_check`` was off).
        final_failed: How many frontier graphs failed a whole-graph check (not reported).
        measured: Predicted against measured latency and speedup of the input and every Pareto
            graph (`measure`, or ``search(..., measure=True)``); None until measured.
        measured_compiled: Whether `measured` timed the graphs compiled by ``torch.compile``.
        strategy_info: What a strategy reports beyond the common fields (``saturate``: the
            e-graph's size, iterations, the extraction used and its status, each extracted
            graph's costs, the rules it skipped and why); empty for the others.
    """

    input_graph: Graph
    input_cost: dict[str, float]
    objectives: tuple[str, ...]
    pareto: list[Solution]
    reference: tuple[float, ...]
    hv_trace: list[tuple[int, float, float]]
    stats: RunStats
    rule_names: list[str]
    priors: dict[str, float]
    config: dict[str, Any]
    device: str
    stop_reason: str
    wall_time: float
    workers: int = 1
    final_checks: dict[str, bool] = field(default_factory=dict)
    final_population: int = 0
    final_failed: int = 0
    measured: list[Any] | None = None
    measured_compiled: bool = False
    strategy_info: dict[str, Any] = field(default_factory=dict)

    def measure(
        self, device: Any = None, *, repeats: int = 10, seed: int = 0, compile: bool = False
    ) -> list[Any]:
        """Re-time the input graph and every Pareto graph on a real device and pair predicted
        with measured speedups (`rewrite.measurement.front.measure_front`; the rows are also stored in
        `measured` and the summary). ``device`` None: CUDA when present, else the CPU.

        Returns:
            `MeasuredSolution` rows, the input graph's first.
        """
        from rewrite.measurement.front import measure_front

        self.measured = measure_front(self, device, repeats=repeats, seed=seed, compile=compile)
        self.measured_compiled = compile
        return self.measured

    def module(self, i: int = 0, params: Any = None, **options: Any) -> Any:
        """Pareto graph ``i`` as a PyTorch module with real weights (`rewrite.to_module`).

        Args:
            i: Index into `pareto` (sorted by the first objective: 0 is the lowest latency when
                latency comes first).
            params: The ``torch.nn.Module`` (or mapping of tensors) holding the weights; None:
                the module `rewrite.from_torch` imported `input_graph` from.
            **options: Passed to `rewrite.to_module` (``fold``, ``check``, ``inputs``, ...).

        Returns:
            A ``torch.fx.GraphModule``, checked against the original module.

        Raises:
            IndexError: If there is no Pareto graph ``i``.
            ModuleError: See `rewrite.to_module`.
        """
        from rewrite.lowering.module import to_module

        if not -len(self.pareto) <= i < len(self.pareto):
            raise IndexError(
                f"Pareto graph {i} does not exist: this result has {len(self.pareto)} "
                f"(indices 0..{len(self.pareto) - 1})."
            )
        return to_module(self.pareto[i].graph, params, origin=self.input_graph, **options)

    def measured_ratio(self) -> float | None:
        """Measured latency of the Pareto graph with the lowest predicted latency (the one a user
        would deploy) over the input graph's measured latency: below 1, the search's best graph
        is faster on the device. None until `measure` ran, or when latency is not an objective."""
        if not self.measured or "latency" not in self.objectives:
            return None
        if not self.pareto:
            return 1.0
        j = self.objectives.index("latency")
        best = min(range(len(self.pareto)), key=lambda i: self.pareto[i].objectives[j])
        rows = {r.index: r.measured_latency for r in self.measured}
        return float(rows[best] / rows[-1])

    @property
    def hypervolume(self) -> float:
        """Final hypervolume (normalized costs, reference 1.1 per objective)."""
        return self.hv_trace[-1][2] if self.hv_trace else 0.0

    def hv_curve(self, budget: int | None = None) -> np.ndarray:
        """Hypervolume after each step: a ``(budget + 1)``-dim array, entry ``t`` the frontier's
        hypervolume once ``t`` steps were made (entry 0: the input alone); a run that stopped
        early keeps its last value. ``budget`` defaults to the run's ``max_steps``."""
        budget = int(self.config.get("max_steps", self.stats.steps) if budget is None else budget)
        steps = np.array([s for s, _, _ in self.hv_trace], dtype=np.int64)
        hvs = np.array([hv for _, _, hv in self.hv_trace], dtype=np.float64)
        idx = np.searchsorted(steps, np.arange(budget + 1), side="right") - 1
        return hvs[np.maximum(idx, 0)]

    def best(self, objective: str | None = None) -> Solution:
        """The Pareto solution with the lowest ``objective`` (default: the first objective)."""
        name = objective or self.objectives[0]
        if name not in self.objectives:
            raise KeyError(f"{name!r} is not an objective of this search; {self.objectives}.")
        j = self.objectives.index(name)
        return min(self.pareto, key=lambda s: s.objectives[j])

    def reduction(self, objective: str | None = None) -> float:
        """Best relative reduction of ``objective``: ``1 - best / input`` (0 = none)."""
        name = objective or self.objectives[0]
        base = self.input_cost[name]
        return 1.0 - self.best(name).cost[name] / base if base else 0.0

    def metrics(self) -> dict[str, float]:
        """Flat run metrics ``name -> float`` (see the module docstring for the names)."""
        out = self.stats.to_metrics(self.rule_names)
        total = max(self.wall_time, 1e-9)
        out["time.total"] = float(self.wall_time)
        out["steps_per_s"] = self.stats.steps / total
        out["children"] = float(self.stats.steps)
        out["population.size"] = float(self.final_population)
        out["frontier.size"] = float(len(self.pareto))
        out["hypervolume"] = float(self.hypervolume)
        out["hypervolume.input"] = float(self.hv_trace[0][2]) if self.hv_trace else 0.0
        out["workers"] = float(self.workers)
        for j, name in enumerate(self.objectives):
            base = self.input_cost[name]
            best = min((s.objectives[j] for s in self.pareto), default=base)
            out[f"best.{name}.ratio"] = best / base if base else 1.0
        for level in CHECK_LEVELS[1:]:
            n = sum(s.checked == level for s in self.pareto)
            if n or level != "none":  # "none" only where a strategy skipped the region checks
                out[f"final_check.{level}"] = float(n)
        out["final_check.failed"] = float(self.final_failed)
        measured = self.measured_ratio()
        if measured is not None:
            kind = "compiled_ratio" if self.measured_compiled else "measured_ratio"
            out[f"best.latency.{kind}"] = measured
        return out

    def summary(self) -> dict[str, Any]:
        """JSON-able summary: objectives, Pareto costs and rule sequences, metrics (no graphs)."""
        return {
            "objectives": list(self.objectives),
            "input_cost": self.input_cost,
            "reference": list(self.reference),
            "pareto": [
                {"hash": s.graph.hash, "cost": s.cost, "rules": s.rules, "checked": s.checked}
                for s in self.pareto
            ],
            "hv_trace": [list(t) for t in self.hv_trace],
            "stop_reason": self.stop_reason,
            "metrics": self.metrics(),
            **({"strategy_info": self.strategy_info} if self.strategy_info else {}),
            **(
                {"measured": [r.as_dict() for r in self.measured]}
                if self.measured is not None
                else {}
            ),
        }

    def __repr__(self) -> str:
        return (
            f"SearchResult({len(self.pareto)} Pareto graphs, hypervolume={self.hypervolume:.4g}, "
            f"steps={self.stats.steps}, stop={self.stop_reason!r}, {self.wall_time:.2f} s)"
        )


def normalizer(input_cost: Mapping[str, float], objectives: Sequence[str]) -> np.ndarray:
    """Per-objective scale dividing raw costs: the input's cost (1 where it is 0)."""
    return np.array([input_cost[o] if input_cost[o] > 0 else 1.0 for o in objectives], float)
