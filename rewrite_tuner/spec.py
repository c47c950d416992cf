"""What a rewrite study is asked for, as one validated object, and the context it is stored as.

`RewriteStudySpec` holds the arguments that define a rewrite study: the training workloads, the
objectives and constraints, the step budget, the device and mesh, the seeds, racing, the prior
parameterization, the tuned knobs and rules, the centre of the prior family, and whether each
run's values are reported. It is checked when it is made (`__post_init__`), before anything
expensive runs (the calibration takes minutes), and every entry point builds one from its
keyword arguments and hands it on: `rewrite_tuner.problem.rewrite_problem`,
`rewrite_tuner.study.rewrite_study`, `rewrite_tuner.tune_model.tune_model` and the
``tuner demo`` and ``tuner tune-model`` commands.

A study stores it as its context (`study_context`, ``format_version`` 2), beside the
calibration: ``{"format_version": 2, "spec": {...}, "calibration": {...}}``. `suite_context` is
the one reader of every stored form, the migration of the older ones included: version 1 (no
``format_version``; the flat dict of what a trial reads: workloads, device, seeds, race,
objectives, measure, a digest of the centre, run_metrics, calibration) and the form of studies
written before studies had contexts (that dict as the space's ``Fixed("suite")`` parameter and in
every trial's configuration: `LEGACY_SUITE`). It returns the flat dict a trial reads (its seeds
as a list), whatever the version.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from rewrite_tuner.calibration import COMPILED, MEASURED, OBJECTIVES
from studies.errors import StudyError

if TYPE_CHECKING:
    from spaces import Space

__all__ = [
    "CALIBRATION_SEEDS",
    "CONTEXT_VERSION",
    "DEFAULT_OBJECTIVES",
    "DEFAULT_SEEDS",
    "DEFAULT_WORKLOADS",
    "LEGACY_SUITE",
    "PriorSpace",
    "RewriteStudySpec",
    "prior_space",
    "search_params",
    "study_context",
    "suite_context",
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

CONTEXT_VERSION = 2
"""The ``format_version`` of the context `study_context` writes (module docstring)."""

LEGACY_SUITE = "suite"
"""The parameter that carried the context in studies written before `studies.Study` had one."""


@dataclass(frozen=True)
class RewriteStudySpec:
    """The arguments that define a rewrite study, checked when the spec is made.

    Attributes:
        workloads: `rewrite.zoo` model names of the training suite (``"gpt2"``, ``"gpt2-full"``
            for full size, ...) or references to a user's own models
            (``"path/to/file.py:Name(int64[1,128])"``, `rewrite_tuner.user_model`; made
            canonical: absolute paths).
        objectives: Objective -> direction, a subset of
            `rewrite_tuner.calibration.OBJECTIVES`.
        budget: Search steps per workload and seed.
        device: Cost-model device profile.
        devices: Devices of the mesh; sharding rules only from 2 on.
        measure: Time each run's best graphs on the device (True: CUDA when present, else the
            CPU; or a torch device name such as ``"cuda:1"``), which adds the objective
            ``measured_latency_reduction``; needed when that is one of the objectives. With
            ``"compile"`` the graphs are timed compiled by ``torch.compile`` and the objective
            is ``compiled_speedup`` (the best graph's speedup over the compiled input).
        seeds: Search seeds per trial (the first of the calibration seeds).
        calibration_seeds: Seeds of the calibration (at least ``max(seeds, 2)``).
        race: Race trials against the defaults on their first seed (the docstring of
            `rewrite_tuner.study`).
        priors: ``"family"`` (informed prior family, the default) or ``"rules"`` (one weight
            per rule).
        tune: Knobs to tune (`rewrite.optimize.FAMILY_TUNED`, or `DEFAULT_TUNED` with
            ``priors="rules"``, when None).
        rules: Rules whose priors are tuned with ``priors="rules"`` (default: every rule the
            mesh can use).
        centre: Rule priors to centre the prior family on (`PriorFamily.centred_on`: its
            informed member is these priors, e.g. a priors file tuned on other models) instead
            of the calibration's evidence; ``priors="family"`` only.
        run_metrics: Also report each run's objectives and its counters of `RUN_METRICS`
            (``<name>@<workload>/<seed>``, about 100 numbers per run), the rows a structured
            surrogate with ``StructuredConfig(rows="runs")`` learns from.
        constraints: Outcome constraints on objectives or run metrics, e.g.
            ``"effort <= 1.2"``.

    Sequences are stored as tuples, mappings as dicts (the spec is frozen).

    Raises:
        StudyError: For no or unknown workloads, two workloads of one name, unknown objectives
            or directions, invalid counts, a measured objective without ``measure``, a bad
            ``priors``, ``centre`` or ``rules``, or a malformed constraint.
        SearchConfigError: For a knob of ``tune`` that cannot be tuned.
    """

    workloads: Sequence[str] = DEFAULT_WORKLOADS
    objectives: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_OBJECTIVES))
    budget: int = 150
    device: str = "h100"
    devices: int = 1
    measure: bool | str = False
    seeds: int = DEFAULT_SEEDS
    calibration_seeds: int = CALIBRATION_SEEDS
    race: bool = True
    priors: str = "family"
    tune: Sequence[str] | None = None
    rules: Sequence[str] | None = None
    centre: Mapping[str, float] | None = None
    run_metrics: bool = False
    constraints: Sequence[str] = ()

    def __post_init__(self) -> None:
        objectives = dict(self.objectives)
        unknown = {k: v for k, v in objectives.items() if OBJECTIVES.get(k) != v}
        if unknown:
            raise StudyError(
                f"Unknown objectives or directions {unknown}; the rewrite study reports "
                f"{OBJECTIVES}."
            )
        self._set(
            workloads=tuple(check_workloads(self.workloads)),
            objectives=objectives,
            tune=None if self.tune is None else tuple(self.tune),
            rules=None if self.rules is None else tuple(self.rules),
            centre=None if self.centre is None else dict(self.centre),
            constraints=(self.constraints,)
            if isinstance(self.constraints, str)
            else tuple(self.constraints),
        )
        _check_counts(self.seeds, self.calibration_seeds, self.measure, tuple(objectives))
        _check_priors(self)
        _check_constraints(objectives, self.constraints)

    def _set(self, **values: Any) -> None:
        """Store the canonical forms of fields (the dataclass is frozen)."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (stored in the study's context: `study_context`)."""
        return {f.name: _jsonable(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RewriteStudySpec:
        """Read `to_dict`'s form (checked again)."""
        known = {f.name for f in dataclasses.fields(cls)}
        extra = sorted(set(d) - known)
        if extra:
            raise StudyError(
                f"A rewrite study's stored spec has unknown entries {extra}: it was written by a "
                "newer rewrite-tuner; upgrade rewrite-tuner to open it."
            )
        values: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in d.items()}
        return cls(**values)

    def replace(self, **changes: Any) -> RewriteStudySpec:
        """A copy with ``changes`` (checked again)."""
        return dataclasses.replace(self, **changes)


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


def check_workloads(workloads: Sequence[str], what: str = "A rewrite study") -> list[str]:
    """Zoo names as given, model references made canonical (absolute paths); the graphs' names
    must differ.

    Raises:
        StudyError: For no workloads, an unknown zoo name, a malformed model reference, or two
            workloads of one name.
    """
    from rewrite import zoo
    from rewrite_tuner.user_model import is_model_ref, model_ref

    if isinstance(workloads, str):
        workloads = (workloads,)
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


def _check_counts(
    seeds: int, calibration_seeds: int, measure: bool | str, objectives: Sequence[str]
) -> None:
    """The spec's checks of its counts and its measured objectives."""
    for label, n in (("seeds", seeds), ("calibration_seeds", calibration_seeds)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise StudyError(f"{label} must be an int >= 1, but got {n!r}.")
    if not isinstance(measure, bool | str):
        raise StudyError(
            "measure must be True, False, 'compile' or a torch device name like 'cpu', got "
            f"{measure!r}."
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


def _check_priors(spec: RewriteStudySpec) -> None:
    """What can be checked of the priors arguments without a calibration: ``priors``, the
    centre (the family can be centred on it), the rules (the catalogue holds them on this mesh)
    and the knobs of ``tune`` (`prior_space` builds what they make).

    Raises:
        StudyError: For another ``priors``, ``centre`` without ``priors="family"``, a centre
            the family cannot be centred on, or rules the catalogue does not hold.
        SearchConfigError: For a knob of ``tune`` that cannot be tuned.
    """
    if spec.priors not in ("family", "rules"):
        raise StudyError(f"priors must be 'family' or 'rules', but got {spec.priors!r}.")
    if spec.centre is not None and spec.priors != "family":
        raise StudyError(
            f"centre= gives the prior family's centre: it needs priors='family', but got "
            f"priors={spec.priors!r}; drop centre= or pass priors='family'."
        )
    prior_space(spec)


class PriorSpace(NamedTuple):
    """What `prior_space` makes of a spec without a calibration."""

    catalogue: list[Any]
    """The rules of the mesh."""
    family: Any
    """The centred prior family; None when the calibration's evidence makes it."""
    space: Space
    """The knobs and the priors: the family's, or a per-rule simplex until the family is made."""
    knobs: tuple[str, ...]
    """The knobs tuned."""


def prior_space(spec: RewriteStudySpec) -> PriorSpace:
    """What can be built of the spec's space before a calibration (`PriorSpace`).

    Raises:
        StudyError: For rules the catalogue does not hold on the mesh, or a centre the family
            cannot be centred on.
        SearchConfigError: For a knob of ``tune`` that cannot be tuned.
    """
    from rewrite.optimize import default_rules
    from rewrite.optimize.runner import mesh_rules
    from rewrite_tuner.knobs import DEFAULT_TUNED, FAMILY_TUNED
    from rewrite_tuner.space import search_space

    catalogue = mesh_rules(default_rules(), spec.devices)
    known = [r.name for r in catalogue]
    names = list(spec.rules) if spec.rules is not None else known
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise StudyError(
            f"rules= names rules the catalogue does not hold on this mesh: {unknown}; the "
            f"rules are {sorted(known)}."
        )
    family = _centred(catalogue, spec.centre) if spec.centre is not None else None
    knobs = tuple(spec.tune or (FAMILY_TUNED if spec.priors == "family" else DEFAULT_TUNED))
    base = search_space(names if family is None else list(family.rules), tune=knobs, family=family)
    return PriorSpace(catalogue, family, base, knobs)


def _centred(catalogue: Sequence[Any], centre: Mapping[str, float]) -> Any:
    """`PriorFamily.centred_on`, its errors as `StudyError`."""
    from rewrite.errors import PriorsError
    from rewrite_tuner.prior_family import PriorFamily

    try:
        return PriorFamily.centred_on(catalogue, centre)
    except PriorsError as err:
        raise StudyError(f"Cannot centre the prior family on the priors given: {err}") from None


def _check_constraints(objectives: Mapping[str, str], constraints: Sequence[str]) -> None:
    """Constraints that parse (`tuner.problem.Problem`), as `studies.Study` checks them."""
    from tuner.errors import TunerError
    from tuner.problem import Problem

    try:
        Problem(objectives, constraints)
    except TunerError as err:
        raise StudyError(str(err)) from None


def study_context(spec: RewriteStudySpec, calibration: Mapping[str, Any]) -> dict[str, Any]:
    """The context a rewrite study stores (``format_version`` `CONTEXT_VERSION`): the spec and
    the calibration's `to_dict` form."""
    return {"format_version": CONTEXT_VERSION, "spec": spec.to_dict(), "calibration": calibration}


def suite_context(
    context: Mapping[str, Any] | None, legacy: Mapping[str, Any] | None = None
) -> dict[str, Any] | None:
    """What a trial of a rewrite study reads, from its stored context of any version (the
    module docstring): workloads, device, seeds (a list), race, objectives (a list), measure
    (when on), centre (a digest, when given), run_metrics (when on) and calibration.

    Args:
        context: The study's stored context (None for a study written before contexts).
        legacy: Where such a study carries it: a trial's configuration or the space's
            parameters, whose `LEGACY_SUITE` entry is the context (its `Fixed` parameter).

    Returns:
        The flat context; None when neither holds a rewrite study's.

    Raises:
        StudyError: For a context written by a newer rewrite-tuner.
    """
    if context is None:
        suite = (legacy or {}).get(LEGACY_SUITE)
        suite = getattr(suite, "value", suite)  # a space's `Fixed` parameter, or its value
        return dict(suite) if isinstance(suite, Mapping) and "calibration" in suite else None
    version = context.get("format_version")
    if version is None:  # version 1: the flat dict itself
        return dict(context) if "calibration" in context else None
    if not isinstance(version, int) or version > CONTEXT_VERSION:
        raise StudyError(
            f"This rewrite study's context has format_version {version!r}, newer than this "
            f"rewrite-tuner reads ({CONTEXT_VERSION}); upgrade rewrite-tuner to open it."
        )
    spec, calibration = context["spec"], context["calibration"]  # trusted: checked when made
    digest = _digest(spec["centre"]) if spec.get("centre") is not None else None
    return {
        "workloads": list(spec["workloads"]),
        "device": spec["device"],
        "seeds": [int(s) for s in calibration["seeds"][: spec["seeds"]]],
        "race": bool(spec["race"]),
        "objectives": list(spec["objectives"]),
        **({"measure": spec["measure"]} if spec["measure"] else {}),  # absent: as in version 1
        **({"centre": digest} if digest is not None else {}),
        **({"run_metrics": True} if spec["run_metrics"] else {}),
        "calibration": calibration,
    }


def _digest(priors: Mapping[str, float]) -> str:
    """A short fingerprint of rule priors (the flat context names the centre by it)."""
    text = json.dumps({k: round(float(v), 12) for k, v in sorted(priors.items())})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def search_params(config: Mapping[str, Any]) -> dict[str, Any]:
    """A trial's configuration without the context a study written before contexts carried in
    it (`LEGACY_SUITE`): the parameters of the search (`rewrite.optimize.config_from_params`)."""
    return {k: v for k, v in config.items() if k != LEGACY_SUITE}
