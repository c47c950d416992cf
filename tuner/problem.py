"""What is optimized: objectives with directions and outcome constraints.

`Problem` validates told values and metrics once, at the boundary, and turns completed trials into
the surrogate's `TrainingData` (objectives in maximization convention, then constraint metrics).

Observed noise: a metric named ``<outcome>.sem`` is the standard error of that outcome's told
value (for example the mean over several search seeds). When every completed trial reports one
for every modeled outcome, `TrainingData.Yvar` holds their squares and the surrogate uses them as
known noise instead of inferring one noise level for all trials (so a trial measured on more
seeds weighs more).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import torch
from torch import Tensor

from tuner.errors import InvalidSpecError, InvalidValuesError
from tuner.surrogate import TrainingData
from tuner.trial import Trial, split_run_metric

if TYPE_CHECKING:
    from spaces import Space

__all__ = [
    "DIRECTIONS",
    "MAX_OUTCOME_MAGNITUDE",
    "OUTLIER_SPREAD",
    "SEM_SUFFIX",
    "Outcome",
    "OutcomeConstraint",
    "Problem",
    "meets_constraints",
    "parse_constraint",
]

SEM_SUFFIX = ".sem"
"""A metric named ``<outcome>.sem`` is the standard error of that outcome's value."""

DIRECTIONS = ("minimize", "maximize")

MAX_OUTCOME_MAGNITUDE = 1e100
"""Objective and constraint values beyond ``±1e100`` FAIL the trial (``"UnusableOutcome"``):
hypervolumes (products over objectives), variances (squares) and standardization overflow or lose
every other value's digits at such magnitudes, and no measured quantity reaches them (they are
sentinels such as ``1e308`` or ``sys.float_info.max``)."""

OUTLIER_SPREAD = 1e4
"""A modeled outcome further than this many robust spreads (median absolute deviation) from the
median of its column is clipped there before fitting (`Problem.training_data`; an objective only
on its worse side, `Problem.keep_high`): the surrogate
standardizes each outcome, and one value ``1e15`` times further out than the rest squeezes the
others onto one number and breaks the acquisition (its values all underflow)."""
_CONSTRAINT_RE = re.compile(r"^\s*([A-Za-z_][\w.\-/]*)\s*(<=|>=)\s*(\S+)\s*$")


@dataclass(frozen=True)
class OutcomeConstraint:
    """An outcome constraint ``metric op bound``, for example ``search_seconds <= 30``.

    Attributes:
        name: An objective or a metric every completed trial reports.
        op: ``"<="`` or ``">="``.
        bound: Finite bound in the metric's own units.
    """

    name: str
    op: str
    bound: float

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidSpecError(f"A constraint needs a metric name, got {self.name!r}.")
        if self.op not in ("<=", ">="):
            raise InvalidSpecError(
                f"A constraint's op must be '<=' or '>=', but got {self.op!r} in {self}."
            )
        if not _is_real(self.bound) or not math.isfinite(float(self.bound)):
            raise InvalidSpecError(
                f"A constraint's bound must be a finite number, got {self.bound!r} for "
                f"{self.name!r}."
            )
        object.__setattr__(self, "bound", float(self.bound))

    def __str__(self) -> str:
        # Studies store constraints as these strings: the bound must read back exactly. The
        # short form where it is exact (``30``, ``1e+06``), else the shortest exact one.
        short = f"{self.bound:g}"
        bound = short if float(short) == self.bound else repr(self.bound)
        return f"{self.name} {self.op} {bound}"

    def satisfied(self, value: float) -> bool:
        """Whether ``value`` meets the constraint."""
        return value <= self.bound if self.op == "<=" else value >= self.bound


def parse_constraint(spec: str | OutcomeConstraint) -> OutcomeConstraint:
    """Parse ``"name <= bound"`` or ``"name >= bound"`` (an `OutcomeConstraint` passes through).

    Raises:
        InvalidSpecError: If the string does not have that form.
    """
    if isinstance(spec, OutcomeConstraint):
        return spec
    match = _CONSTRAINT_RE.match(spec) if isinstance(spec, str) else None
    if match is None:
        raise InvalidSpecError(
            f"A constraint must read 'metric <= bound' or 'metric >= bound', e.g. "
            f"'search_seconds <= 30', but got {spec!r}."
        )
    name, op, bound = match.groups()
    try:
        value = float(bound)
    except ValueError:
        raise InvalidSpecError(f"The bound in constraint {spec!r} is not a number.") from None
    return OutcomeConstraint(name, op, value)


class Outcome(NamedTuple):
    """A told outcome as `Problem.outcome` judged it: COMPLETE when ``error`` is None, else
    FAILED (``values`` is None then and ``error`` says why).

    Attributes:
        values: Objective values as floats, by objective name; None for a FAILED outcome.
        metrics: The metrics as floats (non-finite tracking metrics included).
        error: ``"NonFiniteOutcome: name=value, ..."``, ``"UnusableOutcome: ..."`` or
            ``"MissingOutcome: ..."``, or None.
    """

    values: dict[str, float] | None
    metrics: dict[str, float]
    error: str | None


def meets_constraints(constraints: Iterable[OutcomeConstraint], told: Mapping[str, float]) -> bool:
    """Whether told outcomes (objective values and metrics by name) meet every constraint; a
    constraint whose metric was not told is not met. The one definition of feasibility:
    `Problem.is_feasible` and ``studies.pareto.feasible`` use it."""
    return all(c.name in told and c.satisfied(told[c.name]) for c in constraints)


class Problem:
    """Objectives and constraints, validated once.

    Args:
        objectives: Objective name to ``"minimize"`` or ``"maximize"``, in the order used
            everywhere (the surrogate's first outputs, the reference point).
        constraints: Outcome constraints as strings (``"search_seconds <= 30"``) or
            `OutcomeConstraint`s. A constraint on an objective uses that objective's column; any
            other name becomes a required metric and an extra modeled outcome.

    Raises:
        InvalidSpecError: For an empty or malformed objective mapping, an unknown direction, or a
            malformed or duplicate constraint.
    """

    def __init__(
        self,
        objectives: Mapping[str, str],
        constraints: Sequence[str | OutcomeConstraint] = (),
    ) -> None:
        if not isinstance(objectives, Mapping) or not objectives:
            raise InvalidSpecError(
                "Objectives must be a non-empty dict of name to 'minimize' or 'maximize', e.g. "
                f"{{'latency': 'minimize'}}, but got {objectives!r}."
            )
        for name, direction in objectives.items():
            if not isinstance(name, str) or not name:
                raise InvalidSpecError(f"Objective names must be non-empty strings, got {name!r}.")
            if direction not in DIRECTIONS:
                raise InvalidSpecError(
                    f"Objective {name!r} has direction {direction!r}; use one of {DIRECTIONS}."
                )
        if isinstance(constraints, str | OutcomeConstraint):
            constraints = (constraints,)
        if not isinstance(constraints, Iterable):
            raise InvalidSpecError(
                "Constraints must be a list of strings such as 'search_seconds <= 30' (or empty), "
                f"got {constraints!r}."
            )
        self.objectives: dict[str, str] = dict(objectives)
        self.constraints: tuple[OutcomeConstraint, ...] = tuple(
            parse_constraint(c) for c in constraints
        )
        if len(set(self.constraints)) != len(self.constraints):
            raise InvalidSpecError(f"Constraints are repeated: {[str(c) for c in constraints]}.")
        extra = [c.name for c in self.constraints if c.name not in self.objectives]
        self.constraint_metrics: list[str] = list(dict.fromkeys(extra))
        self.outcome_names: list[str] = [*self.objectives, *self.constraint_metrics]

    @property
    def n_objectives(self) -> int:
        """Number of objectives."""
        return len(self.objectives)

    def to_dict(self) -> dict[str, Any]:
        """JSON-able description: objectives and constraint strings."""
        return {
            "objectives": dict(self.objectives),
            "constraints": [str(c) for c in self.constraints],
        }

    # ------------------------------------------------------------------ validation
    def check_values(self, values: Any) -> dict[str, float]:
        """Validate told objective values and return them as floats (NaN/inf are kept).

        Raises:
            InvalidValuesError: If ``values`` is not a dict with exactly the objective names, or a
                value is not a real number.
        """
        if not isinstance(values, Mapping):
            raise InvalidValuesError(
                f"Objective values must be a dict by objective name {list(self.objectives)}, "
                f"but got {type(values).__name__}: {values!r}."
            )
        missing = [k for k in self.objectives if k not in values]
        unknown = [k for k in values if k not in self.objectives]
        if missing or unknown:
            raise InvalidValuesError(
                f"Objective values must name exactly the objectives {list(self.objectives)}; "
                f"missing {missing}, unknown {unknown}. Report other numbers as metrics=."
            )
        return {k: _real(f"objective {k!r}", values[k]) for k in self.objectives}

    def check_metrics(self, metrics: Any) -> dict[str, float]:
        """Validate tracking/constraint metrics and return them as floats.

        Raises:
            InvalidValuesError: If ``metrics`` is not a dict of string to real number, a name
                clashes with an objective, or a constraint metric is missing.
        """
        out = self._metric_floats(metrics)
        missing = [k for k in self.constraint_metrics if k not in out]
        if missing:
            raise InvalidValuesError(
                f"The constraint metrics {missing} must be reported with every completed trial "
                f"(constraints: {[str(c) for c in self.constraints]}); got metrics {sorted(out)}."
            )
        return out

    def _metric_floats(self, metrics: Any) -> dict[str, float]:
        if metrics is None:
            metrics = {}
        if not isinstance(metrics, Mapping):
            raise InvalidValuesError(
                f"Metrics must be a dict of name to number, but got {type(metrics).__name__}."
            )
        out: dict[str, float] = {}
        for k, v in metrics.items():
            if not isinstance(k, str) or not k:
                raise InvalidValuesError(f"Metric names must be non-empty strings, got {k!r}.")
            if k in self.objectives:
                raise InvalidValuesError(
                    f"Metric {k!r} is an objective; pass it in values, not in metrics."
                )
            out[k] = _real(f"metric {k!r}", v)
        return out

    def outcome(self, values: Any, metrics: Any = None, *, from_evaluate: bool = False) -> Outcome:
        """Judge a told outcome: the one validator (`Tuner.tell`, ``studies.Study.tell`` and
        ``Study.record`` all call it).

        A NaN or infinite objective or constraint-metric value does not raise: the outcome is
        FAILED (``"NonFiniteOutcome: name=value, ..."``) and never enters the model; so is one
        beyond ``±MAX_OUTCOME_MAGNITUDE`` (``"UnusableOutcome: ..."``).

        Args:
            values: One real number per objective, by name.
            metrics: Tracking and constraint metrics by name, or None.
            from_evaluate: The numbers are what an evaluate function returned (see
                `split_result`), not what a caller told: a missing objective or constraint
                metric makes the outcome FAILED (``"MissingOutcome: ..."``), and so does a
                malformed one (``"InvalidOutcome: ..."``), instead of raising.

        Raises:
            InvalidValuesError: As `check_values` and `check_metrics` (unless ``from_evaluate``).
        """
        if not from_evaluate:
            return self._outcome(values, metrics)
        told = {**(metrics or {}), **(values or {})}
        missing = [k for k in self.outcome_names if k not in told]
        try:
            if missing:
                return Outcome(
                    None,
                    self._metric_floats(metrics),
                    f"MissingOutcome: evaluate returned {sorted(told)} but not {missing} "
                    f"(objectives {list(self.objectives)}, constraint metrics "
                    f"{self.constraint_metrics})",
                )
            return self._outcome(values, metrics)
        except InvalidValuesError as err:
            return Outcome(None, {}, f"InvalidOutcome: {err}")

    def _outcome(self, values: Any, metrics: Any) -> Outcome:
        checked = self.check_values(values)
        extra = self.check_metrics(metrics)
        bad = self.non_finite(checked, extra)
        if bad:
            told = {**extra, **checked}
            error = "NonFiniteOutcome: " + ", ".join(f"{k}={told[k]!r}" for k in bad)
            return Outcome(None, extra, error)
        huge = self.unusable(checked, extra)
        if huge:
            return Outcome(None, extra, self.unusable_message(huge, {**extra, **checked}))
        return Outcome(checked, extra, None)

    def unusable(self, values: Mapping[str, float], metrics: Mapping[str, float]) -> list[str]:
        """Names of objectives and constraint metrics whose (finite) told value lies beyond
        ``±MAX_OUTCOME_MAGNITUDE``: the surrogate cannot model them (see that constant)."""
        told = {**metrics, **values}
        return [k for k in self.outcome_names if abs(told[k]) > MAX_OUTCOME_MAGNITUDE]

    @staticmethod
    def unusable_message(names: Sequence[str], told: Mapping[str, float]) -> str:
        """``"UnusableOutcome: name=value, ... ; the fix"`` for values beyond the magnitude."""
        shown = ", ".join(f"{k}={told[k]!r}" for k in names)
        return (
            f"UnusableOutcome: {shown} lies beyond ±{MAX_OUTCOME_MAGNITUDE:g}, the magnitude the "
            "surrogate can model; report it in a smaller unit or as a log, or raise from "
            "evaluate to mark the trial failed"
        )

    def split_result(self, result: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """An evaluate function's flat result as ``(values, metrics)``: the objectives it names,
        and everything else."""
        values = {k: v for k, v in result.items() if k in self.objectives}
        return values, {k: v for k, v in result.items() if k not in self.objectives}

    def non_finite(self, values: Mapping[str, float], metrics: Mapping[str, float]) -> list[str]:
        """Names of objectives and constraint metrics whose told value is NaN or infinite."""
        told = {**metrics, **values}
        return [k for k in self.outcome_names if not math.isfinite(told[k])]

    def is_feasible(self, trial: Trial) -> bool:
        """Whether a COMPLETE trial meets every outcome constraint (`meets_constraints`)."""
        assert trial.values is not None
        return meets_constraints(self.constraints, {**trial.metrics, **trial.values})

    # ------------------------------------------------------------------ encoding
    def maximized(self, values: Mapping[str, float]) -> list[float]:
        """Objective values in maximization convention (minimized ones negated), in objective
        order: the row `pareto_mask` and the hypervolume compare."""
        return [values[k] if d == "maximize" else -values[k] for k, d in self.objectives.items()]

    def outcomes(self, trial: Trial) -> list[float]:
        """A COMPLETE trial's outcome row: objectives (maximization convention), constraints."""
        assert trial.values is not None
        return self.maximized(trial.values) + [trial.metrics[k] for k in self.constraint_metrics]

    def training_data(self, space: Space, completed: Sequence[Trial], seed: int) -> TrainingData:
        """Encode COMPLETE trials for a surrogate (see `TrainingData`).

        Outcomes (and tracking metrics) further out than `OUTLIER_SPREAD` robust spreads are
        clipped there (`clip_outliers`; `outliers` names them); an objective only on its worse
        side (`keep_high`).
        """
        X = space.to_unit([t.config for t in completed])
        Y = torch.tensor([self.outcomes(t) for t in completed], dtype=torch.float64)
        Y = clip_outliers(Y.reshape(len(completed), len(self.outcome_names)), self.keep_high())
        names = sorted(
            k
            for k in {k for t in completed for k in t.metrics} - set(self.constraint_metrics)
            if not k.endswith(SEM_SUFFIX)  # errors of measurements, not tracking metrics
        )
        metrics = {
            k: self._clip_metric(
                k,
                torch.tensor([t.metrics.get(k, math.nan) for t in completed], dtype=torch.float64),
            )
            for k in names
        }
        return TrainingData(
            X=X,
            Y=Y,
            outcome_names=list(self.outcome_names),
            metrics=metrics,
            space=space,
            seed=seed,
            n_objectives=self.n_objectives,
            Yvar=self.observed_noise(completed),
            directions=tuple(self.objectives.values()),
        )

    def _clip_metric(self, name: str, values: Tensor) -> Tensor:
        """`clip_outliers` of a tracking metric: a per-run objective (``<objective>@<run>``, in
        the objective's own direction) is clipped only on its worse side, like the objective."""
        run = split_run_metric(name)
        direction = self.objectives.get(run[0]) if run else None
        if direction == "maximize":
            return clip_outliers(values, [True])
        if direction == "minimize":
            return -clip_outliers(-values, [True])
        return clip_outliers(values)

    def keep_high(self) -> list[bool]:
        """Per outcome column, whether `clip_outliers` keeps its high side: the objectives'
        (maximization convention: better), not the constraint metrics'."""
        return [True] * self.n_objectives + [False] * len(self.constraint_metrics)

    def outliers(self, completed: Sequence[Trial]) -> list[tuple[int, str, float, float]]:
        """The modeled outcomes `training_data` clips: ``(trial id, outcome name, told value,
        value modeled)`` for each (objectives in their own direction)."""
        if not completed:
            return []
        Y = torch.tensor([self.outcomes(t) for t in completed], dtype=torch.float64)
        Y = Y.reshape(len(completed), len(self.outcome_names))
        C = clip_outliers(Y, self.keep_high())
        out = []
        for i, j in torch.nonzero(C != Y).tolist():
            sign = -1.0 if self.objectives.get(self.outcome_names[j]) == "minimize" else 1.0
            name = self.outcome_names[j]
            out.append((completed[i].id, name, sign * float(Y[i, j]), sign * float(C[i, j])))
        return out

    def observed_noise(self, completed: Sequence[Trial]) -> Tensor | None:
        """``n x m`` variances of the outcomes from their ``<outcome>.sem`` metrics, or None
        unless every trial reports a finite, non-negative one for every outcome."""
        rows = []
        for t in completed:
            row = [t.metrics.get(f"{k}{SEM_SUFFIX}") for k in self.outcome_names]
            if any(v is None or not math.isfinite(v) or v < 0 for v in row):
                return None
            rows.append([float(v) ** 2 for v in row])  # type: ignore[arg-type]
        if not rows:
            return None
        return torch.tensor(rows, dtype=torch.float64)

    def constraint_callables(self) -> list[Callable[[Tensor], Tensor]]:
        """BoTorch outcome constraints on model samples (``... x m``): feasible where ``<= 0``."""
        out: list[Callable[[Tensor], Tensor]] = []
        for c in self.constraints:
            j = self.outcome_names.index(c.name)
            # Model outputs hold minimized objectives negated; undo that for their constraints.
            sign = -1.0 if self.objectives.get(c.name) == "minimize" else 1.0
            if c.op == ">=":
                sign = -sign
                out.append(_Constraint(j, sign, -c.bound))
            else:
                out.append(_Constraint(j, sign, c.bound))
        return out


@dataclass(frozen=True)
class _Constraint:
    """``sign * Z[..., column] - sign_bound`` where ``sign_bound`` is the bound in model units."""

    column: int
    sign: float
    bound: float

    def __call__(self, Z: Tensor) -> Tensor:
        return self.sign * Z[..., self.column] - self.bound


def clip_outliers(Y: Tensor, keep_high: Sequence[bool] | None = None) -> Tensor:
    """Clip each column of ``Y`` (``n x m`` or ``n``-dim Tensor; NaN entries ignored and kept) to
    its median ± `OUTLIER_SPREAD` robust spreads.

    The spread is the median absolute deviation from the median, or, where over half the values
    are equal, the median of the non-zero deviations (so a column of ones with one 5 keeps its 5,
    and a plateau with a few values off it is measured by those values, not by the nearest one).
    A column whose values all agree, or with fewer than 3 values, is returned as it is. Values
    within the bounds are returned unchanged to the last bit.

    Args:
        Y: The values.
        keep_high: Per column, whether values above the median are kept whatever their distance
            (an objective in maximization convention: its best trials are what the model must
            see; a heavy-tailed gain, most trials near 0 and a few near 1, is data, not a
            failure). None: both sides of every column are clipped.
    """
    one = Y.dim() == 1
    cols = Y.unsqueeze(-1) if one else Y
    out = cols.clone()
    for j in range(cols.shape[-1]):
        col = cols[:, j]
        ok = ~torch.isnan(col)
        vals = col[ok]
        if vals.numel() < 3:
            continue
        median = vals.median()
        dev = (vals - median).abs()
        spread = dev.median()
        if spread <= 0:
            nonzero = dev[dev > 0]
            if nonzero.numel() == 0:
                continue
            spread = nonzero.median()
        lo, hi = median - OUTLIER_SPREAD * spread, median + OUTLIER_SPREAD * spread
        if keep_high is not None and keep_high[j]:
            hi = torch.tensor(math.inf, dtype=vals.dtype)
        out[ok, j] = vals.clamp(lo, hi)
    return out.squeeze(-1) if one else out


def _is_real(value: Any) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _real(what: str, value: Any) -> float:
    if isinstance(value, Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        value = value.item()
    if not _is_real(value):
        raise InvalidValuesError(
            f"The {what} must be a real number, but got {value!r} of type {type(value).__name__}."
        )
    return float(value)
