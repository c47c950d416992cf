"""`search(graph, ...)`: the entry point of the rewrite search (re-exported as `rewrite.search`)."""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from concurrent.futures import Executor
from typing import Any

import numpy as np

from rewrite.errors import (
    EvaluationError,
    PriorsError,
    SearchConfigError,
    SearchError,
    VerificationError,
)
from rewrite.ir import Graph
from rewrite.optimize.config import FINAL_CHECK_SHARE, SearchConfig, knob_names
from rewrite.optimize.engine import Context, Engine, Entry
from rewrite.optimize.priors import RulePriors
from rewrite.optimize.result import SearchResult, Solution
from rewrite.rules.base import Rule

__all__ = ["default_rules", "loop_deadline", "make_verifier", "search"]

logger = logging.getLogger(__name__)

PriorsLike = RulePriors | Mapping[str, float] | str | os.PathLike | None


def default_rules(max_fusion_size: int | None = None) -> list[Rule]:
    """The verified built-in catalogue (`rewrite.rules.default_registry`).

    Every rule has passed the registry's gate (z3 proof and random tests; verdicts are cached on
    disk, so after the first run this costs about a second).

    Args:
        max_fusion_size: Largest fused group the fusion rules build (the catalogue's default
            when None).
    """
    from rewrite.rules import default_registry

    if max_fusion_size is None:
        return list(default_registry())
    return list(default_registry(max_fuse=max_fusion_size))


def mesh_rules(rules: Sequence[Rule], devices: int) -> list[Rule]:
    """The rules a search on ``devices`` devices runs with: the sharding family only when there
    are at least two devices (its rules are 2-way), so a one-device plan has no collective."""
    return [r for r in rules if devices >= 2 or r.family != "sharding"]


def rules_from_source(source: Any) -> list[Rule]:
    """Rules from what a work item carries: a list of rules or ``("catalogue", max_fuse)``."""
    if isinstance(source, tuple) and source and source[0] == "catalogue":
        return default_rules(source[1])
    return list(source)


def make_verifier(seed: int = 0, cache: Any = "default", tests: int = 2) -> Any:
    """A `rewrite.verify.Verifier` for one process of a search.

    Args:
        seed: Seed of the random tests.
        cache: ``"default"`` (the machine-wide on-disk cache shared by all processes), a path to
            a SQLite cache file, a `VerdictCache`, or None (private in-memory cache).
        tests: Random tests per check.
    """
    from rewrite.verify import VerdictCache, Verifier, default_cache

    if cache == "default":
        vc = default_cache()
    elif cache is None or isinstance(cache, str | os.PathLike):
        vc = VerdictCache(cache)
    else:
        vc = cache
    return Verifier(mode="auto", tests=tests, seed=seed, cache=vc)


def coerce_config(
    config: SearchConfig | Mapping[str, Any] | None, priors: RulePriors
) -> SearchConfig:
    """The config a search runs with, given ``config`` and the priors' ``search_config``.

    A priors file written by ``tuner export`` carries the knobs it was tuned with (the step
    budget included). The rule, from weakest to strongest: the defaults, then the file's knobs,
    then the knobs ``config`` names:

    - ``None``: the file's knobs over the defaults;
    - a dict of knobs: those knobs over the file's (``{"seed": 3}`` keeps every tuned knob);
    - a `SearchConfig`: used as given (it names every knob). Where it differs from the file's
      knobs a `UserWarning` names them, since the tuned values are then dropped; pass a dict of
      the knobs to change instead to keep the rest.

    Knobs this version does not know are ignored with a `UserWarning`.
    """
    if config is not None and not isinstance(config, SearchConfig | Mapping):
        raise SearchConfigError(
            f"config must be a SearchConfig, a dict of knobs or None, but got {config!r}."
        )
    known = set(knob_names())
    extra = sorted(set(priors.search_config) - known)
    if extra:
        warnings.warn(
            f"The priors file's search_config holds knobs this version does not know: {extra}; "
            "they are ignored.",
            UserWarning,
            stacklevel=3,
        )
    tuned = {k: v for k, v in priors.search_config.items() if k in known}
    if not isinstance(config, SearchConfig):
        return SearchConfig.from_dict({**tuned, **(config or {})})
    differ = {
        k: (v, getattr(config, k))
        for k, v in SearchConfig.from_dict(tuned, base=config).to_dict().items()
        if k in tuned and v != config.to_dict()[k]
    }
    if differ:
        shown = ", ".join(f"{k}: file {f!r}, config {c!r}" for k, (f, c) in differ.items())
        warnings.warn(
            f"The priors file's tuned search_config is overridden by the SearchConfig given "
            f"({shown}); the search uses the SearchConfig. To keep the tuned knobs, pass "
            "config=None, or a dict of only the knobs to change (e.g. {'seed': 1}).",
            UserWarning,
            stacklevel=3,
        )
    return config


def _check_rules(rules: Sequence[Rule]) -> list[Rule]:
    rules = list(rules)
    if not rules or not all(isinstance(r, Rule) for r in rules):
        raise SearchError(
            f"rules must be a non-empty list of rewrite.rules Rule objects, got {rules!r}."
        )
    names = [r.name for r in rules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise SearchError(f"rule names must be distinct, but {dupes} repeat.")
    return rules


def search(
    graph: Graph,
    config: SearchConfig | Mapping[str, Any] | None = None,
    priors: PriorsLike = None,
    device: Any = "h100",
    executor: Executor | None = None,
    *,
    rules: Sequence[Rule] | None = None,
    verify_cache: Any = "default",
    measure: bool | str = False,
) -> SearchResult:
    """Search for rewrites of ``graph`` that trade off the configured cost objectives.

    Args:
        graph: The input graph (e.g. ``rewrite.zoo.build("gpt2")``).
        config: A `SearchConfig`, a dict of its knobs, or None. A priors file's
            ``search_config`` is merged in by the rule of `coerce_config`: a dict's knobs over
            the file's over the defaults; a `SearchConfig` is used as given, with a warning
            when it differs from the file's.
        priors: Rule firing priors: a `RulePriors`, a dict, a path to a priors file (as written
            by `RulePriors.save` or ``tuner export``), or None (uniform).
        device: Cost-model device profile (``"h100"``, ``"h200"``, ``"a100"``, ``"cpu"``, a JSON
            path or a `DeviceProfile`).
        executor: Run islands through this `concurrent.futures.Executor` (e.g. a Dask client's
            ``get_executor()``); None runs in this process when ``config.workers == 1`` and in a
            local process pool otherwise.
        rules: The rules to search with (default: the verified catalogue of `rewrite.rules`).
        verify_cache: Verdict cache of the random tests (see `make_verifier`).
        measure: Re-time the input and the final Pareto graphs in PyTorch and store predicted
            against measured speedups in `SearchResult.measured` (`SearchResult.measure`):
            True for CUDA when present else the CPU, or a torch device name. Not counted in
            ``time_budget``.

    Returns:
        A `SearchResult`. With a ``time_budget`` the whole call (rule gate, search and final
        checks) ends within it, give or take one op evaluation; graphs whose whole-graph check
        did not fit are reported with ``checked="regions"``.

    Raises:
        SearchError: If ``graph`` is not a `Graph`, the rules are unusable, or a worker failed.
        SearchConfigError: On an invalid config or an objective the cost model does not know.
        PriorsError: On invalid priors or priors naming a rule outside ``rules``.
    """
    t0 = time.perf_counter()
    if not isinstance(graph, Graph):
        raise SearchError(f"search needs a rewrite Graph, but got {type(graph).__name__}.")
    _check_measure(measure)
    pri = RulePriors.coerce(priors)
    cfg = coerce_config(config, pri)
    given = _check_rules(default_rules(cfg.max_fusion_size) if rules is None else rules)
    rule_list = mesh_rules(given, cfg.devices)
    if not rule_list:
        raise SearchError(
            f"Every rule given is a sharding rule, and those need a mesh of at least 2 devices, "
            f"but config.devices is {cfg.devices}; pass SearchConfig(devices=2) or other rules."
        )
    prior = _mesh_prior(pri, given, rule_list)
    _check_objectives(cfg)
    if executor is not None or cfg.workers > 1:
        from rewrite.optimize.parallel import check_picklable, run_parallel

        if rules is None:
            source: Any = ("catalogue", cfg.max_fusion_size)
        else:
            check_picklable(rule_list)
            source = rule_list
        result = run_parallel(
            graph, cfg, rule_list, prior, device, executor, verify_cache, source, t0=t0
        )
        return _measured(result, measure)
    verifier = make_verifier(cfg.seed, verify_cache)
    ctx = Context(graph, rule_list, prior, cfg, device, verifier)
    engine = Engine(ctx, np.random.SeedSequence(cfg.seed))
    reason = run_engine(engine, cfg, t0)
    result = build_result(
        ctx, engine.frontier, engine.hv_trace, engine.stats, reason, t0, 1, len(engine.population)
    )
    return _measured(result, measure)


def _check_measure(measure: Any) -> None:
    if not (isinstance(measure, bool | str) or measure is None):
        raise SearchConfigError(
            f"search's measure must be True, False or a torch device name like 'cpu', but got "
            f"{measure!r}."
        )


def _measured(result: SearchResult, measure: bool | str) -> SearchResult:
    if measure is False or measure is None:
        return result
    result.measure(None if measure is True else measure, seed=int(result.config.get("seed", 0)))
    return result


def _mesh_prior(pri: RulePriors, given: Sequence[Rule], used: Sequence[Rule]) -> np.ndarray:
    """Priors resolved over every rule ``given`` (so a file naming a sharding rule stays valid on
    one device), restricted to the rules ``used`` and renormalized."""
    full = dict(zip((r.name for r in given), pri.resolve([r.name for r in given])))
    prior = np.array([full[r.name] for r in used])
    if not prior.sum() > 0:
        raise PriorsError(
            f"The rule priors give zero weight to every rule this search can use "
            f"({[r.name for r in used]}); give one of them a positive weight."
        )
    return prior / prior.sum()


def _check_objectives(cfg: SearchConfig) -> None:
    from rewrite.cost import COST_FIELDS

    bad = [o for o in cfg.objectives if o not in COST_FIELDS]
    if bad:
        raise SearchConfigError(
            f"objectives {bad} are not cost-vector entries; choose from {list(COST_FIELDS)}."
        )


def loop_deadline(cfg: SearchConfig, t0: float) -> float | None:
    """When the search loop must stop (`time.perf_counter` value; None: no time budget): the
    budget from ``t0`` less the share kept for the final checks (`FINAL_CHECK_SHARE`)."""
    if cfg.time_budget is None:
        return None
    return t0 + cfg.time_budget * (1.0 - (FINAL_CHECK_SHARE if cfg.final_check else 0.0))


def stop_reason(engine: Engine, cfg: SearchConfig, t0: float, steps: int) -> str | None:
    """Why the search should stop now, or None to go on."""
    if steps >= cfg.max_steps:
        return "steps"
    end = loop_deadline(cfg, t0)
    if end is not None and time.perf_counter() >= end:
        return "time"
    if engine.exhausted:
        return "exhausted"
    if converged(engine.hv_trace, steps, cfg.window, cfg.epsilon):
        return "converged"
    return None


def converged(
    trace: Sequence[tuple[int, float, float]], steps: int, window: int, eps: float
) -> bool:
    """Whether the hypervolume grew by less than ``eps`` over the last ``window`` steps."""
    if eps <= 0 or steps < window or not trace:
        return False
    then = trace[0][2]
    for s, _, hv in trace:
        if s > steps - window:
            break
        then = hv
    return trace[-1][2] - then < eps


def run_engine(engine: Engine, cfg: SearchConfig, t0: float, max_steps: int | None = None) -> str:
    """Step ``engine`` until a stop rule fires; returns the stop reason."""
    limit = cfg.max_steps if max_steps is None else max_steps
    sub = cfg.replace(max_steps=max(1, limit))
    while True:
        reason = stop_reason(engine, sub, t0, engine.steps)
        if reason is not None:
            return reason
        engine.step()


def final_checks(
    ctx: Context, frontier: Sequence[Entry], stats: Any, end: float | None
) -> tuple[dict[int, str], dict[str, bool]]:
    """Whole-graph checks of the frontier against the input graph, before ``end``.

    Every graph is first checked shape-reduced, then (``final_check_real``) at the real
    shapes while time lasts; a graph that fails either is dropped.

    Returns:
        ``(levels, checks)``: `Solution.checked` level (or ``"failed"``) by ``id(entry)``, and
        graph hash -> verdict of every check that ran.
    """
    cfg, verifier = ctx.config, ctx.verifier
    levels = {id(e): "regions" if e.steps else "input" for e in frontier}
    checks: dict[str, bool] = {}
    todo = [e for e in frontier if e.steps] if cfg.final_check else []
    for reduce in (True, False) if cfg.final_check_real else (True,):
        for e in todo:
            if levels[id(e)] in ("failed", "real"):
                continue
            tv = time.perf_counter()
            try:
                res = verifier.check(ctx.graph, e.graph, reduce=reduce, deadline=end)
            except (VerificationError, EvaluationError) as err:  # an op without semantics
                logger.warning("graph %s cannot be checked whole: %s", e.graph.hash, err)
                continue
            finally:
                stats.times["verify"] += time.perf_counter() - tv
            if not res.checked:
                continue
            checks[e.graph.hash] = res.ok
            levels[id(e)] = res.shapes if res.ok else "failed"
            if not res.ok:
                logger.warning(
                    "graph %s failed its whole-graph check (%s) and is not reported: %s",
                    e.graph.hash,
                    res.shapes,
                    res.detail,
                )
    short = sum(levels[id(e)] == "regions" for e in todo)
    if short:
        logger.warning(
            "%d of %d reported graphs were not checked whole (time budget or memory); they are "
            "marked checked='regions'",
            short,
            len(todo),
        )
    return levels, checks


def build_result(
    ctx: Context,
    frontier: Sequence[Entry],
    hv_trace: list[tuple[int, float, float]],
    stats: Any,
    reason: str,
    t0: float,
    workers: int,
    population: int,
) -> SearchResult:
    """Final checks of the frontier against the input graph, and the `SearchResult`."""
    cfg = ctx.config
    end = None if cfg.time_budget is None else t0 + cfg.time_budget
    levels, checks = final_checks(ctx, frontier, stats, end)
    kept = [e for e in frontier if levels[id(e)] != "failed"]
    kept.sort(key=lambda e: tuple(e.y))
    pareto = [
        Solution(e.graph, dict(e.costs), tuple(float(v) for v in e.y), e.steps, levels[id(e)])
        for e in kept
    ]
    wall = time.perf_counter() - t0
    logger.debug(
        "search done: %d steps, %d Pareto graphs, hypervolume %.4g, stop=%s, %.2f s",
        stats.steps,
        len(pareto),
        hv_trace[-1][2] if hv_trace else 0.0,
        reason,
        wall,
    )
    return SearchResult(
        input_graph=ctx.graph,
        input_cost=ctx.input_costs,
        objectives=ctx.objectives,
        pareto=pareto,
        reference=tuple(float(x) for x in ctx.scale * 1.1),
        hv_trace=list(hv_trace),
        stats=stats,
        rule_names=list(ctx.names),
        priors=dict(zip(ctx.names, (float(p) for p in ctx.prior))),
        config=cfg.to_dict(),
        device=ctx.input_cost.device,
        stop_reason=reason,
        wall_time=wall,
        workers=workers,
        final_checks=checks,
        final_population=population,
        final_failed=len(frontier) - len(kept),
    )
