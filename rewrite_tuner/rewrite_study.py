"""The built-in study: tune the rewrite search's knobs and rule priors over `rewrite.zoo` graphs.

Creating the study *calibrates* it once: the default search (uniform priors, default knobs) runs
on every training workload with a few seeds. That gives each workload's `Baseline` (what the
default achieves: the reference of every score), the seed-to-seed noise of each objective, and
the offline benchmark of the rules (`rewrite.optimize.RuleEvidence`: how often each rule fired
and how often it lies on the path of a final Pareto graph), from which an informed
`rewrite.optimize.PriorFamily` is built. The study's *context* (workloads, devices, seeds,
racing, objectives and the calibration: `rewrite_problem`) is stored once with the study and
handed to `evaluate_rewrite` beside each configuration; the prior family is a `Fixed` parameter
of the space (the search configuration it completes). So trials, resume and export need nothing
else. Studies written before the context existed carry it in the space as a ``Fixed("suite")``
parameter, and every function here still reads them (`suite_of`).

The space (`priors="family"`, the default) holds the knobs that matter (`FAMILY_TUNED`), a
prior weight between uniform and informed, a specificity exponent and one weight per rule family:
about a dozen GP columns instead of one per rule (`priors="rules"` keeps the per-rule simplex).
Its default configuration is the search's default. A new study runs the defaults first, then the
family's informed member (weight 1: the calibration's evidence as priors; `lead_configs`), then a
5-point Sobol design (`LEAD_DESIGN`) before the model proposes: on the main job's problem this
raised the median best ``anytime_hv`` by trial 10 from 0.962 to 1.008 (3 tuner seeds, flat GP;
equal by trial 20 and 30: the ``designs`` run of ``benchmarks/results/bench_transfer.json``).

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
import functools
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from rewrite_tuner.calibration import (
    COMPILED,
    MEASURED,
    OBJECTIVES,
    Calibration,
    calibrate,
    per_seed_objectives,
    timing_threads,
)
from studies.errors import StudyConflictError, StudyError

if TYPE_CHECKING:
    from rewrite.ir import Graph
    from rewrite.optimize import Baseline, SuiteResult
    from spaces import Space
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
    "evaluate_rewrite",
    "rewrite_problem",
    "rewrite_study",
    "rule_knowledge",
    "suite_of",
    "unmodeled_metrics",
]

logger = logging.getLogger(__name__)

DEFAULT_WORKLOADS = ("gpt2", "bert", "resnet", "t5")
"""The training suite: small (2-layer) zoo models, a decoder, two encoders and a CNN. T5's encoder
is there for its RMS norms: without a model whose patterns a generic fusion can break, nothing in
the suite shows that specific rules should fire first, and the tuned priors did not transfer to
Llama (`benchmarks/bench_transfer.py`)."""

HELD_OUT_WORKLOADS = ("llama", "vit")
"""Zoo models of other families, never tuned on: where a tuned configuration is judged."""

DEFAULT_OBJECTIVES: dict[str, str] = {"anytime_hv": "maximize", "final_hv": "maximize"}
"""The study's objectives unless told otherwise: how fast and how far the search gets."""

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

DEFAULT_SEEDS = 3
"""Search seeds per trial (see `benchmarks/bench_transfer.py` for the noise measurements)."""

CALIBRATION_SEEDS = 5
"""Seeds of the calibration runs of the defaults (the first `DEFAULT_SEEDS` are the trials')."""

_SUITE = "suite"
"""The parameter that carried the context in studies written before `studies.Study` had one."""


class RewriteProblem(NamedTuple):
    """What a rewrite study tunes (`space`) and what every evaluation needs beside a
    configuration (`context`: workloads, device, seeds, racing, objectives, calibration)."""

    space: Space
    context: dict[str, Any]


def suite_of(study: Study) -> dict[str, Any] | None:
    """The context of a rewrite study (workloads, seeds, calibration...): stored with it, or in
    its space's ``Fixed("suite")`` parameter for a study written before studies had contexts;
    None for a study that is not a rewrite study."""
    from spaces import Fixed

    if study.context is not None:
        return study.context if "calibration" in study.context else None
    param = study.space.params.get(_SUITE)
    return param.value if isinstance(param, Fixed) else None


@functools.lru_cache(maxsize=8)
def _graphs(workloads: tuple[str, ...]) -> dict[str, Graph]:
    """The graphs of zoo names and model references (`rewrite_tuner.user_model`), built once
    per process (about a second each), by workload name (a reference's ``file:Name``)."""
    from rewrite import zoo
    from rewrite_tuner.user_model import is_model_ref, model_ref, user_graph

    return {
        model_ref(w).name if is_model_ref(w) else w: user_graph(w)
        if is_model_ref(w)
        else zoo.build(w)
        for w in workloads
    }


def _check_workloads(workloads: Sequence[str], what: str = "A rewrite study") -> list[str]:
    """Zoo names as given, model references made canonical (absolute paths); the graphs' names
    must differ.

    Raises:
        StudyError: For no workloads, an unknown zoo name, a malformed model reference, or two
            workloads of one name.
    """
    from rewrite import zoo
    from rewrite_tuner.user_model import is_model_ref, model_ref

    workloads = [str(model_ref(w)) if is_model_ref(w) else w for w in workloads]
    if not workloads:
        raise StudyError(f"{what} needs at least one workload, e.g. ('gpt2',).")
    known = set(zoo.names())
    unknown = [w for w in workloads if not is_model_ref(w) and w.removesuffix("-full") not in known]
    if unknown:
        raise StudyError(
            f"Unknown workloads {unknown}; choose from {sorted(known)} (add '-full' for full "
            "size), or name your own model as 'path/to/file.py:Name(int64[1,128])'."
        )
    names = [model_ref(w).name if is_model_ref(w) else w for w in workloads]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise StudyError(f"Workloads {twice} are named twice; each workload must differ.")
    return workloads


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
) -> RewriteProblem:
    """The space of the rewrite study (tunable knobs, the rule priors) and its context.

    Args:
        workloads: `rewrite.zoo` model names of the training suite (``"gpt2"``,
            ``"gpt2-full"``, ...) or model references (`rewrite_tuner.user_model`).
        max_steps: Search step budget per workload and seed.
        device: Cost-model device profile.
        seeds: Search seeds per trial (the first of the calibration seeds).
        tune: Knobs to tune (`rewrite.optimize.FAMILY_TUNED`, or `DEFAULT_TUNED` with
            ``priors="rules"``, when None).
        rules: Rules whose priors are tuned with ``priors="rules"`` (default: every rule the
            mesh can use).
        devices: Devices of the mesh; sharding rules only from 2 on.
        priors: ``"family"`` (informed prior family, the default) or ``"rules"`` (one weight
            per rule).
        calibration: A calibration to reuse (computed when None; the context holds it).
        calibration_seeds: Seeds of the calibration (at least ``max(seeds, 2)``).
        race: Race trials against the defaults on their first seed (module docstring).
        objectives: The objectives racing compares (the study's).
        measure: Time each run's best graphs on the device (True: CUDA when present, else the
            CPU; or a torch device name such as ``"cuda:1"``), which adds the objective
            ``measured_latency_reduction``; needed when that is one of ``objectives``. With
            ``"compile"`` the graphs are timed compiled by ``torch.compile`` and the objective
            is ``compiled_speedup`` (the best graph's speedup over the compiled input).
        centre: Rule priors to centre the prior family on (`PriorFamily.centred_on`: its
            informed member is these priors, e.g. a priors file tuned on other models) instead
            of the calibration's evidence; ``priors="family"`` only.
        run_metrics: Also report each run's objectives and its counters of `RUN_METRICS`
            (``<name>@<workload>/<seed>``, about 100 numbers per run), the rows a structured
            surrogate with ``StructuredConfig(rows="runs")`` learns from. Off by default: a
            study's surrogate reads the trials' aggregates.

    Returns:
        The space and the context (`RewriteProblem`): ``evaluate_rewrite(config, context)``
        runs a configuration of the space.

    Raises:
        StudyError: For an unknown workload, an empty suite, invalid counts, or the measured
            objective without ``measure``.
    """
    from rewrite.optimize import DEFAULT_TUNED, FAMILY_TUNED, PriorFamily, default_rules
    from rewrite.optimize.runner import mesh_rules
    from rewrite_tuner.space import search_space
    from spaces import Fixed, Space

    workloads = _check_workloads(workloads)
    if priors not in ("family", "rules"):
        raise StudyError(f"priors must be 'family' or 'rules', but got {priors!r}.")
    for label, n in (("seeds", seeds), ("calibration_seeds", calibration_seeds)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise StudyError(f"{label} must be an int >= 1, but got {n!r}.")
    if not isinstance(measure, bool | str):
        raise StudyError(
            f"measure must be True, False, 'compile' or a torch device name like 'cpu', got {measure!r}."
        )
    if MEASURED in objectives and (not measure or measure == "compile"):
        raise StudyError(
            f"The objective {MEASURED!r} times the search's graphs on a device: pass "
            "measure=True (CUDA when present, else the CPU) or a torch device name."
        )
    if COMPILED in objectives and measure != "compile":
        raise StudyError(
            f"The objective {COMPILED!r} times the search's best graph against the input, both "
            "compiled by torch.compile: pass measure='compile'."
        )
    if calibration_seeds < max(seeds, 2):
        raise StudyError(
            f"calibration_seeds must be at least max(seeds, 2) = {max(seeds, 2)} (the trials' "
            f"seeds are the first calibration seeds), but got {calibration_seeds}."
        )
    if calibration is None:
        calibration = calibrate(
            _graphs(tuple(workloads)),
            max_steps,
            range(calibration_seeds),
            device,
            devices,
            measure,
        )
    catalogue = mesh_rules(default_rules(), devices)
    if centre is not None and priors != "family":
        raise StudyError("centre= gives the prior family's centre: it needs priors='family'.")
    if priors == "family":
        family = (
            PriorFamily.from_rules(catalogue, calibration.evidence)
            if centre is None
            else _centred(catalogue, centre)
        )
        base = search_space(list(family.rules), tune=tuple(tune or FAMILY_TUNED), family=family)
    else:
        names = list(rules) if rules is not None else [r.name for r in catalogue]
        base = search_space(names, tune=tuple(tune or DEFAULT_TUNED))
    context = {
        "workloads": list(workloads),
        "device": device,
        "seeds": list(calibration.seeds[:seeds]),
        "race": bool(race),
        "objectives": list(objectives),
        **({"measure": measure} if measure else {}),  # absent: studies from before it existed
        **({"centre": _digest(centre)} if centre is not None else {}),
        **({"run_metrics": True} if run_metrics else {}),
        "calibration": calibration.to_dict(),
    }
    space = Space(
        {**base.params, "max_steps": Fixed(int(max_steps)), "devices": Fixed(int(devices))}
    )
    return RewriteProblem(space, context)


LEAD_DESIGN = 5
"""Initial-design size of a rewrite study whose first trials are `lead_configs`."""


def lead_configs(space: Space) -> list[dict[str, Any]]:
    """What a new prior-family rewrite study runs first: the defaults, then the family's
    informed member (`informed_config`); nothing for another space."""
    from rewrite.optimize.config import PRIOR_WEIGHT

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
    from rewrite.optimize.config import PRIOR_WEIGHT
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


def _centred(catalogue: Sequence[Any], centre: Mapping[str, float]) -> Any:
    """`PriorFamily.centred_on`, its errors as `StudyError`."""
    from rewrite.errors import PriorsError
    from rewrite.optimize import PriorFamily

    try:
        return PriorFamily.centred_on(catalogue, centre)
    except PriorsError as err:
        raise StudyError(f"Cannot centre the prior family on the priors given: {err}") from None


def _digest(priors: Mapping[str, float]) -> str:
    """A short fingerprint of rule priors (the context names the centre by it)."""
    import hashlib
    import json

    text = json.dumps({k: round(float(v), 12) for k, v in sorted(priors.items())})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


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
        context: Its context (the study's); None for a configuration of a study written before
            studies had contexts, which carries it as its ``"suite"`` entry.

    Returns:
        Every entry of `OBJECTIVES` with its ``.sem``, ``search_time``, ``fidelity.seeds`` and the
        run metrics, in one dict.
    """
    from rewrite.optimize import config_from_params, search_suite

    suite = config[_SUITE] if context is None else context
    cal = Calibration.from_dict(suite["calibration"])
    search_config, priors = config_from_params({k: v for k, v in config.items() if k != _SUITE})
    graphs = _graphs(tuple(suite["workloads"]))
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
    out["search_time"] = float(np.mean([row["search_time"] for row in result.per_seed(None)]))
    out["fidelity.seeds"] = float(len(result.seeds))
    return out


def _run_metrics(result: SuiteResult, baselines: Mapping[str, Baseline]) -> dict[str, float]:
    """Each run's objectives (`OBJECTIVES`) and its metrics of `RUN_METRICS`, named
    ``<name>@<workload>/<seed>``."""
    from fnmatch import fnmatchcase

    from tuner.trial import run_metric

    out: dict[str, float] = {}
    for workload, rows in result.per_run(baselines).items():
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


def _request(space: Space, suite: Mapping[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """What a rewrite study was asked for: its space and context without the measured
    calibration (and the prior family built from it), the same for a study written before
    studies had contexts (whose space carries the context as ``"suite"``)."""
    params = [p for p in space.to_dict()["parameters"] if p["name"] not in ("prior_model", _SUITE)]
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
) -> Study:
    """A `Study` that tunes `rewrite.search` over a suite of `rewrite.zoo` graphs.

    A new study is calibrated first (module docstring); an existing one of that name is opened
    as stored (no recalibration) when it was asked for with the same arguments.

    Args:
        workloads: Zoo model names of the training suite (``"<name>-full"`` for full size), or
            references to a user's own models (``"path/to/file.py:Name(int64[1,128])"``,
            `rewrite_tuner.user_model`).
        objectives: Subset of `OBJECTIVES` (name -> direction); `DEFAULT_OBJECTIVES` when None.
        budget: Search steps per workload and seed.
        name: Study name in the storage.
        storage: SQLAlchemy URL (embedded SQLite by default).
        seed: The tuner's seed.
        device: Cost-model device profile.
        devices: Devices of the mesh (sharding rules only from 2 on).
        measure: Time each run's best graphs on the device (see `rewrite_problem`); required for
            the objective ``measured_latency_reduction``.
        seeds: Search seeds per trial.
        calibration_seeds: Seeds of the calibration runs.
        race: Race trials against the defaults on their first seed.
        priors: ``"family"`` or ``"rules"`` (see `rewrite_problem`).
        constraints: Outcome constraints on objectives or run metrics, e.g. ``"effort <= 1.2"``.
        tune: Search knobs to tune.
        rules: Rules whose priors are tuned with ``priors="rules"``.
        settings: `studies.StudySettings` (defaults when None); the search's
            machine-dependent metrics (`unmodeled_metrics`) are added to its ``ignore_metrics``.
        on_calibrate: Called before a new study's calibration starts (to tell the user).
        centre: Rule priors to centre the prior family on (see `rewrite_problem`).
        lead: A new study with a prior family and no ``centre`` runs the defaults and the
            family's informed member first (`lead_configs`), then a `LEAD_DESIGN`-point design
            unless ``settings`` sizes it; False: the tuner's initial design alone.
        run_metrics: Also report each run's values (see `rewrite_problem`); on whenever
            ``settings`` picks the ``"grouped"`` surrogate, which models them.

    Returns:
        The study (created, or opened when the storage already holds it).

    Raises:
        StudyError: For unknown workloads or objectives.
        StudyConflictError: If the storage holds a study of that name asked for differently.
    """
    from studies.study import Study

    objectives = dict(objectives) if objectives is not None else dict(DEFAULT_OBJECTIVES)
    unknown = {k: v for k, v in objectives.items() if OBJECTIVES.get(k) != v}
    if unknown:
        raise StudyError(
            f"Unknown objectives or directions {unknown}; the rewrite study reports {OBJECTIVES}."
        )
    _check_workloads(workloads)
    args: dict[str, Any] = {
        "workloads": workloads,
        "max_steps": budget,
        "device": device,
        "seeds": seeds,
        "tune": tune,
        "rules": rules,
        "devices": devices,
        "priors": priors,
        "calibration_seeds": calibration_seeds,
        "race": race,
        "objectives": tuple(objectives),
        "measure": measure,
        "centre": centre,
        # the grouped surrogate models each workload's runs: it needs them reported
        "run_metrics": run_metrics or getattr(settings, "surrogate", None) == "grouped",
    }
    existing = _stored(name, storage)
    if existing is not None:
        spec = suite_of(existing)
        if spec is None:
            raise StudyConflictError(
                f"Study {name!r} in {existing.storage.url} is not a rewrite study (it has no "
                "calibrated suite); pick another name."
            )
        stored = _request(existing.space, spec)
        cal = Calibration.from_dict(spec["calibration"])
        asked = _request(*rewrite_problem(**args, calibration=cal))
        if asked != stored:
            raise StudyConflictError(
                f"The storage {existing.storage.url} holds a rewrite study {name!r} asked for "
                "with other arguments (workloads, budget, seeds, priors, knobs or objectives "
                "differ). "
                "Choose another name to start a new study, or repeat the original arguments."
            )
        space, context = existing.space, existing.context  # None: the space carries it
    else:
        if on_calibrate is not None:
            on_calibrate()
        space, context = rewrite_problem(**args)
    settings = _with_rule_knowledge(_ignoring_machine_metrics(settings), space)
    lead = lead and existing is None and centre is None and bool(lead_configs(space))
    from studies.settings import StudySettings

    if lead and isinstance(settings, StudySettings) and settings.n_initial is None:
        settings = dataclasses.replace(settings, n_initial=LEAD_DESIGN)
    study = Study(
        name,
        space,
        objectives,
        evaluate_rewrite,
        constraints=tuple(constraints),
        storage=storage,
        seed=seed,
        settings=settings,
        context=context,
    )
    if lead and not study.trials:  # a new study: the defaults and the informed prior first
        for config in lead_configs(space):
            study.enqueue(config)
    return study


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


def _stored(name: str, storage: str) -> Study | None:
    """The study ``name`` if ``storage`` exists and holds it, else None."""
    from studies.errors import StorageNotFoundError, StudyNotFoundError
    from studies.study import Study

    try:
        return Study.load(name, storage)
    except (StorageNotFoundError, StudyNotFoundError):
        return None
