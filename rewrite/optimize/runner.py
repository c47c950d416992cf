"""The search loop's machinery, shared by the one-process search (`rewrite.optimize.api`) and the
island search across processes (`rewrite.optimize.parallel`): rules and verifier set-up, the
stopping rules, the final whole-graph checks and the result.

It sits below both, so neither needs a function-level import of the other.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Sequence
from typing import Any

from rewrite.errors import EvaluationError, VerificationError
from rewrite.optimize.config import FINAL_CHECK_SHARE, SearchConfig
from rewrite.optimize.engine import Context, Engine, Entry
from rewrite.optimize.result import SearchResult, Solution
from rewrite.rules.base import Rule

__all__ = [
    "build_result",
    "converged",
    "default_rules",
    "final_checks",
    "loop_deadline",
    "make_verifier",
    "mesh_rules",
    "rules_from_source",
    "run_engine",
    "stop_reason",
]

logger = logging.getLogger("rewrite.optimize.api")  # one logger for the search, as before


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
    ctx: Context,
    frontier: Sequence[Entry],
    stats: Any,
    end: float | None,
    regions_checked: bool = True,
) -> tuple[dict[int, str], dict[str, bool]]:
    """Whole-graph checks of the frontier against the input graph, before ``end``.

    Every graph is first checked shape-reduced, then (``final_check_real``) at the real
    shapes while time lasts; a graph that fails either is dropped. A graph no whole-graph check
    reached is ``"regions"`` when its rewrites were region-checked (``regions_checked``), else
    ``"none"``.

    Returns:
        ``(levels, checks)``: `Solution.checked` level (or ``"failed"``) by ``id(entry)``, and
        graph hash -> verdict of every check that ran.
    """
    cfg, verifier = ctx.config, ctx.verifier
    unchecked = "regions" if regions_checked else "none"
    # by content, not by steps: an extracted graph (saturation) may differ from the input by
    # rewrites that merged e-classes and created no node, so its steps can be empty
    same = ctx.graph.digest
    levels = {id(e): "input" if e.graph.digest == same else unchecked for e in frontier}
    checks: dict[str, bool] = {}
    todo = [e for e in frontier if levels[id(e)] != "input"] if cfg.final_check else []
    inexact = {r.name for r in ctx.rules if not r.exact}  # checked in float mode (Rule.exact)
    for reduce in (True, False) if cfg.final_check_real else (True,):
        for e in todo:
            if levels[id(e)] in ("failed", "real"):
                continue
            tv = time.perf_counter()
            try:
                mode = "float" if any(st.rule in inexact for st in e.steps) else None
                res = verifier.check(ctx.graph, e.graph, reduce=reduce, deadline=end, mode=mode)
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
    short = sum(levels[id(e)] == unchecked for e in todo)
    if short:
        logger.warning(
            "%d of %d reported graphs were not checked whole (time budget or memory); they are "
            "marked checked=%r",
            short,
            len(todo),
            unchecked,
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
    regions_checked: bool = True,
) -> SearchResult:
    """Final checks of the frontier against the input graph, and the `SearchResult`
    (``regions_checked``: whether every rewrite was region-checked, `final_checks`)."""
    cfg = ctx.config
    end = None if cfg.time_budget is None else t0 + cfg.time_budget
    levels, checks = final_checks(ctx, frontier, stats, end, regions_checked)
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
