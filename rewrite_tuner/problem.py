"""The rewrite study's problem: what it tunes and what every evaluation needs beside a
configuration. `build_problem` takes a checked `rewrite_tuner.spec.RewriteStudySpec`
(`rewrite_problem` makes one from its keyword arguments), calibrates the default search on its
workloads (or reuses a calibration), builds the space (the prior family's or the per-rule one,
`rewrite_tuner.space.search_space`, with the step budget and the mesh as `Fixed` parameters) and
the context (the spec and the calibration: `rewrite_tuner.spec.study_context`), and returns both
as a `RewriteProblem`; `lead_configs` and `informed_config` are the configurations a new
prior-family study runs first. Running a configuration on that problem (`evaluate_rewrite`) and
the persistent study around it are in `rewrite_tuner.study`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from rewrite_tuner.calibration import OBJECTIVES, Calibration, calibrate
from rewrite_tuner.spec import (
    CALIBRATION_SEEDS,
    DEFAULT_OBJECTIVES,
    DEFAULT_SEEDS,
    DEFAULT_WORKLOADS,
    RewriteStudySpec,
    prior_space,
    study_context,
)
from studies.errors import StudyError

if TYPE_CHECKING:
    from rewrite.ir import Graph
    from spaces import Space

__all__ = [
    "CALIBRATION_SEEDS",
    "DEFAULT_OBJECTIVES",
    "DEFAULT_SEEDS",
    "DEFAULT_WORKLOADS",
    "LEAD_DESIGN",
    "RewriteProblem",
    "build_problem",
    "informed_config",
    "lead_configs",
    "rewrite_problem",
    "workload_graphs",
]


class RewriteProblem(NamedTuple):
    """What a rewrite study tunes (`space`) and what every evaluation needs beside a
    configuration (`context`: the spec and the calibration, `rewrite_tuner.spec.study_context`)."""

    space: Space
    context: dict[str, Any]


@functools.lru_cache(maxsize=8)
def workload_graphs(workloads: tuple[str, ...]) -> dict[str, Graph]:
    """The graphs of zoo names and model references (`rewrite_tuner.user_model`), built once
    per process (about a second each), by workload name (a reference's ``file:Name``);
    ``workload_graphs.cache_clear()`` forgets them (a model file may have changed)."""
    from rewrite import zoo
    from rewrite_tuner.user_model import is_model_ref, model_ref, user_graph

    return {
        model_ref(w).name if is_model_ref(w) else w: user_graph(w)
        if is_model_ref(w)
        else zoo.build(w)
        for w in workloads
    }


def rewrite_problem(
    workloads: Sequence[str] = DEFAULT_WORKLOADS,
    max_steps: int = 150,
    device: str = "h100",
    seeds: int = DEFAULT_SEEDS,
    tune: Sequence[str] | None = None,
    rules: Sequence[str] | None = None,
    *,
    devices: int = 1,
    priors: str = "family",
    calibration: Calibration | None = None,
    calibration_seeds: int = CALIBRATION_SEEDS,
    race: bool = True,
    objectives: Sequence[str] = tuple(DEFAULT_OBJECTIVES),
    measure: bool | str = False,
    centre: Mapping[str, float] | None = None,
    run_metrics: bool = False,
    workers: int = 1,
) -> RewriteProblem:
    """The space of the rewrite study (tunable knobs, the rule priors) and its context.

    The arguments are those of `rewrite_tuner.spec.RewriteStudySpec` (``max_steps`` is its
    ``budget``; ``objectives`` are names, their directions those of `OBJECTIVES`), checked
    before the calibration runs; `build_problem` takes the spec itself.

    Args:
        calibration: A calibration to reuse (computed when None; the context holds it).
        workers: Calibration searches run at once (the same calibration, sooner).

    Returns:
        The space and the context (`RewriteProblem`): ``evaluate_rewrite(config, context)``
        runs a configuration of the space.

    Raises:
        StudyError: For an argument the spec refuses (`RewriteStudySpec`).
        SearchConfigError: For a knob of ``tune`` that cannot be tuned.
    """
    spec = RewriteStudySpec(
        workloads=workloads,
        objectives={o: OBJECTIVES.get(o, "(unknown)") for o in objectives},
        budget=max_steps,
        device=device,
        devices=devices,
        measure=measure,
        seeds=seeds,
        calibration_seeds=calibration_seeds,
        race=race,
        priors=priors,
        tune=tune,
        rules=rules,
        centre=centre,
        run_metrics=run_metrics,
    )
    return build_problem(spec, calibration, workers)


def build_problem(
    spec: RewriteStudySpec, calibration: Calibration | None = None, workers: int = 1
) -> RewriteProblem:
    """The space and the context of the rewrite study ``spec`` asks for (`rewrite_problem`):
    the calibration runs (unless given) and the prior family is built from its evidence
    (unless the spec centres it)."""
    from rewrite_tuner.prior_family import PriorFamily
    from rewrite_tuner.space import search_space
    from spaces import Fixed, Space

    made = prior_space(spec)
    family, base = made.family, made.space
    if calibration is None:
        calibration = calibrate(
            workload_graphs(spec.workloads),
            spec.budget,
            range(spec.calibration_seeds),
            spec.device,
            spec.devices,
            spec.measure,
            workers,
        )
    if spec.priors == "family" and family is None:
        family = PriorFamily.from_rules(made.catalogue, calibration.evidence)
        base = search_space(list(family.rules), tune=made.knobs, family=family)
    fixed = {"max_steps": Fixed(int(spec.budget)), "devices": Fixed(int(spec.devices))}
    space = Space({**base.params, **fixed})
    return RewriteProblem(space, study_context(spec, calibration.to_dict()))


LEAD_DESIGN = 5
"""Initial-design size of a rewrite study whose first trials are `lead_configs`."""


def lead_configs(space: Space) -> list[dict[str, Any]]:
    """What a new prior-family rewrite study runs first: the defaults, then the family's
    informed member (`informed_config`); nothing for another space."""
    from rewrite_tuner.knobs import PRIOR_WEIGHT

    if PRIOR_WEIGHT not in space.params:
        return []
    return [dict(space.default()), informed_config(space)]


def informed_config(space: Space, knobs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The configuration of a prior-family space (`rewrite_problem`) at the family's informed
    member: weight 1, specificity 0, equal family weights, the other parameters at their
    defaults, except the search knobs of ``knobs`` that the space tunes and whose values it
    holds (a priors file's search config).

    Raises:
        StudyError: If the space is not a prior-family space.
    """
    from rewrite_tuner.knobs import PRIOR_WEIGHT
    from spaces import Fixed

    if PRIOR_WEIGHT not in space.params:
        raise StudyError(f"informed_config needs a prior-family space (with {PRIOR_WEIGHT!r}).")
    member = {PRIOR_WEIGHT: 1.0, "prior_specificity": 0.0}
    member |= {n: 1.0 for n in space.params if n.startswith("family_")}
    config = dict(space.default()) | member
    for knob, value in (knobs or {}).items():
        param = space.params.get(knob)
        if param is None or isinstance(param, Fixed) or knob in member:
            continue
        try:
            param.check(knob, value)
        except ValueError:
            continue  # outside the space: the knob keeps its default
        config[knob] = value
    return {k: v for k, v in config.items() if k in space.params}
