"""Read-only snapshots of stored studies and trials.

Records are frozen: a record read from the storage is never modified by later writes (read again to
see them). Do not mutate the dicts they hold.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tuner.trial import Trial, TrialState

__all__ = ["Reservation", "StudyRecord", "TrialRecord"]


@dataclass(frozen=True)
class StudyRecord:
    """One row of the ``studies`` table.

    Attributes:
        id: Database id (internal).
        name: Unique name within the storage.
        space: The search space as `spaces.Space.to_dict` wrote it.
        objectives: Objective name to ``"minimize"`` or ``"maximize"``.
        constraints: Outcome constraints as strings, e.g. ``"search_seconds <= 30"``.
        settings: `StudySettings` as a dict.
        seed: The tuner's seed.
        budget: Total number of trials the study should finish (the last ``optimize`` target),
            or ``None`` before the first ``optimize``.
        evaluate_ref: Where ``tuner resume`` finds the evaluate function (``module:qualname`` or
            ``file:PATH:qualname``), or ``None``.
        created: Creation time, Unix seconds.
        context: The JSON object every evaluation receives beside its configuration
            (`studies.Study`'s ``context``), or ``None``.
    """

    id: int
    name: str
    space: dict[str, Any]
    objectives: dict[str, str]
    constraints: list[str]
    settings: dict[str, Any]
    seed: int
    budget: int | None
    evaluate_ref: str | None
    created: float
    context: dict[str, Any] | None = None


@dataclass(frozen=True)
class TrialRecord(Trial):
    """One row of the ``trials`` table: a `tuner.Trial` with what the storage knows about its run.

    The study's trial records are the tuner's trials (``id`` is the trial's number in the study),
    so a tuner is synced to stored trials without a conversion.

    Attributes:
        id: Position in the study (0, 1, 2, ...), unique within the study; also `number`.
        config: The configuration evaluated.
        state: A `tuner.TrialState` (a string such as ``"COMPLETE"`` is converted, and compares
            equal to it).
        values: Objective values by name when COMPLETE, else ``None``.
        metrics: Tracking and constraint metrics the evaluate function returned.
        error: Why the trial FAILED, else ``None``.
        created: When the trial was created, Unix seconds.
        started: When a worker claimed it, or ``None``.
        finished: When it reached COMPLETE or FAILED, or ``None``.
        heartbeat: The worker's last sign of life, or ``None`` (trials from `Study.ask` have none
            and are never declared stale).
        worker: ``host:pid:token`` of the process that ran it, or ``None``.
        retry_of: The number of the stale trial this one re-runs, or ``None``.
        seconds: How long the evaluation took as the worker measured it (excluding the time the
            driving process spent proposing or collecting), or ``None`` when unknown (trials told
            by hand, crashed workers, databases written before this was stored).
        proposed_at: The proposal position its configuration was proposed at
            (`studies.allocation`), or ``None`` for a configuration the tuner did not propose (a
            queued or hand-told one, a re-queued copy) and for trials stored before positions
            were (format version 1).
    """

    created: float = 0.0
    started: float | None = None
    finished: float | None = None
    heartbeat: float | None = None
    worker: str | None = None
    retry_of: int | None = None
    seconds: float | None = None
    proposed_at: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.state, TrialState):
            object.__setattr__(self, "state", TrialState(self.state))

    @property
    def number(self) -> int:
        """The trial's position in the study (its `id`)."""
        return self.id

    @property
    def duration(self) -> float | None:
        """The evaluation's duration in seconds: ``seconds`` when the worker measured it, else
        ``finished - started``; ``None`` while unfinished."""
        if self.seconds is not None:
            return self.seconds
        if self.started is None or self.finished is None:
            return None
        return self.finished - self.started


@dataclass(frozen=True)
class Reservation:
    """One row of the ``reservations`` table: a proposal a driving process is computing.

    Attributes:
        position: The proposal position reserved (unique within the study): the proposal made
            for it is seeded by it and, in the initial design, is the design's point at it.
        worker: ``host:pid:token`` of the process that reserved it.
        created: When it was reserved, Unix seconds.
        heartbeat: The reserving process's last sign of life, Unix seconds.
    """

    position: int
    worker: str
    created: float
    heartbeat: float
