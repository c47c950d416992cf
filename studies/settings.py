"""`StudySettings`: how a study runs (heartbeats, staleness, tuner budget), stored with the study."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from studies.errors import StudySettingsError
from studies.tuning import AUTO, check_kind

__all__ = ["StudySettings"]


# Settings stored before a field existed take these values (their study runs on as it ran): a
# warm-started study stored before `warm_start_queue` queued nothing itself, and its gate
# kept a related study whose summed leave-one-out advantage was positive.
LEGACY: dict[str, Any] = {
    "warm_start_queue": 0,
    "warm_start_gate": 0.0,
    "warm_start_suggest": 0,
    "warm_start_rank": 0,
}
# the keys of `Knowledge.to_dict`
KNOWLEDGE_KEYS = ("required", "forbidden", "formulas", "phase_order", "candidates")


@dataclass(frozen=True)
class StudySettings:
    """Run-time settings every process driving the study agrees on (they are stored with it).

    Attributes:
        heartbeat_interval: Seconds between a driving process's heartbeats for its RUNNING trials.
        grace_period: A RUNNING trial whose heartbeat is older than this many seconds is declared
            stale: it becomes FAILED and its config is re-queued as a WAITING trial. Must exceed
            twice ``heartbeat_interval`` plus the longest tuner proposal.
        reap_dead_local_workers: Also declare stale, without waiting for the grace period, the
            trials of a driving process on this host whose process id no longer exists. Turn off
            when several machines that share one hostname drive one study.
        n_initial: Size of the tuner's Sobol initial design (``None``: the tuner's default).
        tuner_options: Keyword arguments of `tuner.options.TunerOptions` (acquisition budget),
            e.g. ``{"num_restarts": 2, "raw_samples": 64}`` for quick tests.
        surrogate: ``"auto"`` (the structured surrogate, `structure.StructuredSurrogate`, once
            completed trials report tracking metrics; the flat GP otherwise), ``"structured"``,
            ``"flat"``, ``"saas"`` (`tuner.SaasSurrogate`, for spaces of many columns) or
            ``"grouped"`` (`tuner.GroupedSurrogate`: each objective modelled per run group, a
            workload, as tasks of a multi-task GP, then averaged; it needs trials that report
            per-run values, ``<objective>@<group>/<run>``). The structured surrogate itself
            falls back to the flat GP while its GP network orders held-out trials worse (see
            `structure.explain`).
        max_repeated_failures: Stop `Study.optimize` (with `RepeatedFailureError`) once this
            many trials in a row failed with the same error (numbers in the message aside): a
            broken evaluate, or a constraint metric it never returns, should not burn the
            budget. 0 never stops.
        ignore_metrics: `fnmatch` patterns of tracking metrics the structured surrogate never
            reads (`structure.StructuredConfig.ignore_metrics`); they are still stored and
            plotted. For metrics that change from run to run of one configuration, such as wall
            seconds: `rewrite_tuner.study` adds the search's (`unmodeled_metrics`).
        knowledge: Expert knowledge for the structured surrogate's structure learning
            (`structure.Knowledge`), as a `Knowledge` or its dict form (`Knowledge.to_dict`:
            ``required`` and ``forbidden`` ``[source, target]`` edges, ``formulas``,
            ``phase_order``, ``candidates``), e.g. ``{"required": [["acceptance_rate", "gain"]]}``:
            edges the learned structure must or must not have (``candidates``: edges it tries
            first and keeps where the trials support them). Stored as that dict; its names are checked
            against the space, the objectives and the reported metrics when the tuner is
            built and at each structure checkpoint.
        structure: A known structure for the structured surrogate to use instead of learning
            one, as ``[source, target]`` edges, e.g. ``[["temperature", "acceptance_rate"],
            ["acceptance_rate", "gain"], ["mutations", "gain"]]``: names of the space's
            parameters (or a `Simplex`'s columns, ``"priors.fuse"``) are parameter nodes, the
            objectives objective nodes, any other name a reported metric; every objective
            needs an edge into it. The surrogate still falls back to the flat GP while the
            network predicts clearly worse. Give either this or ``knowledge``.
        warm_start: Finished studies whose trials inform this one's model, as names (same
            storage) or ``{"study": name, "storage": url}`` dicts: their completed trials,
            mapped onto this space by parameter name, are related tasks of a multi-task GP that
            keeps each only while it predicts this study's trials better than the flat GP
            (`studies.warmstart`, `tuner.warmstart.WarmStartSurrogate`). It replaces
            ``surrogate``. By default a new study runs its initial design as a cold study does,
            and after its third trial looks once whether a related study orders those trials
            as they came out (``warm_start_rank``); if it does, that study's two best
            configurations are proposed next (``warm_start_suggest``), else never. The model,
            related trials included, proposes from the first proposal on while its gate keeps a
            related study (the initial design's points are skipped then;
            `tuner.Surrogate.informed`); while it keeps none, the design runs as in a cold
            study. Chosen on the design split of `benchmarks/bench_families.py`
            (docs/families.md, "The rank rule").
        warm_start_model: How the related studies' trials inform the model: ``"mtgp"`` (a
            multi-task GP, `tuner.warmstart.WarmStartSurrogate`) or ``"rgpe"`` (a
            ranking-weighted ensemble of per-study GPs, `tuner.rgpe.RGPESurrogate`). The
            multi-task GP is the default (measured in docs/studies.md, "Studies: define, run,
            resume, export", the warm-start table).
        warm_start_queue: Best configurations of each related study (ranked as
            `studies.pareto.rank_pareto` ranks its trials) queued when the study is created
            (`studies.warmstart.queue_related`), after the space's default configuration when
            the initial design starts with it; 0 queues none.
        warm_start_suggest: Best configurations of each related study (ranked likewise)
            proposed later, once the study has shown it helps: the model's gate keeps it, or its
            best configuration, tried here (queued), is on this study's Pareto front. Untried
            ones come before the model's own proposals and the initial design's points
            (`tuner.warmstart.suggestions`); 0 proposes none. With ``warm_start_queue`` 0, a
            related study the gate never keeps costs no trial; with 1, its best is a probe.
        warm_start_rank: How a related study shows it helps, for ``warm_start_suggest``: 0, as
            above; ``k >= 2``, its own GP orders this study's first ``k`` completed trials as
            they came out, on every objective (`tuner.warmstart.ranks_alike`): one look, after
            the ``k``-th trial, that a misleading study fails and an unrelated one rarely passes.
        warm_start_gate: How sure the multi-task GP's gate must be that a related study
            predicts this one's trials better than the flat GP before it is used
            (`tuner.warmstart.WarmStartSurrogate`'s ``gate``: the mean per-trial leave-one-out
            advantage plus this many standard errors must be above zero). -1.64, a one-sided
            95% lower confidence bound, by measurement on the design split of
            `benchmarks/bench_families.py` (docs/families.md).
    """

    heartbeat_interval: float = 10.0
    grace_period: float = 60.0
    reap_dead_local_workers: bool = True
    n_initial: int | None = None
    tuner_options: Mapping[str, Any] = field(default_factory=dict)
    surrogate: str = "auto"
    max_repeated_failures: int = 5
    ignore_metrics: tuple[str, ...] = ()
    knowledge: Mapping[str, Any] | None = None
    structure: Sequence[Sequence[str]] | None = None
    warm_start: Sequence[Any] = ()
    warm_start_model: str = "mtgp"
    warm_start_queue: int = 0
    warm_start_gate: float = -1.64
    warm_start_suggest: int = 2
    warm_start_rank: int = 3

    def __post_init__(self) -> None:
        self._check_model_inputs()
        self._check_kinds()
        self._check_run_times()
        self._check_counts()
        self._check_tuner_options()

    def _check_model_inputs(self) -> None:
        """Normalize and check what the surrogate reads besides the trials: the related
        studies, the knowledge or fixed structure, the ignored metrics."""
        from studies.warmstart import check_entries

        object.__setattr__(self, "warm_start", check_entries(self.warm_start))
        object.__setattr__(self, "knowledge", _knowledge_dict(self.knowledge))
        if self.structure is not None:
            edges = _name_pairs(self.structure, "structure")
            if not edges:
                raise StudySettingsError(
                    "StudySettings.structure must hold at least one [source, target] edge "
                    "(None: learn the structure)."
                )
            if self.knowledge is not None:
                raise StudySettingsError(
                    "Give StudySettings.knowledge (edges the learned structure must or must not "
                    "have) or StudySettings.structure (a fixed structure, nothing learned), not "
                    "both."
                )
            object.__setattr__(self, "structure", edges)
        from tuner.errors import InvalidArgumentError
        from tuner.trial import metric_patterns

        try:
            patterns = metric_patterns(self.ignore_metrics, "StudySettings.ignore_metrics")
        except InvalidArgumentError as err:
            raise StudySettingsError(str(err)) from None
        object.__setattr__(self, "ignore_metrics", patterns)

    def _check_kinds(self) -> None:
        """The surrogate and warm-start kinds (`tuner.kinds`) and the warm start's numbers."""
        if self.surrogate != AUTO:
            check_kind("surrogate", self.surrogate)
        check_kind("warm_start_model", self.warm_start_model, warm_start=True)
        _check_count("warm_start_queue", self.warm_start_queue, " (0: queue nothing)")
        _check_count("warm_start_suggest", self.warm_start_suggest, " (0: suggest nothing)")
        _check_count("warm_start_rank", self.warm_start_rank, " (0: the gate's rule)")
        if self.warm_start_rank == 1:
            raise StudySettingsError(
                "StudySettings.warm_start_rank must be 0 or at least 2 (a ranking needs two "
                "trials), got 1."
            )
        gate = self.warm_start_gate
        if isinstance(gate, bool) or not isinstance(gate, int | float) or not math.isfinite(gate):
            raise StudySettingsError(
                f"StudySettings.warm_start_gate must be a finite number, got {gate!r}."
            )

    def _check_run_times(self) -> None:
        """Heartbeats, the grace period, and the reaping of dead local workers."""
        for name in ("heartbeat_interval", "grace_period"):
            value = getattr(self, name)
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                raise StudySettingsError(
                    f"StudySettings.{name} must be a finite number of seconds > 0, got {value!r}."
                )
        if self.grace_period < 2 * self.heartbeat_interval:
            raise StudySettingsError(
                f"`grace_period >= 2 * heartbeat_interval` must hold, but got "
                f"({self.grace_period=}, {self.heartbeat_interval=})."
            )
        if not isinstance(self.reap_dead_local_workers, bool):
            raise StudySettingsError(
                "StudySettings.reap_dead_local_workers must be True or False, got "
                f"{self.reap_dead_local_workers!r}."
            )

    def _check_counts(self) -> None:
        """The initial design's size and the fail-fast count."""
        if self.n_initial is not None and (
            isinstance(self.n_initial, bool)
            or not isinstance(self.n_initial, int)
            or self.n_initial < 0
        ):
            raise StudySettingsError(
                "StudySettings.n_initial must be None (the tuner's default) or an int >= 0, got "
                f"{self.n_initial!r}."
            )
        _check_count("max_repeated_failures", self.max_repeated_failures, " (0: never stop)")

    def _check_tuner_options(self) -> None:
        """`tuner_options` as a plain dict that makes valid `TunerOptions`."""
        if not isinstance(self.tuner_options, Mapping) or not all(
            isinstance(k, str) for k in self.tuner_options
        ):
            raise StudySettingsError(
                "StudySettings.tuner_options must be a dict of TunerOptions keyword arguments "
                f"(e.g. {{'num_restarts': 2}}), got {self.tuner_options!r}."
            )
        object.__setattr__(self, "tuner_options", dict(self.tuner_options))
        from tuner.errors import TunerError

        try:
            self.options()  # validate now, at the boundary
        except (TunerError, TypeError, ValueError) as err:
            raise StudySettingsError(f"StudySettings.tuner_options are invalid: {err}") from err

    def options(self) -> Any:
        """The `tuner.options.TunerOptions` these settings describe."""
        from tuner.options import TunerOptions

        return TunerOptions.from_dict(self.tuner_options)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able copy; read back by `StudySettings.from_dict`."""
        d = asdict(self)
        d["tuner_options"] = dict(self.tuner_options)
        d["ignore_metrics"] = list(self.ignore_metrics)
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> StudySettings:
        """Rebuild from `to_dict` output (unknown keys from newer versions are ignored; a key
        that settings stored before it existed lack takes the value that keeps such a study
        running as it ran, `LEGACY`).

        Raises:
            StudySettingsError: If ``d`` is not a dict or holds invalid values.
        """
        if not isinstance(d, Mapping):
            raise StudySettingsError(f"Stored StudySettings must be a dict, got {d!r}.")
        known = {f.name for f in fields(cls)}
        return cls(**{**LEGACY, **{k: v for k, v in d.items() if k in known}})


def _check_count(name: str, value: Any, meaning_of_zero: str) -> None:
    """Refuse a `StudySettings` field ``name`` that is not an int ``>= 0``.

    Raises:
        StudySettingsError: Naming the field, what 0 means and the value.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StudySettingsError(
            f"StudySettings.{name} must be an int >= 0{meaning_of_zero}, got {value!r}."
        )


def _knowledge_dict(value: Any) -> dict[str, Any] | None:
    """`StudySettings.knowledge` as a plain JSON dict (a `structure.Knowledge` through its
    `to_dict`); the full check, which needs the study's names, is the surrogate's."""
    if value is None:
        return None
    if not isinstance(value, Mapping) and callable(getattr(value, "to_dict", None)):
        value = value.to_dict()
    unknown = sorted(set(value) - set(KNOWLEDGE_KEYS)) if isinstance(value, Mapping) else None
    if unknown is None or unknown:
        raise StudySettingsError(
            "StudySettings.knowledge must be a structure.Knowledge or its dict form with keys "
            f"among {list(KNOWLEDGE_KEYS)}, e.g. {{'required': [['metric', 'objective']]}}; got "
            f"{value!r}" + (f" (unknown keys {unknown})." if unknown else ".")
        )
    for key in ("required", "forbidden", "candidates"):
        _name_pairs(value.get(key, []), f"knowledge[{key!r}]")
    formulas = value.get("formulas", [])
    if not isinstance(formulas, list | tuple) or not all(isinstance(f, Mapping) for f in formulas):
        raise StudySettingsError(
            "StudySettings.knowledge['formulas'] must be a list of formula dicts "
            "(`structure.Formula` fields, e.g. {'node': 'search_time', 'inputs': ['time.match', "
            f"'time.verify']}}); got {formulas!r}."
        )
    phases = value.get("phase_order", [])
    if not isinstance(phases, list | tuple) or not all(isinstance(p, str) for p in phases):
        raise StudySettingsError(
            "StudySettings.knowledge['phase_order'] must be a list of metric-name prefixes, "
            f"earliest phase first; got {phases!r}."
        )
    try:  # every key present, so the object and its dict forms compare equal
        return json.loads(json.dumps({k: list(value.get(k, [])) for k in KNOWLEDGE_KEYS}))
    except (TypeError, ValueError) as err:
        raise StudySettingsError(
            f"StudySettings.knowledge must hold names and numbers only (it is stored as JSON); "
            f"got {value!r} ({err})."
        ) from None


def _name_pairs(pairs: Any, what: str) -> list[list[str]]:
    """`pairs` as a JSON list of ``[source, target]`` name pairs.

    Raises:
        StudySettingsError: `pairs` is not a list of pairs of strings (`what` names the field).
    """
    ok = not isinstance(pairs, str | bytes | Mapping) and isinstance(pairs, list | tuple)
    if not ok or not all(
        isinstance(p, list | tuple) and len(p) == 2 and all(isinstance(n, str) for n in p)
        for p in pairs
    ):
        raise StudySettingsError(
            f"StudySettings.{what} must be a list of [source, target] name pairs, e.g. "
            f"[['acceptance_rate', 'gain']]; got {pairs!r}."
        )
    return [[str(a), str(b)] for a, b in pairs]
