"""The built-in study: tune the rewrite search's knobs and rule priors over `rewrite.zoo` graphs.

A trial runs `rewrite.optimize.search_suite` with the proposed configuration on every workload
of the suite and reports:

- objectives (aggregated over workloads, see `rewrite.optimize.SuiteResult.objectives`):
  ``latency_reduction`` and ``peak_memory_reduction`` (one minus the geometric mean over
  workloads of best / input cost; maximized) and ``search_time`` (total search wall seconds;
  minimized);
- tracking metrics: the search's run metrics summed over workloads (``rule.<name>.<counter>``,
  ``time.*``, ``cache.*``, population and frontier sizes, steps per second, per-workload
  hypervolume and best ratios). The structured surrogate learns from them.

Everything a trial needs besides the tuned parameters lives in one `Fixed` parameter named
``"suite"`` (workloads, device, step budget, search seed). It occupies no GP column, is stored
with the space, and reaches `evaluate_rewrite` inside every configuration, so the evaluate
function is a plain module-level function: worker processes, Dask workers and ``tuner resume``
import it by name and nothing else has to travel.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from studies.errors import StudyError

if TYPE_CHECKING:
    from rewrite.ir import Graph
    from spaces import Space
    from studies.study import Study

__all__ = [
    "DEFAULT_OBJECTIVES",
    "DEFAULT_WORKLOADS",
    "evaluate_rewrite",
    "rewrite_space",
    "rewrite_study",
]

DEFAULT_WORKLOADS = ("gpt2", "bert", "resnet")
"""Small (2-layer) zoo models: a decoder, an encoder and a CNN."""

DEFAULT_OBJECTIVES: dict[str, str] = {
    "latency_reduction": "maximize",
    "peak_memory_reduction": "maximize",
    "search_time": "minimize",
}
"""Objectives `SuiteResult.objectives` reports, with their directions."""

_SUITE = "suite"


def rewrite_space(
    workloads: Sequence[str] = DEFAULT_WORKLOADS,
    max_steps: int = 150,
    device: str = "h100",
    search_seed: int = 0,
    tune: Sequence[str] | None = None,
    rules: Sequence[str] | None = None,
) -> Space:
    """The space of the rewrite study: tunable search knobs, rule priors and the fixed suite.

    Args:
        workloads: `rewrite.zoo` model names (``"gpt2"``, ``"gpt2-full"``, ...).
        max_steps: Search step budget per workload and trial.
        device: Cost-model device profile.
        search_seed: Seed of every search (the same for all trials, so trials differ only by
            their configuration).
        tune: Knobs to tune (`rewrite.optimize.DEFAULT_TUNED` when None).
        rules: Rules whose priors are tuned (the whole verified catalogue when None).

    Raises:
        StudyError: For an unknown workload or an empty suite.
    """
    from rewrite import zoo
    from rewrite.optimize import DEFAULT_TUNED, default_rules, search_space
    from spaces import Fixed, Space

    workloads = list(workloads)
    if not workloads:
        raise StudyError("A rewrite study needs at least one workload, e.g. ('gpt2',).")
    known = set(zoo.names())
    unknown = [w for w in workloads if w.removesuffix("-full") not in known]
    if unknown:
        raise StudyError(
            f"Unknown workloads {unknown}; choose from {sorted(known)} (add '-full' for full size)."
        )
    rule_names = list(rules) if rules is not None else [r.name for r in default_rules()]
    base = search_space(rule_names, tune=tuple(tune) if tune is not None else DEFAULT_TUNED)
    suite = {
        "workloads": workloads,
        "device": device,
        "max_steps": int(max_steps),
        "seed": int(search_seed),
    }
    return Space({**base.params, _SUITE: Fixed(suite)})


@functools.lru_cache(maxsize=8)
def _graphs(workloads: tuple[str, ...]) -> dict[str, Graph]:
    """Zoo graphs, built once per process (building costs about a second each)."""
    from rewrite import zoo

    return {w: zoo.build(w) for w in workloads}


def evaluate_rewrite(config: Mapping[str, Any]) -> dict[str, float]:
    """Run the search with ``config`` on the suite it names; objectives plus run metrics.

    Args:
        config: A configuration of `rewrite_space` (search knobs, ``"priors"`` and ``"suite"``).

    Returns:
        The aggregate objectives and the summed run metrics, in one dict.
    """
    from rewrite.optimize import config_from_params, search_suite

    suite = config[_SUITE]
    params = {k: v for k, v in config.items() if k != _SUITE}
    params["max_steps"] = suite["max_steps"]
    params["seed"] = suite["seed"]
    search_config, priors = config_from_params(params)
    result = search_suite(
        _graphs(tuple(suite["workloads"])), search_config, priors, device=suite["device"]
    )
    return {**result.metrics(), **result.objectives()}


def rewrite_study(
    workloads: Sequence[str] = DEFAULT_WORKLOADS,
    objectives: Mapping[str, str] | None = None,
    budget: int = 150,
    *,
    name: str = "rewrite",
    storage: str = "sqlite:///rewrite-study.db",
    seed: int = 0,
    device: str = "h100",
    constraints: Sequence[str] = (),
    tune: Sequence[str] | None = None,
    rules: Sequence[str] | None = None,
    settings: Any = None,
) -> Study:
    """A `Study` that tunes `rewrite.search` over a suite of `rewrite.zoo` graphs.

    Args:
        workloads: Zoo model names (small by default; ``"<name>-full"`` for full size).
        objectives: Subset of `DEFAULT_OBJECTIVES` (name -> direction); all three when None.
        budget: Search steps per workload per trial.
        name: Study name in the storage.
        storage: SQLAlchemy URL (embedded SQLite by default).
        seed: The tuner's seed (and the searches' seed).
        device: Cost-model device profile.
        constraints: Outcome constraints on objectives or run metrics, e.g.
            ``"search_time <= 20"``.
        tune: Search knobs to tune (`rewrite.optimize.DEFAULT_TUNED` when None).
        rules: Rules whose priors are tuned (the verified catalogue when None).
        settings: `studies.StudySettings` (defaults when None).

    Returns:
        The study (created, or attached to when the storage already holds the same definition).

    Raises:
        StudyError: For unknown workloads or objectives.
    """
    from studies.study import Study

    objectives = dict(objectives) if objectives is not None else dict(DEFAULT_OBJECTIVES)
    unknown = [o for o in objectives if o not in DEFAULT_OBJECTIVES]
    if unknown:
        raise StudyError(
            f"Unknown objectives {unknown}; the rewrite study reports {list(DEFAULT_OBJECTIVES)}."
        )
    space = rewrite_space(workloads, budget, device, seed, tune, rules)
    return Study(
        name,
        space,
        objectives,
        evaluate_rewrite,
        constraints=tuple(constraints),
        storage=storage,
        seed=seed,
        settings=settings,
    )
