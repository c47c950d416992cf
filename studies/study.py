"""`Study`: a named, persistent multi-objective tuning run.

The storage is the single source of truth. A process allocating trials claims WAITING ones and
reserves a proposal position per free slot under the study's lock, proposes on a snapshot of the
stored trials with the process's one tuner (`tuner.Tuner.sync`: what a restarted process would
propose) outside any transaction, seeded by its positions, and fills the proposals in under the
lock again (`studies.allocation`). So any number of processes (or a process that was killed and
restarted) drive one study without duplicates or lost results, no process holds the database
lock while a model is being fitted, processes proposing at once propose different
configurations (no fit is wasted on a configuration another process proposed), and each
process gets trials in proportion to its free workers.

Thread-safety: use a `Study` from one thread. Several processes may drive one study.

`Study` (here) holds the definition (create, attach, repair invalid settings), the views, ask /
tell and `optimize`; the modules around it hold the rest: `studies.allocation` (allocation and
reaping transactions), `studies.tuning` (surrogate choice, stored trials as tuner records),
`studies.views` (budget counts, the DataFrame), `studies.stored_values` (told outcomes and the
context checked before they are stored), `studies.workers_local` (worker names, dead
local workers), `studies.references` (`evaluate_reference`), `studies.report`
(`structure_report`), `studies.source` (the study as the driver's `TrialSource`: claim,
heartbeat, record) and `studies.driver` (the `optimize` loop, which sees only that source).
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from studies.driver import RunStats, run
from studies.errors import EvaluateError, StorageCorruptError, StudyError, StudySettingsError
from studies.pareto import pareto_front
from studies.quiet import numerical_warnings_to_log
from studies.records import StudyRecord, TrialRecord
from studies.references import evaluate_reference, importing_for_evaluate
from studies.report import structure_report
from studies.schema import MAX_SEED, check_seed  # noqa: F401 - MAX_SEED: here too
from studies.settings import StudySettings
from studies.source import StudySource, log_finished
from studies.storage import DEFAULT_STORAGE, Storage
from studies.stored_values import json_object, judge_outcome
from studies.tuning import make_surrogate, model_kind
from studies.views import design_offset, progress_counts, trials_dataframe
from studies.worker import WithContext
from studies.workers_local import manual_worker_id, worker_id

if TYPE_CHECKING:
    import pandas as pd

    from spaces import Space
    from tuner.problem import Problem

# `evaluate_reference`, `structure_report` and `worker_id` stay importable from here, as before
# their modules were split off.
__all__ = ["Study", "evaluate_reference", "structure_report", "worker_id"]

logger = logging.getLogger(__name__)

Evaluate = Callable[[dict[str, Any]], Mapping[str, float]]


class Study:
    """A persistent multi-objective study: define it once, run it, stop it, resume it anywhere.

    Creating a `Study` whose name already exists in the storage attaches to it when the space,
    objectives, constraints and seed are the same (so re-running a script resumes), and raises
    `StudyConflictError` otherwise.

    Args:
        name: Unique name within the storage.
        space: The `spaces.Space` to search.
        objectives: Objective name to ``"minimize"`` or ``"maximize"``.
        evaluate: ``evaluate(config) -> dict`` returning every objective's value plus any metrics
            (constraint metrics are required, other numbers are kept as tracking metrics); with a
            ``context``, ``evaluate(config, context)``. It runs in worker processes, so it must
            be picklable (a module-level function). ``None`` gives a study that can be
            inspected, exported and driven with `ask` / `tell`.
        constraints: Outcome constraints such as ``"search_seconds <= 30"``.
        storage: A SQLAlchemy URL (``sqlite:///study.db`` by default, or
            ``postgresql+psycopg://...``) or a `Storage`.
        seed: The tuner's seed, an int in ``[0, 2**63 - 1]``.
        settings: Heartbeat, staleness and tuner settings; stored on creation (a later process
            uses the stored ones). They replace stored settings only when those are invalid
            (written by a rewrite-tuner that did not check them).
        context: What every evaluation needs that is not tuned (workloads, seeds, a
            calibration...): a JSON object stored once with the study and passed to
            ``evaluate(config, context)``, never into the configurations the tuner models and
            stores. Part of the study's definition, like the space.

    Raises:
        StudyError: For an empty name, a non-`Space` space, a seed that is not an int in
            ``[0, 2**63 - 1]``, or a context that is not a JSON object.
        StudyConflictError: If the name is taken by a different study.
        StorageError: If the storage cannot be opened (see `Storage`).
        tuner.InvalidSpecError: For malformed objectives or constraints.

    Example:
        >>> study = Study("demo", space, {"f1": "minimize", "f2": "minimize"}, evaluate=f)
        >>> study.optimize(30, n_workers=2)
        >>> study.pareto()
    """

    def __init__(
        self,
        name: str,
        space: Space,
        objectives: Mapping[str, str],
        evaluate: Evaluate | None = None,
        constraints: Sequence[str] = (),
        storage: str | Storage = DEFAULT_STORAGE,
        seed: int = 0,
        *,
        settings: StudySettings | None = None,
        context: Mapping[str, Any] | None = None,
    ) -> None:
        from spaces import Space
        from tuner.problem import Problem

        if not isinstance(name, str) or not name.strip():
            raise StudyError(f"A study needs a non-empty name, got {name!r}.")
        if not isinstance(space, Space):
            raise StudyError(f"space must be a spaces.Space, got {type(space).__name__}.")
        if evaluate is not None and not callable(evaluate):
            raise StudyError(f"evaluate must be a function config -> dict, got {evaluate!r}.")
        if isinstance(constraints, str):
            constraints = (constraints,)
        if settings is not None and not isinstance(settings, StudySettings):
            raise StudyError(f"settings must be a StudySettings, got {type(settings).__name__}.")
        seed = check_seed(seed)
        context = json_object(context)
        problem = Problem(objectives, constraints)
        if importing_for_evaluate():  # a study file imported for its evaluate function alone
            storage = "sqlite://"
        self._storage = storage if isinstance(storage, Storage) else Storage(storage)
        new = StudyRecord(
            id=0,
            name=name,
            space=space.to_dict(),
            objectives=dict(problem.objectives),
            constraints=[str(c) for c in problem.constraints],
            settings=(settings or StudySettings()).to_dict(),
            seed=seed,
            budget=None,
            evaluate_ref=None,
            created=self._storage.clock(),
            context=context,
        )
        record = self._storage.create_study(new)
        self._attach(record, space, evaluate, settings)
        if self._settings is not None and self._settings.warm_start:
            self._queue_related()

    def _queue_related(self) -> None:
        """Queue the related studies' best configurations into a new warm-started study
        (`studies.warmstart.queue_related`). A related study that cannot be read is a warning
        here and an error, with the fix, at the first proposal
        (`studies.warmstart.warm_surrogate`)."""
        from studies.warmstart import queue_related

        try:
            queue_related(self)
        except StudyError as err:
            logger.warning("Warm start: %r cannot use its related studies (%s).", self.name, err)

    def _attach(
        self,
        record: StudyRecord,
        space: Space,
        evaluate: Evaluate | None,
        given: StudySettings | None = None,
    ) -> None:
        from tuner.errors import TunerError
        from tuner.problem import Problem

        try:
            self._problem = Problem(record.objectives, record.constraints)
        except TunerError as err:
            raise StorageCorruptError(
                f"The stored study {record.name!r} in {self._storage.url} is damaged: its "
                f"'objectives' or 'constraints' column is invalid ({err}). Nothing was changed; "
                "restore the database from a backup."
            ) from err
        self._record = record
        self.space = space
        self._tuners: dict[str, Any] = {}  # surrogate kind -> this process's tuner
        self._settings_error: StudySettingsError | None = None
        try:
            self._settings: StudySettings | None = StudySettings.from_dict(record.settings)
        except StudySettingsError as err:
            self._settings, self._settings_error = None, err
        if self._settings is None and given is not None:
            self._replace_invalid_settings(given)
        elif given is not None and given != self._settings:
            logger.warning(
                "Study %r keeps its stored settings %s; the settings given are ignored.",
                record.name,
                self._settings,
            )
        self.evaluate = evaluate
        ref = evaluate_reference(evaluate) if evaluate is not None else None
        if ref is not None and ref != record.evaluate_ref:
            self._storage.update_study(record.id, evaluate_ref=ref)
            self._record = dataclasses.replace(record, evaluate_ref=ref)

    def _replace_invalid_settings(self, given: StudySettings) -> None:
        """Store ``given`` in place of the study's invalid stored settings (the one way stored
        settings change: valid ones always win, so every process agrees on them)."""
        record = self._record
        if self._storage.replace_settings(record.id, record.settings, given.to_dict()):
            logger.warning(
                "Study %r had invalid stored settings (%s); they were replaced by the settings "
                "given: %s.",
                record.name,
                self._settings_error,
                given,
            )
        # another process may have replaced them first: use what is stored now
        self._record = record = self._storage.get_study(record.name)
        self._settings, self._settings_error = StudySettings.from_dict(record.settings), None
        if self._settings != given:
            logger.warning(
                "Study %r keeps its stored settings %s; the settings given are ignored.",
                record.name,
                self._settings,
            )

    @property
    def settings(self) -> StudySettings:
        """The stored `StudySettings` every process driving the study uses.

        Raises:
            StudySettingsError: If the stored settings are invalid (written by a rewrite-tuner
                that did not check them); the message says how to replace them.
        """
        if self._settings is None:
            raise StudySettingsError(
                f"Study {self.name!r} in {self._storage.url} has invalid stored settings: "
                f"{self._settings_error} They were written by an older rewrite-tuner that did not "
                "check them; nothing was changed, and its trials can still be inspected and "
                "exported. To run it again, pass valid settings, which then replace the stored "
                f"ones: Study.load({self.name!r}, storage, evaluate, "
                "settings=StudySettings(...)) or Study(..., settings=StudySettings(...))."
            )
        return self._settings

    @classmethod
    def load(
        cls,
        name: str,
        storage: str | Storage = DEFAULT_STORAGE,
        evaluate: Evaluate | None = None,
        *,
        settings: StudySettings | None = None,
    ) -> Study:
        """Open a stored study by name, without creating anything.

        Args:
            name: The study's name.
            storage: Its storage URL or `Storage`. A URL naming a SQLite file that does not exist
                is an error (the file is not created).
            evaluate: The evaluate function, needed only to `optimize`.
            settings: Replace the study's stored settings, only if those are invalid (written by
                an older rewrite-tuner that did not check them); valid stored settings always win
                and a warning says the ones given are ignored.

        Raises:
            StudyNotFoundError: If the storage holds no study of that name, or (as
                `StorageNotFoundError`) the SQLite file does not exist.
            StorageCorruptError: If the stored study is damaged.
        """
        from spaces import Space

        if settings is not None and not isinstance(settings, StudySettings):
            raise StudyError(f"settings must be a StudySettings, got {type(settings).__name__}.")
        store = storage if isinstance(storage, Storage) else Storage(storage, create=False)
        record = store.get_study(name)
        try:
            space = Space.from_dict(record.space)
        except (ValueError, TypeError, KeyError) as err:  # SpaceError is a ValueError
            raise StorageCorruptError(
                f"The stored study {name!r} in {store.url} is damaged: its 'space' column does "
                f"not describe a space ({type(err).__name__}: {err}). Nothing was changed; "
                "restore the database from a backup."
            ) from err
        study = cls.__new__(cls)
        study._storage = store
        study._attach(record, space, evaluate, settings)
        return study

    def __repr__(self) -> str:
        return f"Study({self.name!r}, storage={self._storage!r})"

    # ------------------------------------------------------------------ read-only views
    @property
    def name(self) -> str:
        """The study's name."""
        return self._record.name

    @property
    def id(self) -> int:
        """The study's id in its storage: the ``study_id`` that `Storage` methods take (e.g.
        ``study.storage.heartbeat(study.id, numbers, worker)``)."""
        return self._record.id

    @property
    def problem(self) -> Problem:
        """The `tuner.Problem` (objectives and constraints) that judges told results."""
        return self._problem

    @property
    def objectives(self) -> dict[str, str]:
        """Objective name to direction."""
        return dict(self._record.objectives)

    @property
    def constraints(self) -> list[str]:
        """Outcome constraints as strings."""
        return list(self._record.constraints)

    @property
    def seed(self) -> int:
        """The tuner's seed."""
        return self._record.seed

    @property
    def storage(self) -> Storage:
        """The study's storage."""
        return self._storage

    @property
    def budget(self) -> int | None:
        """Total trials the last `optimize` call aimed for (stored), or ``None``."""
        return self._storage.get_study(self.name).budget

    @property
    def context(self) -> dict[str, Any] | None:
        """The stored context every evaluation receives (``evaluate(config, context)``), or
        ``None``. A fresh copy: changing it changes nothing stored."""
        return copy.deepcopy(self._record.context)

    @property
    def evaluate_ref(self) -> str | None:
        """Where `tuner resume` finds the evaluate function (see `evaluate_reference`)."""
        return self._storage.get_study(self.name).evaluate_ref

    @property
    def trials(self) -> list[TrialRecord]:
        """Every trial, in number order, as stored now (a fresh read)."""
        return self._storage.trials(self.id)

    def pareto(self) -> list[TrialRecord]:
        """The COMPLETE trials that meet the constraints and no other such trial dominates."""
        return pareto_front(self.trials, self.objectives, self.constraints)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per trial: ``number``, ``state``, ``values.*``, ``metrics.*``, ``config.*``
        (simplex parts as ``config.<name>.<part>``), ``error``, ``created``, ``started``,
        ``finished`` (Unix seconds), ``duration`` (seconds the evaluation took, as its worker
        measured it where known: `TrialRecord.duration`), ``worker``, ``retry_of``."""
        return trials_dataframe(self.trials, self.objectives)

    # ------------------------------------------------------------------ allocation
    def _tuner(self, trials: Sequence[TrialRecord]) -> Any:
        """This process's tuner, synced to ``trials`` (a snapshot of the stored trials).

        One tuner, and so one surrogate, per surrogate kind is kept for the life of the `Study`
        object: the structured surrogate's checkpoint cache stays warm and stored trials are
        validated once, not at every proposal. A proposal is still a pure function of the stored
        trials (`tuner.Tuner.sync`), so a restarted process proposes what this one would have.
        """
        from tuner.tuner import Tuner

        mode = self._surrogate_mode(trials)
        tuner = self._tuners.get(mode)
        if tuner is None:
            tuner = self._tuners[mode] = Tuner(
                self.space,
                self.objectives,
                self.constraints,
                seed=self.seed,
                n_initial=self.settings.n_initial,
                options=self.settings.options(),
                surrogate=self._make_surrogate(mode),
            )
        tuner.sync(trials)
        return tuner

    def _surrogate_mode(self, trials: Sequence[Any]) -> str:
        """The surrogate kind the study uses for ``trials`` (`studies.tuning.model_kind`:
        ``"auto"`` picks `structure.StructuredSurrogate` once a completed trial reported a
        tracking metric; a warm-started study, its warm-start kind throughout)."""
        return model_kind(self.settings, self._problem.constraint_metrics, trials)

    def _make_surrogate(self, mode: str) -> Any:
        if self.settings.warm_start:  # the related studies' trials, read once per tuner
            from studies.warmstart import warm_surrogate

            return warm_surrogate(self)
        return make_surrogate(mode, self.settings)

    def trial_source(self) -> StudySource:
        """The study as a `studies.source.TrialSource`: what `optimize` hands the driver
        (`studies.driver.run`), and what claims `ask`'s trials (see `StudySource.claim`)."""
        return StudySource(
            self._storage,
            self.id,
            self.name,
            self.settings,
            self._problem,
            self._propose,
            self._judge,
        )

    def _propose(
        self,
        trials: list[TrialRecord],
        n: int,
        position: int | None = None,
        reserved: Sequence[int] = (),
    ) -> list[dict[str, Any]]:
        """``n`` proposals on the snapshot ``trials`` for the reserved proposal ``position``
        onward, with other processes' ``reserved`` positions in flight (`studies.allocation`)."""
        offset = 0
        if self.settings.warm_start:  # the queued related best do not use up the design
            default = self.space.default() if self.settings.options().start_with_default else None
            offset = design_offset(trials, default)
        with numerical_warnings_to_log():
            tuner = self._tuner(trials)
            asked = tuner.ask(n, position=position, reserved=reserved, design_offset=offset)
            return [t.config for t in asked]

    def reap_stale(self) -> list[int]:
        """Declare stale RUNNING trials FAILED and re-queue their configs now; returns their
        numbers. `optimize` and `ask` do this on their own."""
        return self.trial_source().reap_stale()

    # ------------------------------------------------------------------ ask / tell
    def enqueue(self, config: Mapping[str, Any]) -> TrialRecord:
        """Queue a configuration to run before any proposal: a known good one, the defaults, a
        configuration from another study. It becomes a WAITING trial that the next `optimize`
        (any driving process) or `ask` claims first; it counts toward the budget, and the tuner
        treats it as pending until it finishes. Queued trials always run: `optimize` returns
        only once none is waiting, even past its budget.

        Args:
            config: Values of some or all parameters; those left out take the space's
                defaults.

        Returns:
            The stored WAITING trial.

        Raises:
            StudyError: For unknown parameters or values outside the space (the message names
                them).
        """
        from spaces import SpaceError

        if not isinstance(config, Mapping):
            raise StudyError(
                f"enqueue takes a dict of parameter name to value, got {type(config).__name__}."
            )
        unknown = [k for k in config if k not in self.space.params]
        if unknown:
            raise StudyError(
                f"enqueue: unknown parameters {unknown}; the space has {self.space.names}."
            )
        try:
            full = self.space.validate({**self.space.default(), **config})
        except SpaceError as err:
            raise StudyError(f"enqueue: {err}") from None
        with self._storage.write() as conn:
            self._storage.lock_study(conn, self.id)
            return self._storage.add_trial(conn, self.id, full, state="WAITING")

    def ask(self) -> TrialRecord:
        """Start one trial for evaluation by the caller (a WAITING one if any, else a proposal).

        The trial carries no heartbeat, so it is never declared stale; finish it with `tell`.
        """
        while True:
            got = self.trial_source().claim(manual_worker_id(), 1, None, heartbeat=False)
            if got:
                return got[0]

    def tell(
        self,
        trial: TrialRecord | int,
        values: Mapping[str, float] | None = None,
        *,
        metrics: Mapping[str, float] | None = None,
        error: str | BaseException | None = None,
    ) -> TrialRecord:
        """Finish a RUNNING trial: COMPLETE with ``values``, or FAILED with ``error``.

        NaN or infinite objective / constraint values record the trial FAILED (not an error).

        Args:
            trial: The trial from `ask`, or its number.
            values: Objective values by name (exactly the objectives).
            metrics: Tracking and constraint metrics.
            error: Pass instead of ``values`` to record a failure.

        Returns:
            The stored record.

        Raises:
            StudyError: If the trial is not RUNNING, or both or neither of ``values`` and
                ``error`` are given.
            tuner.InvalidValuesError: For values that do not name exactly the objectives.
        """
        number = trial.number if isinstance(trial, TrialRecord) else int(trial)
        if (values is None) == (error is None):
            raise StudyError(f"tell(trial {number}) needs exactly one of values= or error=.")
        msg: str | None
        if error is not None:
            msg = f"{type(error).__name__}: {error}" if isinstance(error, BaseException) else error
            state, vals, mets = "FAILED", None, dict(metrics or {})
        else:
            vals, mets, msg = self._judge(values, metrics, number=number)
            state = "FAILED" if msg else "COMPLETE"
        if not self._storage.finish_trial(
            self.id, number, state=state, values=vals, metrics=mets, error=msg
        ):
            raise StudyError(
                f"Trial {number} of {self.name!r} is not RUNNING (already finished, or re-queued "
                "after going stale); ask for a new trial."
            )
        log_finished(number, state, vals, msg, None)
        return next(t for t in self.trials if t.number == number)

    def _judge(
        self, values: Any, metrics: Any, *, from_evaluate: bool = False, number: int = -1
    ) -> tuple[dict[str, float] | None, dict[str, float], str | None]:
        """`studies.stored_values.judge_outcome` for this study (`tell` and
        `StudySource.record` both come here)."""
        return judge_outcome(
            self._problem, values, metrics, study=self.name, number=number,
            from_evaluate=from_evaluate,
        )  # fmt: skip

    # ------------------------------------------------------------------ running
    def optimize(
        self,
        n_trials: int,
        n_workers: int = 1,
        executor: Executor | None = None,
        timeout: float | None = None,
        *,
        progress: bool = True,
    ) -> RunStats:
        """Run trials until the study holds ``n_trials`` finished trials.

        ``n_trials`` is the study's total budget, not an increment: a resumed study (or a second
        process driving it) runs only what is missing. Stale trials of dead processes are
        re-queued and re-run; trials re-queued that way do not count twice.

        Args:
            n_trials: Total number of trials the study should finish (stored as its budget).
            n_workers: Trials evaluated at once (on the default pool, at most what the machine
                runs: `studies.driver.machine_workers`).
            executor: Any `concurrent.futures.Executor` (e.g. a Dask client's
                ``get_executor()``); default a `ProcessPoolExecutor` of ``n_workers`` processes,
                shut down on return. An executor you pass is not shut down.
            timeout: Seconds one trial may run; past it the trial is FAILED with a TimeoutError.
                With none, a trial running 10x the median of the others is reported (a warning
                saying how to set one) but never stopped.
            progress: Show a rich progress bar (trials, best values, elapsed, remaining).

        Returns:
            Where this call's time went: proposing in this process, evaluating in the workers
            (`studies.driver.RunStats`).

        Raises:
            EvaluateError: If the study has no evaluate function.
        """
        if self.evaluate is None:
            raise EvaluateError(
                f"Study {self.name!r} has no evaluate function; pass evaluate= to Study(...) or "
                "Study.load(...), or use ask() / tell()."
            )
        if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 0:
            raise StudyError(f"n_trials must be an int >= 0, got {n_trials!r}.")
        if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
            raise StudyError(f"n_workers must be an int >= 1, got {n_workers!r}.")
        if timeout is not None and not (isinstance(timeout, int | float) and timeout > 0):
            raise StudyError(f"timeout must be a positive number of seconds, got {timeout!r}.")
        self._storage.update_study(self.id, budget=n_trials)
        evaluate = self.evaluate
        if self._record.context is not None:
            evaluate = WithContext(evaluate, self.context or {})
        return run(self.trial_source(), evaluate, n_trials, n_workers, executor, timeout, progress)

    def progress(self, trials: Sequence[TrialRecord] | None = None) -> dict[str, int]:
        """Counts toward the budget: ``finished`` (COMPLETE + FAILED, re-queued ones not
        counted), ``used`` (trials allocated, re-runs not counted), ``waiting``, ``running``."""
        return progress_counts(self.trials if trials is None else trials)
