"""Warm start from finished studies (`StudySettings.warm_start`).

A study that names related studies (same storage or another URL) models its outcomes with
`tuner.warmstart.WarmStartSurrogate`: their completed trials, mapped onto this study's space,
are related tasks of a multi-task GP that each keeps only while it predicts this study's own
trials better than the flat GP (`StudySettings.warm_start_gate`). A new study queues their best
configurations as its first trials after the space's default (`queue_related`,
`StudySettings.warm_start_queue`), so it starts where they ended, proposes more of them once
a related study has shown it helps (`StudySettings.warm_start_suggest`,
`tuner.warmstart.suggestions`), and proposes from the model
from its first proposal on while the gate keeps a related study (`tuner.Surrogate.informed`: the
initial design is skipped then). Once the gate drops them all, the initial design runs from its
first Sobol point: the queued configurations take its first positions without using up its points
(`studies.views.design_offset`), so a warm study whose related studies mislead it still explores
as a cold one does.
`seed_from_related` queues them into a study that already holds trials.

Mapping a configuration of another space: tuned parameters of the same name keep their value
when this space accepts it (else the trial is left out); this space's `Fixed` parameters and the
ones the other lacks take their defaults; the rest are dropped. The related studies must have this study's objectives
(names and directions), and report its constraint metrics when it has constraints.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from studies.errors import StudyError, StudyNotFoundError, StudySettingsError

if TYPE_CHECKING:
    from studies.records import TrialRecord
    from tuner.warmstart import RelatedTask

__all__ = [
    "check_entries",
    "queue_related",
    "related_tasks",
    "seed_from_related",
    "warm_surrogate",
]

logger = logging.getLogger(__name__)


def check_entries(value: Any) -> list[dict[str, str | None]]:
    """`StudySettings.warm_start` as stored: ``[{"study": name, "storage": url or None}]``.

    Raises:
        StudySettingsError: For anything but a list of names or such dicts.
    """
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, list | tuple):
        raise StudySettingsError(
            "StudySettings.warm_start must be a list of study names or {'study': name, "
            f"'storage': url}} dicts, e.g. ['rewrite-demo']; got {value!r}."
        )
    out: list[dict[str, str | None]] = []
    for entry in value:
        if isinstance(entry, str):
            entry = {"study": entry, "storage": None}
        if (
            not isinstance(entry, Mapping)
            or not isinstance(entry.get("study"), str)
            or not entry["study"]
            or set(entry) - {"study", "storage"}
            or not isinstance(entry.get("storage"), str | None)
        ):
            raise StudySettingsError(
                "Each StudySettings.warm_start entry is a study name or {'study': name, "
                f"'storage': url}}; got {entry!r}."
            )
        out.append({"study": entry["study"], "storage": entry.get("storage")})
    return out


@dataclass(frozen=True)
class _Other:
    """A related study as stored: its name, space, objectives, constraints and trials."""

    name: str
    space: Any
    objectives: dict[str, str]
    constraints: list[str]
    trials: list[TrialRecord]


def _related_studies(study: Any) -> list[_Other]:
    """The studies ``study``'s `StudySettings.warm_start` names (``study``: a `Study`), read
    from their storages without opening them as studies.

    Raises:
        StudyError: If one is missing, is ``study`` itself, or has other objectives.
    """
    from spaces import Space
    from studies.storage import Storage

    out = []
    for entry in study.settings.warm_start:
        url = entry["storage"]
        try:
            store = Storage(url, create=False) if url else study.storage
            record = store.get_study(str(entry["study"]))
        except StudyNotFoundError as err:
            raise type(err)(
                f"Warm start: {err} (StudySettings.warm_start of {study.name!r} names it; fix "
                "the entry or remove it)."
            ) from None
        if record.name == study.name and store.url == study.storage.url:
            raise StudyError(f"Study {study.name!r} cannot warm-start from itself.")
        if record.objectives != study.objectives:
            raise StudyError(
                f"Warm start: study {record.name!r} optimizes {record.objectives}, but "
                f"{study.name!r} optimizes {study.objectives}; a related study needs the same "
                "objectives and directions. Remove it from StudySettings.warm_start."
            )
        space = Space.from_dict(record.space)
        other = _Other(record.name, space, record.objectives, record.constraints, [])
        out.append(dataclasses.replace(other, trials=store.trials(record.id)))
    return out


def _mapped(study: Any, other: _Other) -> list[TrialRecord]:
    """``other``'s COMPLETE trials with their configurations mapped onto ``study``'s space."""
    from spaces import Fixed, SpaceError

    space, default = study.space, study.space.default()
    tuned = [n for n, p in space.params.items() if not isinstance(p, Fixed)]
    shared = [n for n in tuned if n in other.space.params]
    if not shared:
        raise StudyError(
            f"Warm start: study {other.name!r} shares no parameter with {study.name!r} (its "
            f"parameters are {other.space.names}); remove it from StudySettings.warm_start."
        )
    out = []
    for t in other.trials:
        if t.state != "COMPLETE":
            continue
        config = {n: t.config[n] if n in shared else default[n] for n in space.params}
        try:
            config = space.validate(config)
        except SpaceError:
            continue  # a value this space does not hold
        out.append(dataclasses.replace(t, config=config))
    return out


def related_tasks(study: Any) -> list[RelatedTask]:
    """The related studies' completed trials as `tuner.warmstart.RelatedTask` in ``study``'s
    (a `Study`'s) space and outcome order (module docstring)."""
    from tuner.warmstart import RelatedTask

    tasks = []
    for other in _related_studies(study):
        trials = _mapped(study, other)
        missing = [
            m for m in study.problem.constraint_metrics if any(m not in t.metrics for t in trials)
        ]
        if missing:
            raise StudyError(
                f"Warm start: trials of {other.name!r} lack the constraint metrics {missing} of "
                f"{study.name!r}; remove it from StudySettings.warm_start."
            )
        if not trials:
            logger.warning("Warm start: study %r has no completed trial to lend.", other.name)
            continue
        data = study.problem.training_data(study.space, trials, seed=0)
        per_study = study.settings.warm_start_suggest  # 0: no ranking needed
        configs = _ranked(other, trials)[:per_study] if per_study else []
        best = study.space.to_unit(configs) if configs else None
        tasks.append(RelatedTask(other.name, data.X, data.Y, data.Yvar, best))
    return tasks


def warm_surrogate(study: Any) -> Any:
    """The surrogate of ``study`` (a `Study` with `StudySettings.warm_start`): the warm-start
    kind `StudySettings.warm_start_model` names (`tuner.kinds`) over its related tasks
    (`related_tasks`), with the study's GP-fit cap and gate."""
    from studies.tuning import make_surrogate

    settings = study.settings
    return make_surrogate(settings.warm_start_model, settings, related=related_tasks(study))


def queue_related(study: Any) -> list[TrialRecord]:
    """Queue the best `StudySettings.warm_start_queue` configurations of each related study
    into ``study`` (a `Study`) if it holds no trial yet (`Study` calls it on creation): in one
    transaction that checks the study is empty, so two processes opening a new study queue them
    once. The space's default configuration goes first when the initial design starts with it
    (`tuner.TunerOptions.start_with_default`), as a cold study's would; the related studies'
    best follow it without displacing the design's Sobol points, which resume after them
    (`studies.views.design_offset`).

    Returns:
        The trials queued (none for a study that already holds trials).

    Raises:
        StudyError: A related study is missing, is the study itself, or does not fit it (also
            with ``warm_start_queue`` 0: a new study's references are read on creation).
    """
    per_study = study.settings.warm_start_queue
    if not study.settings.warm_start or study.trials:
        return []
    if not per_study:
        for other in _related_studies(study):
            _mapped(study, other)
        return []
    configs = _best_configs(study, per_study)
    if study.settings.options().start_with_default:
        # A queued trial takes an initial-design position, and position 0 is the space's
        # default: queued first, the related studies' best would push it out of the design.
        # On the design split's warm pairs that default was the cold study's best first trial
        # (hypervolume 4.0 where an unrelated source's best reached 1.6; docs/families.md).
        default = study.space.default()
        configs = [default, *(c for c in configs if c != default)]
    storage = study.storage
    with storage.write() as conn:
        storage.lock_study(conn, study.id)
        if storage.count_trials(conn, study.id):
            return []
        return [storage.add_trial(conn, study.id, c, state="WAITING") for c in configs]


def _best_configs(study: Any, per_study: int) -> list[dict[str, Any]]:
    """The best ``per_study`` configurations of each related study, mapped onto ``study``'s
    space, without repeats, in the related studies' order."""
    out: list[dict[str, Any]] = []
    for other in _related_studies(study):
        for config in _ranked(other, _mapped(study, other))[:per_study]:
            if config not in out:
                out.append(config)
    return out


def _ranked(other: _Other, mapped: list[TrialRecord]) -> list[dict[str, Any]]:
    """The configurations of ``mapped`` (``other``'s trials as `_mapped` maps them), best
    first, as `studies.pareto.rank_pareto` ranks ``other``'s trials."""
    from studies.pareto import rank_pareto

    by_number = {t.number: t for t in mapped}
    ranked = rank_pareto(other.trials, other.objectives, other.constraints)
    return [by_number[t.number].config for t in ranked if t.number in by_number]


def seed_from_related(study: Any, per_study: int = 2) -> list[TrialRecord]:
    """Queue the best ``per_study`` configurations of each related study (ranked as
    `studies.pareto.rank_pareto` ranks its trials), mapped onto ``study``'s (a `Study`'s)
    space, as its next trials (`Study.enqueue`), skipping any it already holds: for a study
    that already holds trials (a new one queues them on creation, `queue_related`).

    Returns:
        The trials queued.
    """
    held = [t.config for t in study.trials]
    queued = []
    for config in _best_configs(study, per_study):
        if config not in held:
            queued.append(study.enqueue(config))
            held.append(config)
    return queued
