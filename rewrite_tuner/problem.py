"""The rewrite study's problem: what it tunes and what every evaluation needs beside a
configuration. `rewrite_problem` checks the training workloads (zoo names or model references),
calibrates the default search on them (or reuses a calibration), builds the space (the prior
family's or the per-rule one, `rewrite_tuner.space.search_space`, with the step budget and the
mesh as `Fixed` parameters) and the context (workloads, device, seeds, racing, objectives,
calibration), and returns both as a `RewriteProblem`; `lead_configs` and `informed_config` are
the configurations a new prior-family study runs first. Running a configuration on that problem
(`evaluate_rewrite`) and the persistent study around it are in `rewrite_tuner.rewrite_study`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from rewrite_tuner.calibration import COMPILED, MEASURED, Calibration, calibrate
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
    "informed_config",
    "lead_configs",
    "rewrite_problem",
]

DEFAULT_WORKLOADS = ("gpt2", "bert", "resnet", "t5")
"""The training suite: small (2-layer) zoo models, a decoder, two encoders and a CNN. T5's encoder
is there for its RMS norms: without a model whose patterns a generic fusion can break, nothing in
the suite shows that specific rules should fire first, and the tuned priors did not transfer to
Llama (`benchmarks/bench_transfer.py`)."""

DEFAULT_OBJECTIVES: dict[str, str] = {"anytime_hv": "maximize", "final_hv": "maximize"}
"""The study's objectives unless told otherwise: how fast and how far the search gets."""

DEFAULT_SEEDS = 3
"""Search seeds per trial (see `benchmarks/bench_transfer.py` for the noise measurements)."""

CALIBRATION_SEEDS = 5
"""Seeds of the calibration runs of the defaults (the first `DEFAULT_SEEDS` are the trials')."""


class RewriteProblem(NamedTuple):
    """What a rewrite study tunes (`space`) and what every evaluation needs beside a
    configuration (`context`: workloads, device, seeds, racing, objectives, calibration)."""

    space: Space
    context: dict[str, Any]


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
    workers: int = 1,
) -> RewriteProblem:
    """The space of the rewrite study (tunable knobs, the rule priors) and its context.

    Args:
        workloads: `rewrite.zoo` model names of the training suite (``"gpt2"``,
            ``"gpt2-full"``, ...) or model references (`rewrite_tuner.user_model`).
        max_steps: Search step budget per workload and seed.
        device: Cost-model device profile.
        seeds: Search seeds per trial (the first of the calibration seeds).
        tune: Knobs to tune (`rewrite_tuner.knobs.FAMILY_TUNED`, or `DEFAULT_TUNED` with
            ``priors="rules"``, when None).
        rules: Rules whose priors are tuned with ``priors="rules"`` (default: every rule the
            mesh can use).
        devices: Devices of the mesh; sharding rules only from 2 on.
        priors: ``"family"`` (informed prior family, the default) or ``"rules"`` (one weight
            per rule).
        calibration: A calibration to reuse (computed when None; the context holds it).
        calibration_seeds: Seeds of the calibration (at least ``max(seeds, 2)``).
        race: Race trials against the defaults on their first seed (the docstring of
            `rewrite_tuner.rewrite_study`).
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
        workers: Calibration searches run at once (the same calibration, sooner).

    Returns:
        The space and the context (`RewriteProblem`): ``evaluate_rewrite(config, context)``
        runs a configuration of the space.

    Raises:
        StudyError: For an unknown workload, an empty suite, invalid counts, the measured
            objective without ``measure``, or a bad ``priors``, ``centre`` or ``rules``; every
            argument is checked before the calibration runs.
        SearchConfigError: For a knob of ``tune`` that cannot be tuned.
    """
    from rewrite.optimize import default_rules
    from rewrite.optimize.runner import mesh_rules
    from rewrite_tuner.knobs import DEFAULT_TUNED, FAMILY_TUNED
    from rewrite_tuner.prior_family import PriorFamily
    from rewrite_tuner.space import search_space
    from spaces import Fixed, Space

    workloads = _check_workloads(workloads)
    _check_counts(seeds, calibration_seeds, measure, objectives)
    catalogue = mesh_rules(default_rules(), devices)
    family, names = _prior_space(catalogue, priors, centre, rules)  # before calibrating: minutes
    knobs = tuple(tune or (FAMILY_TUNED if priors == "family" else DEFAULT_TUNED))
    base = search_space(names if family is None else list(family.rules), tune=knobs, family=family)
    if calibration is None:
        calibration = calibrate(
            _graphs(tuple(workloads)),
            max_steps,
            range(calibration_seeds),
            device,
            devices,
            measure,
            workers,
        )
    if priors == "family" and family is None:
        family = PriorFamily.from_rules(catalogue, calibration.evidence)
        base = search_space(list(family.rules), tune=knobs, family=family)
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


def _check_counts(
    seeds: int, calibration_seeds: int, measure: bool | str, objectives: Sequence[str]
) -> None:
    """`rewrite_problem`'s checks of its counts and its measured objectives."""
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


def _prior_space(
    catalogue: Sequence[Any],
    priors: str,
    centre: Mapping[str, float] | None,
    rules: Sequence[str] | None,
) -> tuple[Any, list[str]]:
    """What `rewrite_problem` can check of its priors arguments without a calibration: the
    centred family (None when the calibration's evidence makes it) and the per-rule names.

    Raises:
        StudyError: For another ``priors``, ``centre`` without ``priors="family"``, a centre
            the family cannot be centred on, or rules the catalogue does not hold.
    """
    if priors not in ("family", "rules"):
        raise StudyError(f"priors must be 'family' or 'rules', but got {priors!r}.")
    if centre is not None and priors != "family":
        raise StudyError(
            f"centre= gives the prior family's centre: it needs priors='family', but got "
            f"priors={priors!r}; drop centre= or pass priors='family'."
        )
    known = [r.name for r in catalogue]
    names = list(rules) if rules is not None else known
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise StudyError(
            f"rules= names rules the catalogue does not hold on this mesh: {unknown}; the "
            f"rules are {sorted(known)}."
        )
    family = _centred(catalogue, centre) if centre is not None else None
    return family, names


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


def _centred(catalogue: Sequence[Any], centre: Mapping[str, float]) -> Any:
    """`PriorFamily.centred_on`, its errors as `StudyError`."""
    from rewrite.errors import PriorsError
    from rewrite_tuner.prior_family import PriorFamily

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
