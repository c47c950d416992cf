"""The built-in study: tune the rewrite search's knobs and rule priors over `rewrite.zoo` graphs.

Creating the study *calibrates* it once: the default search (uniform priors, default knobs) runs
on every training workload with a few seeds. That gives each workload's `Baseline` (what the
default achieves: the reference of every score), the seed-to-seed noise of each objective, and
the offline benchmark of the rules (`rewrite_tuner.prior_family.RuleEvidence`: how often each rule fired
and how often it lies on the path of a final Pareto graph), from which an informed
`rewrite_tuner.prior_family.PriorFamily` is built. The study's *context* (workloads, devices, seeds,
racing, objectives and the calibration: `rewrite_problem`) is stored once with the study and
handed to `evaluate_rewrite` beside each configuration; the prior family is a `Fixed` parameter
of the space (the search configuration it completes). So trials, resume and export need nothing
else. The context is the study's `rewrite_tuner.spec.RewriteStudySpec` and its calibration,
versioned; contexts of earlier versions, and studies written before the context existed (which
carry it in the space as a ``Fixed("suite")`` parameter), are read through one migration
(`rewrite_tuner.spec.suite_context`, `suite_of`).

The space (`priors="family"`, the default) holds the knobs that matter (`FAMILY_TUNED`), a
prior weight between uniform and informed, a specificity exponent and one weight per rule family:
about a dozen GP columns instead of one per rule (`priors="rules"` keeps the per-rule simplex).
Its default configuration is the search's default. A new study runs the defaults first, then the
family's informed member (weight 1: the calibration's evidence as priors; `lead_configs`), then a
5-point Sobol design (`LEAD_DESIGN`) before the model proposes: on the main job's problem this
raised the median best ``anytime_hv`` by trial 10 from 0.962 to 1.008 (3 tuner seeds, flat GP;
equal by trial 20 and 30: the ``designs`` run of ``benchmarks/results/bench_transfer.json``).
The calibration, the space, the context and these first configurations are built in
`rewrite_tuner.problem`; this module runs trials (`evaluate_rewrite`) and makes the study.

A trial runs the configuration on every workload and search seed (the same seeds for every
trial: common random numbers) and reports, averaged over workloads and seeds, with the standard
error of the mean over seeds as ``<name>.sem`` (pooled with the calibration's noise, so the GP
gets a usable noise level from few seeds):

- ``anytime_hv`` (normalized area under the hypervolume-vs-steps curve; 1 = the default's final
  hypervolume from the first step) and ``final_hv`` (the same at the step budget): maximized,
  the default objectives;
- ``effort`` (rewrites plus verifier checks over the default's), ``latency_reduction``,
  ``peak_memory_reduction`` and ``reach`` (steps to the default's final hypervolume), which a
  study may choose as objectives too;
- with ``measure`` on, ``measured_latency_reduction``: the latency reduction of each run's
  best-predicted graph as timed on the device (CUDA when present, else the CPU;
  `rewrite.optimize.SearchResult.measured_ratio`), an objective grounded in the hardware rather
  than the cost model (the calibration times the defaults' graphs too);
- tracking metrics: the search's run metrics (per-rule counters, phase times, cache rates,
  sizes) averaged over seeds, wall seconds (``search_time``) and ``fidelity.seeds``;
- with ``run_metrics=True``, per-run metrics (``<name>@<workload>/<seed>``,
  `tuner.trial.run_metric`): each run's objectives and its counters of `RUN_METRICS`, the grain
  at which the structured surrogate can learn (``StructuredConfig(rows="runs")``).

With ``priors="rules"`` the study states what it knows about the per-rule space
(`rule_knowledge`): each rule's prior is a candidate parent of that rule's counters, which the
structured surrogate's structure learning may confirm or drop.

Racing (cheap fidelity first): a trial runs its first seed on every workload, and only a
configuration that the defaults do not clearly dominate on that seed (worse by more than one
seed-noise standard deviation in every objective) runs the other seeds. A dominated one is
recorded at that fidelity (``fidelity.seeds`` = 1, with the calibration's noise as its error).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from rewrite_tuner.calibration import (
    OBJECTIVES,
    Calibration,
    calibrate,
    per_seed_objectives,
    timing_threads,
)
from rewrite_tuner.problem import (
    LEAD_DESIGN,
    RewriteProblem,
    build_problem,
    lead_configs,
    rewrite_problem,
    workload_graphs,
)
from rewrite_tuner.spec import (
    CALIBRATION_SEEDS,
    DEFAULT_OBJECTIVES,
    DEFAULT_SEEDS,
    DEFAULT_WORKLOADS,
    RewriteStudySpec,
    search_params,
    suite_context,
)
from studies.errors import StudyConflictError, StudyError

if TYPE_CHECKING:
    from rewrite.optimize import SuiteResult
    from rewrite_tuner.scores import Baseline
    from spaces import Space
    from studies.storage import Storage
    from studies.study import Study

__all__ = [
    "DEFAULT_OBJECTIVES",
    "DEFAULT_WORKLOADS",
    "HELD_OUT_WORKLOADS",
    "OBJECTIVES",
    "RULE_COUNTERS_KNOWN",
    "RUN_METRICS",
    "Calibration",
    "calibrate",
    "RewriteProblem",
    "RewriteStudySpec",
    "evaluate_rewrite",
    "open_rewrite_study",
    "rewrite_problem",
    "rewrite_study",
    "rule_knowledge",
    "stored_study",
    "suite_of",
    "unmodeled_metrics",
]

logger = logging.getLogger(__name__)

HELD_OUT_WORKLOADS = ("llama", "vit")
"""Zoo models of other families, never tuned on: where a tuned configuration is judged."""

RUN_METRICS = (
    "rule.*.fired",
    "rule.*.improved",
    "work.*",
    "dropped.*",
    "steps",
    "frontier.size",
    "population.size",
)
"""`fnmatch` patterns of the run metrics a trial also reports per run (``<name>@<run>``,
beside their aggregate): the counters through which the parameters act (how often each rule
fired and improved the graph, the work done, what was dropped) and the search's sizes; not the
machine-dependent times and cache hits (`unmodeled_metrics`). About 100 numbers per run."""

RULE_COUNTERS_KNOWN = ("fired", "improved")
"""The per-rule counters that `rule_knowledge` names as driven by the rule's own prior."""


def suite_of(study: Study) -> dict[str, Any] | None:
    """What a trial of a rewrite study reads (workloads, seeds, calibration...), from its stored
    context of any version (`rewrite_tuner.spec.suite_context`: the context, or the space's
    ``Fixed("suite")`` parameter of a study written before studies had contexts); None for a
    study that is not a rewrite study."""
    return suite_context(study.context, study.space.params)


def _pooled_sem(values: Sequence[float], prior_sd: float, prior_dof: int) -> float:
    """Standard error of the mean of ``values``: their variance pooled with the calibration's
    (``prior_dof`` degrees of freedom), so one or two seeds still give a sensible error."""
    k = len(values)
    var = prior_sd**2
    if k > 1:
        var = ((k - 1) * float(np.var(values, ddof=1)) + prior_dof * var) / (k - 1 + prior_dof)
    return math.sqrt(var / k)


def _dominated(first: Mapping[str, float], cal: Calibration, objectives: Sequence[str]) -> bool:
    """Whether the defaults beat ``first`` (a trial's first-seed objectives) by more than one
    noise standard deviation in every objective."""
    worse = []
    for name in objectives:
        gap = first[name] - cal.default[name][0]
        sign = 1.0 if OBJECTIVES[name] == "maximize" else -1.0
        worse.append(sign * gap < -cal.noise[name])
    return bool(worse) and all(worse)


def evaluate_rewrite(
    config: Mapping[str, Any], context: Mapping[str, Any] | None = None
) -> dict[str, float]:
    """Run the search with ``config`` on the suite of ``context``; objectives, errors, metrics.

    Args:
        config: A configuration of `rewrite_problem`'s space.
        context: Its context (the study's, of any version: `rewrite_tuner.spec.suite_context`);
            None for a configuration of a study written before studies had contexts, which
            carries it as its ``"suite"`` entry.

    Returns:
        Every entry of `OBJECTIVES` with its ``.sem``, ``search_time``, ``fidelity.seeds`` and the
        run metrics, in one dict.
    """
    from rewrite.optimize import search_suite
    from rewrite_tuner import scores
    from rewrite_tuner.knobs import config_from_params

    suite = suite_context(context, config)
    if suite is None:
        raise StudyError("evaluate_rewrite needs a rewrite study's context (rewrite_problem's).")
    cal = Calibration.from_dict(suite["calibration"])
    search_config, priors = config_from_params(search_params(config))
    graphs = workload_graphs(tuple(suite["workloads"]))
    seeds = list(suite["seeds"])
    measure = suite.get("measure", False)

    objectives = [o for o in suite["objectives"] if o in OBJECTIVES]
    with timing_threads(bool(measure)):
        result = search_suite(
            graphs, search_config, priors, suite["device"], seeds[:1], measure=measure
        )
        first = per_seed_objectives(result, cal.baselines)[0]
        if len(seeds) > 1 and not (suite["race"] and _dominated(first, cal, objectives)):
            rest = search_suite(
                graphs, search_config, priors, suite["device"], seeds[1:], measure=measure
            )
            result = result.extend(rest)
    per_seed = per_seed_objectives(result, cal.baselines)
    out = dict(result.metrics())
    if suite.get("run_metrics"):
        out.update(_run_metrics(result, cal.baselines))
    dof = len(cal.seeds) - 1
    for name in per_seed[0]:
        values = [row[name] for row in per_seed]
        out[name] = float(np.mean(values))
        out[f"{name}.sem"] = _pooled_sem(values, cal.noise[name], dof)
    out["search_time"] = float(np.mean([row["search_time"] for row in scores.per_seed(result)]))
    out["fidelity.seeds"] = float(len(result.seeds))
    return out


def _run_metrics(result: SuiteResult, baselines: Mapping[str, Baseline]) -> dict[str, float]:
    """Each run's objectives (`OBJECTIVES`) and its metrics of `RUN_METRICS`, named
    ``<name>@<workload>/<seed>``."""
    from fnmatch import fnmatchcase

    from rewrite_tuner.scores import per_run
    from tuner.trial import run_metric

    out: dict[str, float] = {}
    for workload, rows in per_run(result, baselines).items():
        for i, row in enumerate(rows):
            label = f"{workload}/{result.seeds[i]}"
            out.update({run_metric(k, label): v for k, v in row.items() if k in OBJECTIVES})
            metrics = result.results[workload][i].metrics()
            out.update(
                {
                    run_metric(k, label): v
                    for k, v in metrics.items()
                    if any(fnmatchcase(k, p) for p in RUN_METRICS)
                }
            )
    return out


def rule_knowledge(space: Space) -> dict[str, Any] | None:
    """What the study knows of a per-rule space (``priors="rules"``): for every rule of its
    ``"priors"`` simplex, candidate edges from the rule's prior (the simplex part
    ``priors.<rule>``) to its counters of `RULE_COUNTERS_KNOWN` (``rule.<rule>.fired``, ...),
    as the dict form of `structure.Knowledge` (``StudySettings.knowledge``). Candidates, not
    required edges: structure learning keeps the ones the trials support. None for another
    space."""
    from spaces import Simplex

    param = space.params.get("priors")
    if not isinstance(param, Simplex):
        return None
    candidates = [
        [f"priors.{rule}", f"rule.{rule}.{counter}"]
        for rule in param.names
        for counter in RULE_COUNTERS_KNOWN
    ]
    return {"candidates": candidates}


def _request(space: Space, context: Mapping[str, Any] | None) -> tuple[list[dict[str, Any]], Any]:
    """What a rewrite study was asked for: its space and what its trials read
    (`rewrite_tuner.spec.suite_context`, of a context of any version) without the measured
    calibration (and the prior family built from it)."""
    suite = suite_context(context, space.params) or {}
    kept = set(search_params(space.params)) - {"prior_model"}
    params = [p for p in space.to_dict()["parameters"] if p["name"] in kept]
    return params, {k: v for k, v in suite.items() if k != "calibration"}


def rewrite_study(
    workloads: Sequence[str] = DEFAULT_WORKLOADS,
    objectives: Mapping[str, str] | None = None,
    budget: int = 150,
    *,
    name: str = "rewrite",
    storage: str = "sqlite:///rewrite-study.db",
    seed: int = 0,
    device: str = "h100",
    devices: int = 1,
    measure: bool | str = False,
    seeds: int = DEFAULT_SEEDS,
    calibration_seeds: int = CALIBRATION_SEEDS,
    race: bool = True,
    priors: str = "family",
    constraints: Sequence[str] = (),
    tune: Sequence[str] | None = None,
    rules: Sequence[str] | None = None,
    settings: Any = None,
    on_calibrate: Callable[[], None] | None = None,
    centre: Mapping[str, float] | None = None,
    lead: bool = True,
    run_metrics: bool = False,
    workers: int = 1,
) -> Study:
    """A `Study` that tunes `rewrite.search` over a suite of `rewrite.zoo` graphs (or a user's
    own models): created and calibrated, or opened when the storage already holds it.

    The arguments are those of `rewrite_tuner.spec.RewriteStudySpec` (``objectives``
    `DEFAULT_OBJECTIVES` when None; ``run_metrics`` on whenever ``settings`` picks the
    ``"grouped"`` surrogate, which models each run's values), checked before anything runs,
    and those of `open_rewrite_study`, which takes the spec itself.

    Raises:
        StudyError: For an argument the spec refuses, or settings that are not a StudySettings.
        StudyConflictError: If the storage holds a study of that name asked for differently.
    """
    spec = RewriteStudySpec(
        workloads=workloads,
        objectives=DEFAULT_OBJECTIVES if objectives is None else objectives,
        budget=budget,
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
        # the grouped surrogate models each workload's runs: it needs them reported
        run_metrics=run_metrics or getattr(settings, "surrogate", None) == "grouped",
        constraints=constraints,
    )
    job = {"name": name, "storage": storage, "seed": seed, "settings": settings}
    return open_rewrite_study(spec, **job, on_calibrate=on_calibrate, lead=lead, workers=workers)


def open_rewrite_study(
    spec: RewriteStudySpec,
    *,
    name: str = "rewrite",
    storage: str | Storage = "sqlite:///rewrite-study.db",
    seed: int = 0,
    settings: Any = None,
    on_calibrate: Callable[[], None] | None = None,
    lead: bool = True,
    workers: int = 1,
) -> Study:
    """The rewrite study ``spec`` asks for: created (calibrated first, module docstring), or
    opened as stored (no recalibration) when ``storage`` holds one named ``name`` asked for
    with the same spec.

    Args:
        spec: What the study tunes and measures.
        name: Study name in the storage.
        storage: SQLAlchemy URL (embedded SQLite by default), or an open `Storage`; it is
            opened once, for the stored study and the study returned.
        seed: The tuner's seed.
        settings: `studies.StudySettings` (defaults when None); the search's
            machine-dependent metrics (`unmodeled_metrics`) are added to its ``ignore_metrics``.
        on_calibrate: Called before a new study's calibration starts (to tell the user).
        lead: A new study with a prior family and no ``centre`` runs the defaults and the
            family's informed member first (`lead_configs`), then a `LEAD_DESIGN`-point design
            unless ``settings`` sizes it; False: the tuner's initial design alone.
        workers: A new study's calibration runs this many searches at once.

    Raises:
        StudyError: For settings that are not a `StudySettings`.
        StudyConflictError: If the storage holds a study of that name asked for differently.
    """
    from studies.settings import StudySettings
    from studies.study import Study

    if settings is not None and not isinstance(settings, StudySettings):
        raise StudyError(f"settings must be a StudySettings, got {type(settings).__name__}.")
    store = _opened(storage)  # one engine for the whole call: the load and the study
    existing = None if isinstance(store, str) else stored_study(name, store)
    if existing is not None:
        space, context = _reopened(existing, spec)
    else:
        if on_calibrate is not None:
            on_calibrate()
        space, context = build_problem(spec, workers=workers)
    settings = _with_rule_knowledge(_ignoring_machine_metrics(settings), space)
    lead = lead and spec.centre is None and bool(lead_configs(space))
    if lead and settings.n_initial is None:
        # on resume too: the settings given must equal the stored ones (else a warning)
        settings = dataclasses.replace(settings, n_initial=LEAD_DESIGN)
    study = Study(
        name,
        space,
        dict(spec.objectives),
        evaluate_rewrite,
        constraints=tuple(spec.constraints),
        storage=store,
        seed=seed,
        settings=settings,
        context=context,
    )
    if lead and existing is None:
        _queue_lead(study)
    return study


def _queue_lead(study: Study) -> None:
    """Queue `lead_configs` into a new study: the defaults and the informed prior first (a
    warm-started study with `StudySettings.warm_start_queue` queued the defaults and the related
    studies' best on creation; what it holds is skipped)."""
    held = [t.config for t in study.trials]
    for config in lead_configs(study.space):
        if study.space.validate({**study.space.default(), **config}) not in held:
            study.enqueue(config)


def _reopened(existing: Study, spec: RewriteStudySpec) -> RewriteProblem:
    """The stored space and context of ``existing``, if it was asked for as ``spec`` asks
    (`_request`: the space built with its stored calibration, and what its trials read).

    Raises:
        StudyConflictError: If it is not a rewrite study, or was asked for differently.
    """
    suite = suite_of(existing)
    if suite is None:
        raise StudyConflictError(
            f"Study {existing.name!r} in {existing.storage.url} is not a rewrite study (it has "
            "no calibrated suite); pick another name."
        )
    asked = _request(*build_problem(spec, Calibration.from_dict(suite["calibration"])))
    if asked != _request(existing.space, existing.context):
        raise StudyConflictError(
            f"The storage {existing.storage.url} holds a rewrite study {existing.name!r} asked "
            "for with other arguments (workloads, budget, seeds, priors, knobs or objectives "
            "differ). Choose another name to start a new study, or repeat the original arguments."
        )
    return RewriteProblem(existing.space, existing.context)  # type: ignore[arg-type]


def unmodeled_metrics() -> tuple[str, ...]:
    """Patterns of the rewrite study's metrics that depend on the machine (wall-clock times,
    the machine-wide verdict cache's hits: `rewrite.optimize.MACHINE_METRICS`, and
    ``search_time``): stored and plotted, never read by the structured surrogate, so what a
    seeded study proposes does not depend on the machine's load or on what ran on it before."""
    from rewrite.optimize import MACHINE_METRICS

    return (*MACHINE_METRICS, "search_time")


def _ignoring_machine_metrics(settings: Any) -> Any:
    """`settings` (defaults when None) with `unmodeled_metrics` added to ``ignore_metrics``;
    anything but a `StudySettings` is passed on for `Study` to refuse (`rewrite_study` checks
    its type before reading it)."""
    from studies.settings import StudySettings

    base = StudySettings() if settings is None else settings
    if not isinstance(base, StudySettings):
        return settings
    patterns = tuple(dict.fromkeys((*base.ignore_metrics, *unmodeled_metrics())))
    return dataclasses.replace(base, ignore_metrics=patterns)


def _with_rule_knowledge(settings: Any, space: Space) -> Any:
    """`settings` with `rule_knowledge`'s candidate edges added to its ``knowledge`` for a
    per-rule space, unless the settings fix the structure; anything but a `StudySettings` (or
    a space without per-rule priors) is passed on as it is."""
    from studies.settings import StudySettings

    known = rule_knowledge(space)
    if known is None or not isinstance(settings, StudySettings) or settings.structure:
        return settings
    given = dict(settings.knowledge or {})
    candidates = [list(e) for e in given.get("candidates", [])]
    forbidden = {tuple(e) for e in given.get("forbidden", [])}
    candidates += [
        e for e in known["candidates"] if e not in candidates and tuple(e) not in forbidden
    ]
    return dataclasses.replace(settings, knowledge={**given, "candidates": candidates})


def _opened(storage: str | Storage) -> str | Storage:
    """``storage`` opened once (its database as it is), or the URL itself when it names no
    database yet (`studies.Study` creates it, after the calibration)."""
    from studies.errors import StorageNotFoundError
    from studies.storage import Storage

    if isinstance(storage, Storage):
        return storage
    try:
        return Storage(storage, create=False)
    except StorageNotFoundError:
        return storage


def stored_study(name: str, storage: str | Storage) -> Study | None:
    """The study ``name`` if ``storage`` (a URL or an open `Storage`) exists and holds it, else
    None."""
    from studies.errors import StorageNotFoundError, StudyNotFoundError
    from studies.study import Study

    try:
        return Study.load(name, storage)
    except (StorageNotFoundError, StudyNotFoundError):
        return None
