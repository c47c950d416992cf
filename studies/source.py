"""What the optimize loop (`studies.driver`) needs of a study: a narrow `TrialSource`.

The driver claims trials for its free worker slots, keeps their heartbeats fresh, records each
outcome, re-queues the trials it gives up, and asks whether the study is done. That is the whole
interface (`TrialSource`); the driver knows nothing else of a study, its storage or its tuner.
`StudySource` is the implementation a `studies.Study` builds for the driver: it holds the
storage, the study's id and settings, a propose function and a judge of outcomes.

Contract (every method is called by the one driving process, from one thread; other processes
may drive the same study through their own sources at the same time):

* ``claim(worker, k, budget)`` hands ``worker`` up to ``k`` trials, now RUNNING and held by it
  with a fresh heartbeat, never more than ``budget`` counted against the study (``None``: no
  limit). Trials re-queued by other processes come first, then new proposals. It may return
  fewer (or none) while the budget is used or held by others; it raises
  `tuner.errors.SpaceExhaustedError` when no new configuration exists.
* ``heartbeat(worker, numbers)`` refreshes the heartbeat of ``worker``'s RUNNING trials; a trial
  whose heartbeat is older than the grace period may be re-queued by any process.
* ``record(worker, number, outcome)`` stores a `studies.worker.run_evaluate` outcome; it returns
  ``(state, error)`` as stored, or None when the trial is no longer ``worker``'s (re-queued
  meanwhile: the result is dropped).
* ``requeue(worker, numbers, reason)`` fails ``worker``'s RUNNING trials ``numbers`` (None: all
  it holds) with ``reason`` and queues their configurations again; returns those re-queued.
* ``reap_stale()`` re-queues every process's stale trials now; ``status()`` counts the trials
  toward the budget; ``best()`` is a one-line summary of the best values (for display).
* ``proposals()`` is ``(count, seconds)``: the configurations this source proposed since it was
  made and the seconds spent proposing them (model fit and acquisition, not the storage
  transactions around them; trials claimed from the queue are not proposals). The driver reads
  it around each claim to time its proposals (`studies.driver.RunStats`).

Transactions (`StudySource`): ``claim`` runs the allocation transactions of
`studies.allocation` (the model fit outside them); ``record``, ``heartbeat``, ``requeue`` and
``reap_stale`` are each one write transaction, so a crash leaves each trial either recorded or
RUNNING (and then reaped once stale); ``status`` and ``best`` read one snapshot.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from studies.allocation import Propose, allocate, reap
from studies.errors import EvaluateError
from studies.views import best_values, progress_counts

if TYPE_CHECKING:
    from studies.records import TrialRecord
    from studies.settings import StudySettings
    from studies.storage import Storage
    from tuner.problem import Problem

__all__ = [
    "ClaimedTrial",
    "ProposalClock",
    "SourceStatus",
    "StudySource",
    "TrialSource",
    "log_finished",
]

# a study's log lines keep the logger they always had
logger = logging.getLogger("studies.study")

#: ``judge(values, metrics, from_evaluate=..., number=...) -> (values or None, metrics, error)``
Judge = Callable[..., tuple[dict[str, float] | None, dict[str, float], str | None]]


class ClaimedTrial(Protocol):
    """A trial handed to a worker: its number and the configuration to evaluate."""

    @property
    def number(self) -> int: ...

    @property
    def config(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class SourceStatus:
    """Trial counts toward the budget (see `studies.views.progress_counts`).

    Attributes:
        finished: COMPLETE and FAILED trials (re-queued ones not counted).
        used: Trials allocated (re-runs not counted).
        waiting: WAITING trials (queued for a claim).
        live: RUNNING trials with a heartbeat, in any process.
    """

    finished: int
    used: int
    waiting: int
    live: int


class TrialSource(Protocol):
    """The study as the driver sees it (the contract is in the module docstring)."""

    @property
    def name(self) -> str:
        """The study's name (for log lines and errors)."""
        ...

    @property
    def heartbeat_interval(self) -> float:
        """Seconds between heartbeats of the trials in flight."""
        ...

    @property
    def max_repeated_failures(self) -> int:
        """Stop after this many trials in a row fail with the same error (0: never)."""
        ...

    def claim(self, worker: str, k: int, budget: int | None) -> Sequence[ClaimedTrial]: ...

    def heartbeat(self, worker: str, numbers: Sequence[int]) -> None: ...

    def record(
        self, worker: str, number: int, outcome: Mapping[str, Any]
    ) -> tuple[str, str | None] | None: ...

    def requeue(self, worker: str, numbers: Sequence[int] | None, reason: str) -> list[int]: ...

    def reap_stale(self) -> list[int]: ...

    def status(self) -> SourceStatus: ...

    def best(self) -> str: ...

    def proposals(self) -> tuple[int, float]: ...


@dataclass
class ProposalClock:
    """Configurations proposed and the seconds spent proposing them, counted by `timed`.

    Mutated by the one thread that drives a source (see the module docstring).

    Attributes:
        count: Configurations proposed so far.
        seconds: Wall seconds spent in the propose calls that made them.
    """

    count: int = 0
    seconds: float = 0.0

    def timed(self, propose: Propose) -> Propose:
        """``propose``, counting each call's configurations and wall seconds on this clock."""

        def timed_propose(
            trials: list[TrialRecord], n: int, position: int, reserved: Sequence[int]
        ) -> list[dict[str, Any]]:
            t0 = time.perf_counter()
            try:
                configs = propose(trials, n, position, reserved)
            finally:
                self.seconds += time.perf_counter() - t0
            self.count += len(configs)
            return configs

        return timed_propose


@dataclass(frozen=True)
class StudySource:
    """A stored study as a `TrialSource` (built by `studies.Study.trial_source`).

    Attributes:
        storage: The study's storage.
        study_id: Its id there.
        name: Its name.
        settings: Its stored settings.
        problem: Its objectives and constraints.
        propose: New configurations for a snapshot of the trials (`studies.allocation`).
        judge: Validates an outcome's values and metrics (``Study._judge``:
            `studies.stored_values.judge_outcome`).
        clock: Times this source's proposals (`proposals`); a new source starts at zero.
    """

    storage: Storage
    study_id: int
    name: str
    settings: StudySettings
    problem: Problem
    propose: Propose
    judge: Judge
    clock: ProposalClock = field(default_factory=ProposalClock, compare=False)

    @property
    def heartbeat_interval(self) -> float:
        """`StudySettings.heartbeat_interval`."""
        return self.settings.heartbeat_interval

    @property
    def max_repeated_failures(self) -> int:
        """`StudySettings.max_repeated_failures`."""
        return self.settings.max_repeated_failures

    def claim(
        self, worker: str, k: int, budget: int | None, heartbeat: bool = True
    ) -> list[TrialRecord]:
        """Hand ``worker`` up to ``k`` RUNNING trials (without a heartbeat when ``heartbeat`` is
        False: `Study.ask`'s trials never go stale).

        Stale trials are re-queued first, then WAITING trials are claimed (oldest first), then
        the tuner proposes new ones while the study holds fewer than ``budget`` trials
        (``None``: no limit). The claim reserves a proposal position per free slot under the
        study's lock (reservations count against the budget); proposing runs outside any
        transaction on a snapshot of the trials, seeded by the reserved positions (so processes
        proposing at once propose different configurations, and other processes' heartbeats and
        results are never blocked behind a model fit); the proposals are then inserted, except
        one equal to a trial another process added meanwhile (see `studies.allocation`).
        Returns fewer than ``k`` trials (possibly ``[]``) when the budget is used up or held by
        other processes' reservations, or, rarely, when such a proposal was dropped.
        """
        propose = self.clock.timed(self.propose)
        return allocate(
            self.storage, self.study_id, self.settings, propose, worker, k, budget, heartbeat
        )

    def heartbeat(self, worker: str, numbers: Sequence[int]) -> None:
        """Refresh the heartbeat of ``worker``'s RUNNING trials ``numbers``."""
        self.storage.heartbeat(self.study_id, numbers, worker)

    def record(
        self, worker: str, number: int, outcome: Mapping[str, Any]
    ) -> tuple[str, str | None] | None:
        """Store a worker's `run_evaluate` outcome for trial ``number``; returns the state and
        error stored, or ``None`` if the trial was no longer this worker's (dropped).

        Raises:
            EvaluateError: If the result lacks a constraint metric and no trial of the study
                completed yet (the constraint names a metric evaluate does not return; the trial
                is stored FAILED first).
        """
        missing: list[str] = []
        if outcome.get("ok"):
            result = outcome["result"]
            told = self.problem.split_result(result)
            vals, mets, msg = self.judge(*told, from_evaluate=True, number=number)
            missing = [m for m in self.problem.constraint_metrics if m not in result]
        else:
            vals, mets, msg = None, {}, str(outcome.get("error") or "failed")
        state = "FAILED" if msg else "COMPLETE"
        stored = self.storage.finish_trial(
            self.study_id,
            number,
            state=state,
            values=vals,
            metrics=mets,
            error=msg,
            worker=worker,
            seconds=outcome.get("seconds"),
        )
        if not stored:
            logger.warning(
                "Trial %d was re-queued while running here; its result is dropped.", number
            )
            return None
        log_finished(number, state, vals, msg, outcome.get("seconds"))
        if missing and not any(t.state == "COMPLETE" for t in self.storage.trials(self.study_id)):
            constraints = [str(c) for c in self.problem.constraints]
            named = [c for c in constraints if c.split()[0] in missing]
            raise EvaluateError(
                f"The constraints {named} name metrics {missing} that evaluate does not return "
                f"(it returned {sorted(outcome['result'])}) and no trial of {self.name!r} "
                "reports. Fix the constraint's metric name, or return the metric from evaluate; "
                f"trial {number} was recorded FAILED."
            )
        return state, msg

    def requeue(self, worker: str, numbers: Sequence[int] | None, reason: str) -> list[int]:
        """Fail ``worker``'s RUNNING trials ``numbers`` (None: every one it holds) with
        ``reason`` and re-queue their configs; returns the numbers re-queued."""
        if numbers is None:
            numbers = [
                t.number
                for t in self.storage.trials(self.study_id)
                if t.state == "RUNNING" and t.worker == worker
            ]
        if not numbers:
            return []
        return self.storage.requeue(self.study_id, numbers, worker, reason)

    def reap_stale(self) -> list[int]:
        """Declare stale RUNNING trials FAILED and re-queue their configs now; returns their
        numbers."""
        with self.storage.write() as conn:
            self.storage.lock_study(conn, self.study_id)
            return reap(self.storage, conn, self.study_id, self.settings)

    def status(self) -> SourceStatus:
        """Counts toward the budget, from one read of the trials."""
        trials = self.storage.trials(self.study_id)
        counts = progress_counts(trials)
        live = sum(t.state == "RUNNING" and t.heartbeat is not None for t in trials)
        return SourceStatus(counts["finished"], counts["used"], counts["waiting"], live)

    def best(self) -> str:
        """``"best f1=0.12 f2=3.4"`` over the feasible trials (see `studies.views.best_values`)."""
        trials = self.storage.trials(self.study_id)
        constraints = [str(c) for c in self.problem.constraints]
        return best_values(trials, dict(self.problem.objectives), constraints)

    def proposals(self) -> tuple[int, float]:
        """Configurations this source proposed and the seconds spent proposing them (the
        tuner's model fit and acquisition, outside the storage transactions)."""
        return self.clock.count, self.clock.seconds


def log_finished(
    number: int,
    state: str,
    values: Mapping[str, float] | None,
    error: str | None,
    seconds: float | None,
) -> None:
    """The one INFO line per finished trial."""
    took = f" in {seconds:.2f} s" if seconds is not None else ""
    if state == "COMPLETE":
        shown = ", ".join(f"{k}={v:.6g}" for k, v in (values or {}).items())
        logger.info("Trial %d COMPLETE%s: %s", number, took, shown)
    else:
        logger.info("Trial %d FAILED%s: %s", number, took, error)
