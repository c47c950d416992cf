"""Search strategies: the protocol `rewrite.search` runs, and the registry of the built-in ones.

A `SearchStrategy` takes a `SearchProblem` (the graph, the rules, the priors, the config, the
device and the run's resources, all validated by `rewrite.search`) and returns a `SearchResult`.
``SearchConfig.strategy`` names one of `STRATEGY_REGISTRY`:

* ``stochastic``, ``greedy``, ``best_first``: an `EngineSearch`, which steps an `Engine` with
  its `rewrite.optimize.engine.StepStrategy` (`Stochastic`, `Greedy`, `BestFirst`), in this
  process or on islands through an executor (`rewrite.optimize.parallel`);
* ``saturate``: `Saturation`, equality saturation in an e-graph (`rewrite.optimize.saturate`),
  which runs whole.

As in egglog, where how rules are scheduled is its own trait the runner calls, the engine knows
only the `StepStrategy` protocol, and `rewrite.search` only this one: neither branches on names.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from rewrite.errors import SearchConfigError, SearchError
from rewrite.ir import Graph
from rewrite.optimize.baselines import BestFirst, Greedy
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.engine import Context, Engine, StepStrategy, Stochastic
from rewrite.optimize.parallel import check_picklable, run_parallel
from rewrite.optimize.result import SearchResult
from rewrite.optimize.runner import build_result, make_verifier, run_engine
from rewrite.rules.base import Rule

__all__ = [
    "STRATEGY_REGISTRY",
    "EngineSearch",
    "Saturation",
    "SearchProblem",
    "SearchStrategy",
    "get_strategy",
    "step_strategy",
]


@dataclass(frozen=True)
class SearchProblem:
    """What a strategy searches, checked by `rewrite.search` before it runs.

    Attributes:
        graph: The input graph.
        rules: The rules the search uses (distinct names, sharding rules only on a mesh).
        prior: ``n``-dim firing prior aligned with ``rules`` (sums to 1).
        config: The search config.
        device: Cost-model device.
        verify_cache: Verdict cache of the random tests (see `make_verifier`).
        executor: Run islands through it (None: in this process when ``config.workers == 1``,
            else a local process pool).
        from_catalogue: The rules are the built-in catalogue (worker processes rebuild it
            rather than receive pickled rules).
        saturation: E-graph limits for `Saturation` (ignored by the other strategies).
        t0: `time.perf_counter` when the call started (the time budget runs from it).
    """

    graph: Graph
    rules: Sequence[Rule]
    prior: np.ndarray
    config: SearchConfig
    device: Any
    verify_cache: Any
    executor: Executor | None
    from_catalogue: bool
    saturation: Any
    t0: float


class SearchStrategy(Protocol):
    """A whole search: ``run(problem) -> SearchResult``.

    ``run`` may take the problem's time budget and make its verifier; it must not change the
    problem. Strategy objects hold no search state (one object serves every call).

    Attributes:
        name: The name ``SearchConfig.strategy`` selects it by.
    """

    @property
    def name(self) -> str:
        """The strategy's name."""
        ...

    def run(self, problem: SearchProblem) -> SearchResult:
        """Search ``problem`` and return its result."""
        ...


@dataclass(frozen=True)
class EngineSearch:
    """A strategy run by stepping `Engine` islands with ``step`` (a `StepStrategy`)."""

    step: StepStrategy

    @property
    def name(self) -> str:
        """The step strategy's name."""
        return self.step.name

    def run(self, problem: SearchProblem) -> SearchResult:
        """One engine in this process, or ``config.workers`` islands through an executor.

        Raises:
            SearchError: If custom rules cannot be pickled for worker processes, or a worker
                failed.
        """
        cfg = problem.config
        if problem.executor is not None or cfg.workers > 1:
            return self._islands(problem)
        verifier = make_verifier(cfg.seed, problem.verify_cache)
        ctx = Context(problem.graph, problem.rules, problem.prior, cfg, problem.device, verifier)
        engine = Engine(ctx, np.random.SeedSequence(cfg.seed), self.step)
        reason = run_engine(engine, cfg, problem.t0)
        return build_result(
            ctx,
            engine.frontier,
            engine.hv_trace,
            engine.stats,
            reason,
            problem.t0,
            1,
            len(engine.population),
        )

    def _islands(self, problem: SearchProblem) -> SearchResult:
        cfg, rules = problem.config, list(problem.rules)
        if problem.from_catalogue:
            source: Any = ("catalogue", cfg.max_fusion_size)
        else:
            check_picklable(rules)
            source = rules
        return run_parallel(
            problem.graph,
            cfg,
            rules,
            problem.prior,
            problem.device,
            problem.executor,
            problem.verify_cache,
            source,
            t0=problem.t0,
            strategy=self.step,
        )


@dataclass(frozen=True)
class Saturation:
    """Equality saturation (``saturate``, `rewrite.optimize.saturate`): one process, the priors
    and the stochastic knobs ignored, ``problem.saturation`` its e-graph limits."""

    @property
    def name(self) -> str:
        """``"saturate"``."""
        return "saturate"

    def run(self, problem: SearchProblem) -> SearchResult:
        """Saturate and extract (see `rewrite.optimize.saturate.runner.run_saturation`).

        Raises:
            SearchConfigError: On invalid limits.
        """
        from rewrite.optimize.saturate.limits import SaturationLimits
        from rewrite.optimize.saturate.runner import run_saturation

        cfg = problem.config
        limits = SaturationLimits.coerce(problem.saturation)
        verifier = make_verifier(cfg.seed, problem.verify_cache)
        rules = list(problem.rules)
        return run_saturation(
            problem.graph, rules, cfg, problem.device, verifier, limits, problem.t0
        )


STRATEGY_REGISTRY: dict[str, SearchStrategy] = {
    s.name: s
    for s in (
        EngineSearch(Stochastic()),
        EngineSearch(Greedy()),
        EngineSearch(BestFirst()),
        Saturation(),
    )
}
"""Name -> the built-in strategy it selects (``SearchConfig.strategy``)."""


def get_strategy(name: str) -> SearchStrategy:
    """The strategy ``name`` selects.

    Raises:
        SearchConfigError: If no strategy has that name.
    """
    try:
        return STRATEGY_REGISTRY[name]
    except KeyError:
        raise SearchConfigError(
            f"`strategy` must be one of {sorted(STRATEGY_REGISTRY)}, but got {name!r}."
        ) from None


def step_strategy(name: str) -> StepStrategy:
    """The `StepStrategy` an `Engine` steps for strategy ``name``.

    Raises:
        SearchConfigError: If no strategy has that name.
        SearchError: If the strategy does not step an engine (``saturate``).
    """
    strategy = get_strategy(name)
    if not isinstance(strategy, EngineSearch):
        raise SearchError(
            f"strategy {name!r} does not step an Engine: it runs whole in "
            f"rewrite.search(graph, {{'strategy': {name!r}}})."
        )
    return strategy.step
