"""`Tuner`: the ask/tell loop over a `spaces.Space`.

The tuner's only state is its list of trials; every proposal is a pure function of the trials,
the settings and the seed (`tuner.engine.propose`). Rebuilding a tuner from stored trials with the
same settings therefore continues exactly where the original stood.

Not thread-safe: drive one `Tuner` from one thread (workers evaluate configurations; one
coordinator calls `ask`, `tell` and `fail`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from tuner.acquisition import check_reference_point, pareto_mask
from tuner.engine import ProposalContext, default_n_initial, propose
from tuner.errors import (
    InvalidArgumentError,
    InvalidConfigError,
    InvalidSpecError,
    InvalidTrialRecordError,
    TrialStateError,
    TunerError,
    UnknownTrialError,
)
from tuner.options import TunerOptions
from tuner.problem import OUTLIER_SPREAD, OutcomeConstraint, Problem
from tuner.surrogate import Fitted, FlatSurrogate, Surrogate
from tuner.trial import Trial, TrialState

if TYPE_CHECKING:
    from spaces import Space

__all__ = ["Tuner"]

logger = logging.getLogger(__name__)


class Tuner:
    """Multi-objective Bayesian optimization with an ask/tell interface.

    Args:
        space: The search space.
        objectives: Objective name to ``"minimize"`` or ``"maximize"``.
        constraints: Outcome constraints, e.g. ``("search_seconds <= 30",)`` or
            `OutcomeConstraint` objects. Metrics they name must be reported with every completed
            trial (in `tell`'s ``metrics``).
        seed: Seed of every random choice (Sobol design, fits, acquisition samples).
        surrogate: Model builder; default `FlatSurrogate` (batched `SingleTaskGP`).
        n_initial: Size of the initial design (the space's default configuration, then
            scrambled Sobol points); default ``min(max(d + 1, 5), 10)`` for a
            space with ``d`` unit-cube columns.
        trials: Stored trial records (`Trial` or `Trial.to_dict` dicts, ids ``0..n-1``) to
            rebuild from. The rebuilt tuner proposes exactly what the original would have.
        reference_point: Hypervolume reference point by objective name, in the objectives' own
            units (the worst value still worth having). Default: inferred at every proposal as
            ``nadir - 0.1 * (ideal - nadir)`` of the observed feasible Pareto front.
        options: Acquisition optimizer budget; default `TunerOptions()`.

    Raises:
        InvalidSpecError: Malformed objectives, constraints, reference point or options.
        InvalidTrialRecordError: Inconsistent ``trials``.

    Example:
        >>> tuner = Tuner(space, {"latency": "minimize", "speedup": "maximize"}, seed=0)
        >>> for trial in tuner.ask(2):
        ...     tuner.tell(trial.id, evaluate(trial.config))
    """

    def __init__(
        self,
        space: Space,
        objectives: Mapping[str, str],
        constraints: Sequence[str | OutcomeConstraint] = (),
        seed: int = 0,
        surrogate: Surrogate | None = None,
        n_initial: int | None = None,
        trials: Iterable[Trial | Mapping[str, Any]] = (),
        *,
        reference_point: Mapping[str, float] | None = None,
        options: TunerOptions | None = None,
    ) -> None:
        self._space = _check_space(space)
        self._problem = Problem(objectives, constraints)
        options = options if options is not None else TunerOptions()
        if not isinstance(options, TunerOptions):
            raise InvalidSpecError(f"options must be a TunerOptions, got {options!r}.")
        if surrogate is None:
            fit = {"maxiter": options.fit_maxiter} if options.fit_maxiter else None
            surrogate = FlatSurrogate(fit_options=fit)
        if not isinstance(surrogate, Surrogate):
            raise InvalidSpecError(
                f"surrogate must implement tuner.Surrogate, got {type(surrogate).__name__}."
            )
        surrogate.check(self._space, self._problem.outcome_names, self._problem.n_objectives)
        self._settings = ProposalContext(
            space=self._space,
            problem=self._problem,
            surrogate=surrogate,
            options=options,
            reference_point=check_reference_point(self._problem, reference_point),
            seed=_check_int("seed", seed, 0),
            n_initial=(
                default_n_initial(self._space.dim)
                if n_initial is None
                else _check_int("n_initial", n_initial, 0)
            ),
        )
        self._raw: list[Trial] = []  # the records as given, to skip re-validating them
        self._trials: list[Trial] = []
        self._warned: set[tuple[int, str]] = set()  # outliers already reported
        self._last_fit: Fitted | None = None
        self.sync(trials)

    # ------------------------------------------------------------------ read-only views
    @property
    def space(self) -> Space:
        """The search space."""
        return self._space

    @property
    def objectives(self) -> dict[str, str]:
        """Objective name to direction."""
        return dict(self._problem.objectives)

    @property
    def constraints(self) -> tuple[OutcomeConstraint, ...]:
        """The outcome constraints."""
        return self._problem.constraints

    @property
    def seed(self) -> int:
        """The seed."""
        return self._settings.seed

    @property
    def n_initial(self) -> int:
        """Size of the Sobol initial design."""
        return self._settings.n_initial

    @property
    def options(self) -> TunerOptions:
        """The acquisition optimizer budget."""
        return self._settings.options

    @property
    def surrogate(self) -> Surrogate:
        """The surrogate."""
        return self._settings.surrogate

    @property
    def last_fit(self) -> Fitted | None:
        """The surrogate's fit behind this tuner's latest model-based proposal (its
        ``description`` says which model and why); None before the first."""
        return self._last_fit

    @property
    def trials(self) -> list[Trial]:
        """All trials in id order (a new list; the `Trial`s are immutable snapshots)."""
        return list(self._trials)

    def trial(self, trial_id: int) -> Trial:
        """The current record of one trial.

        Raises:
            UnknownTrialError: If the tuner never issued ``trial_id``.
        """
        if isinstance(trial_id, bool) or not isinstance(trial_id, int):
            raise UnknownTrialError(f"Trial ids are ints, but got {trial_id!r}.")
        if not 0 <= trial_id < len(self._trials):
            raise UnknownTrialError(
                f"Unknown trial id {trial_id}; this tuner has trials 0..{len(self._trials) - 1}."
            )
        return self._trials[trial_id]

    def settings_dict(self) -> dict[str, Any]:
        """JSON-able settings that, with the space and the trials, rebuild this tuner."""
        return {
            **self._problem.to_dict(),
            "seed": self.seed,
            "n_initial": self.n_initial,
            "reference_point": self._settings.reference_point,
            "options": self.options.to_dict(),
        }

    def pareto(self) -> list[Trial]:
        """COMPLETE trials that meet every constraint and are Pareto-optimal, in id order."""
        done = [t for t in self._trials if t.state is TrialState.COMPLETE]
        done = [t for t in done if self._problem.is_feasible(t)]
        if not done:
            return []
        n_obj = self._problem.n_objectives
        Y = torch.tensor([self._problem.outcomes(t)[:n_obj] for t in done], dtype=torch.float64)
        mask = pareto_mask(Y).tolist()
        return [t for t, keep in zip(done, mask) if keep]

    # ------------------------------------------------------------------ the loop
    def ask(
        self,
        n: int = 1,
        *,
        position: int | None = None,
        reserved: Sequence[int] = (),
        design_offset: int = 0,
    ) -> list[Trial]:
        """Hand out ``n`` trials to evaluate; they become RUNNING.

        WAITING (enqueued) trials go out first, oldest first; the rest are new proposals that
        differ from every existing trial and from each other.

        Args:
            n: Number of trials, ``>= 1``.
            position: Proposal position of the first new proposal: it seeds the proposal and
                indexes the initial design (`tuner.engine.propose`). Default: the number of
                trials, as a tuner asked alone always uses. Several tuners proposing for one
                study at once pass distinct positions so they propose differently.
            reserved: Positions other tuners are proposing for right now; their initial-design
                points are not proposed here and count as pending.
            design_offset: Initial-design points that configurations queued before the design
                stood in for: position ``k`` proposes design point ``k - design_offset``
                (`tuner.engine.design_index`; a study passes the number of its leading queued
                trials besides the default).

        Returns:
            ``n`` RUNNING trials.

        Raises:
            InvalidArgumentError: If ``n`` is not an int ``>= 1``.
            SpaceExhaustedError: No untried configuration is left.
            SurrogateError: The surrogate failed to fit (state unchanged; asking again retries).
        """
        n = _check_int("n", n, 1, error=InvalidArgumentError)
        waiting = [t for t in self._trials if t.state is TrialState.WAITING][:n]
        if n > len(waiting):
            self._report_outliers()
            if position is not None:
                position = _check_int("position", position, 0, error=InvalidArgumentError)
            proposal = propose(
                self._settings,
                self._trials,
                n - len(waiting),
                position=position,
                reserved=tuple(int(q) for q in reserved),
                design_offset=_check_int(
                    "design_offset", design_offset, 0, error=InvalidArgumentError
                ),
            )
            configs = proposal.configs
            if proposal.fitted is not None:
                self._last_fit = proposal.fitted
        else:
            configs = []
        started = [_replace(t, state=TrialState.RUNNING) for t in waiting]
        for t in started:
            self._set(t)
        new = [Trial(id=len(self._trials) + i, config=c) for i, c in enumerate(configs)]
        self._trials.extend(new)
        return started + new

    def enqueue(self, config: Mapping[str, Any]) -> Trial:
        """Add a WAITING trial for a given configuration; `ask` hands it out first.

        Raises:
            InvalidConfigError: If ``config`` is not a valid configuration of the space.
        """
        trial = Trial(
            id=len(self._trials), config=self._check_config(config), state=TrialState.WAITING
        )
        self._trials.append(trial)
        return trial

    def tell(
        self,
        trial_id: int,
        values: Mapping[str, float],
        metrics: Mapping[str, float] | None = None,
    ) -> Trial:
        """Report a trial's objective values (and metrics): it becomes COMPLETE.

        A NaN or infinite objective or constraint-metric value does not raise: the trial is
        recorded FAILED with an error naming the values (``"NonFiniteOutcome: name=value"``), and
        never enters the model (`Problem.outcome`, the one validator).

        Args:
            trial_id: A RUNNING (or WAITING) trial's id.
            values: One real number per objective, by name.
            metrics: Extra numbers by name (tracking metrics; must include constraint metrics).

        Returns:
            The trial's new record.

        Raises:
            UnknownTrialError: Unknown id.
            TrialStateError: The trial already finished (told or failed).
            InvalidValuesError: Wrong objective names or count, non-numeric values, a missing
                constraint metric or a metric named like an objective. State is unchanged.
        """
        trial = self._live(trial_id, "tell")
        checked, extra, error = self._problem.outcome(values, metrics)
        if error is not None:
            return self._finish(trial, TrialState.FAILED, None, extra, error)
        return self._finish(trial, TrialState.COMPLETE, checked, extra, None)

    def fail(
        self,
        trial_id: int,
        error: str | BaseException = "failed",
        metrics: Mapping[str, float] | None = None,
    ) -> Trial:
        """Record that a trial failed (raised, timed out, crashed); it never enters the model.

        Args:
            trial_id: A RUNNING or WAITING trial's id.
            error: The error message or exception.
            metrics: Optional metrics reported before the failure (kept with the trial).

        Returns:
            The trial's new record.

        Raises:
            UnknownTrialError: Unknown id.
            TrialStateError: The trial already finished.
            InvalidValuesError: Malformed ``metrics``.
        """
        trial = self._live(trial_id, "fail")
        if isinstance(error, BaseException):
            error = f"{type(error).__name__}: {error}"
        if not isinstance(error, str):
            raise InvalidArgumentError(f"error must be a str or an exception, got {error!r}.")
        extra = Problem(self._problem.objectives).check_metrics(metrics)
        return self._finish(trial, TrialState.FAILED, None, extra, error)

    # ------------------------------------------------------------------ internals
    def _live(self, trial_id: int, action: str) -> Trial:
        trial = self.trial(trial_id)
        if trial.state.is_finished:
            raise TrialStateError(
                f"Cannot {action} trial {trial_id}: it is already {trial.state.value}. Each trial "
                f"is told or failed once; ask for a new trial instead."
            )
        return trial

    def _finish(
        self,
        trial: Trial,
        state: TrialState,
        values: dict[str, float] | None,
        metrics: dict[str, float],
        error: str | None,
    ) -> Trial:
        done = _replace(trial, state=state, values=values, metrics=metrics, error=error)
        self._set(done)
        if state is TrialState.COMPLETE:
            logger.info("Trial %d finished with values %s.", trial.id, values)
        else:
            logger.info("Trial %d failed: %s", trial.id, error)
        return done

    def _report_outliers(self) -> None:
        """Warn once per trial and outcome that the model clips (`Problem.outliers`)."""
        done = [t for t in self._trials if t.state is TrialState.COMPLETE]
        for tid, name, told, modeled in self._problem.outliers(done):
            if (tid, name) in self._warned:
                continue
            self._warned.add((tid, name))
            logger.warning(
                "Trial %d's %s=%r lies far outside the other trials' values; the model uses "
                "%.6g instead (clipped %g robust spreads from their median) so the other values "
                "keep their digits. If it marks a failure, raise from evaluate instead.",
                tid,
                name,
                told,
                modeled,
                OUTLIER_SPREAD,
            )

    def _set(self, trial: Trial) -> None:
        """Replace a trial's record; `sync` re-validates records from that id on."""
        self._trials[trial.id] = trial
        del self._raw[trial.id :]

    def _check_config(self, config: Any) -> dict[str, Any]:
        from spaces import SpaceError

        try:
            return self._space.validate(config)
        except SpaceError as err:
            raise InvalidConfigError(f"Configuration outside the space: {err}") from err

    def sync(self, trials: Iterable[Trial | Mapping[str, Any]]) -> None:
        """Replace the tuner's trials with stored records, keeping its surrogate and caches.

        A driver that keeps one tuner across proposals calls this with the storage's current
        trials before each `ask`; what it proposes then equals what a tuner built from the
        same records would propose (a proposal is a pure function of the trials). Records equal
        to the ones passed last time are not validated again.

        Args:
            trials: `Trial` records or `Trial.to_dict` dicts, ids ``0..n-1`` in order.

        Raises:
            InvalidTrialRecordError: Inconsistent records (the tuner is left unchanged).
        """
        if isinstance(trials, Mapping | str):
            raise InvalidTrialRecordError("trials must be a list of Trial records.")
        raw: list[Trial] = []
        out: list[Trial] = []
        for i, rec in enumerate(trials):
            trial = rec if isinstance(rec, Trial) else Trial.from_dict(rec)
            raw.append(trial)
            if i < len(self._raw) and self._raw[i] == trial:
                out.append(self._trials[i])
                continue
            if trial.id != i:
                raise InvalidTrialRecordError(
                    f"Trial records must have ids 0..n-1 in order; record {i} has id {trial.id}."
                )
            try:
                self._check_config(trial.config)  # kept as stored: rebuilds must be bit-exact
                out.append(_replace(trial, **self._check_outcome(trial)))
            except TunerError as err:
                raise InvalidTrialRecordError(f"Trial record {i} is invalid: {err}") from err
        self._raw, self._trials = raw, out

    def _check_outcome(self, trial: Trial) -> dict[str, Any]:
        if not isinstance(trial.state, TrialState):
            raise InvalidTrialRecordError(f"state must be a TrialState, got {trial.state!r}.")
        if trial.state is not TrialState.COMPLETE:
            # A FAILED record may keep what was told (e.g. NaN values); the model ignores it.
            if trial.values is not None and trial.state is not TrialState.FAILED:
                raise InvalidTrialRecordError(f"A {trial.state.value} trial has no values.")
            return {"metrics": dict(trial.metrics)}
        values, metrics, error = self._problem.outcome(trial.values, trial.metrics)
        if error is not None and error.startswith("UnusableOutcome"):
            # stored COMPLETE by a rewrite-tuner that did not refuse it: not modeled, so the
            # study still proposes (and resumes)
            logger.warning(
                "Trial %d is stored COMPLETE, but %s. It is treated as FAILED (not modeled).",
                trial.id,
                error,
            )
            return {"state": TrialState.FAILED, "values": None, "metrics": metrics, "error": error}
        if error is not None:
            raise InvalidTrialRecordError(f"A COMPLETE trial must have finite outcomes ({error}).")
        return {"values": values, "metrics": metrics}


def _replace(trial: Trial, **changes: Any) -> Trial:
    fields = trial.to_dict() | {"state": trial.state}
    fields.update(changes)
    return Trial(**fields)


def _check_space(space: Any) -> Space:
    from spaces import Space

    if not isinstance(space, Space):
        raise InvalidSpecError(f"space must be a spaces.Space, got {type(space).__name__}.")
    return space


def _check_int(
    name: str, value: Any, minimum: int, error: type[TunerError] = InvalidSpecError
) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise error(f"{name} must be an int >= {minimum}, got {value!r}.")
    return value
