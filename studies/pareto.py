"""Pareto sets, pick rules and hypervolume over stored trials (pure functions, no storage).

Conventions: a trial is *feasible* when it is COMPLETE and meets every outcome constraint of the
study; the Pareto set is the feasible trials no other feasible trial dominates (at least as good on
every objective, better on one), in trial-number order; duplicates of a point are all kept.

These are views of stored trials over the tuner's definitions, not copies of them: feasibility is
`tuner.problem.meets_constraints`, the objective encoding `tuner.Problem.maximized` and
dominance `tuner.acquisition.pareto_mask`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from studies.errors import ExportError
from studies.records import TrialRecord

__all__ = [
    "Constrained",
    "PickRule",
    "Weighted",
    "choose_trial",
    "feasible",
    "hypervolume_curve",
    "pareto_front",
    "rank_pareto",
    "reference_point",
]


def _constraints(specs: Sequence[str]) -> list:
    from tuner.problem import parse_constraint

    return [parse_constraint(s) for s in specs]


def feasible(trials: Sequence[TrialRecord], constraints: Sequence[str]) -> list[TrialRecord]:
    """COMPLETE trials that meet every constraint (``"name <= bound"`` / ``"name >= bound"``;
    `tuner.problem.meets_constraints`)."""
    from tuner.problem import meets_constraints

    parsed = _constraints(constraints)
    return [
        t
        for t in trials
        if t.state == "COMPLETE"
        and t.values is not None
        and meets_constraints(parsed, {**t.metrics, **t.values})
    ]


def _maximized(trials: Sequence[TrialRecord], objectives: Mapping[str, str]) -> np.ndarray:
    """``n x m`` array of objective values, minimized ones negated (larger is better;
    `tuner.Problem.maximized`)."""
    from tuner.problem import Problem

    problem = Problem(objectives)
    rows = [problem.maximized(t.values) for t in trials]  # type: ignore[arg-type]
    return np.asarray(rows, dtype=np.float64).reshape(len(trials), len(objectives))


def pareto_front(
    trials: Sequence[TrialRecord], objectives: Mapping[str, str], constraints: Sequence[str] = ()
) -> list[TrialRecord]:
    """The feasible, non-dominated trials, in number order (`tuner.acquisition.pareto_mask`)."""
    import torch

    from tuner.acquisition import pareto_mask

    cands = feasible(trials, constraints)
    if not cands:
        return []
    mask = pareto_mask(torch.as_tensor(_maximized(cands, objectives))).tolist()
    return [t for t, keep in zip(cands, mask) if keep]


def reference_point(Y: np.ndarray) -> np.ndarray:
    """Reference point for hypervolume (maximization convention, ``n x m`` input): the worst value
    of each objective minus 10% of its range (or minus 1 when the range is 0).

    Not the tuner's rule (`tuner.acquisition.infer_reference`: BoTorch's
    ``nadir - 0.1 * (ideal - nadir)`` of the Pareto front, re-applied at each proposal), on
    purpose: a progress curve needs one fixed point below every feasible trial, so that each one
    counts, and one that stays below a flat objective (BoTorch's rule puts it on a zero range,
    where the volume would read 0)."""
    lo, hi = Y.min(axis=0), Y.max(axis=0)
    span = np.where(hi > lo, hi - lo, 1.0)
    return lo - 0.1 * span


def hypervolume_curve(
    trials: Sequence[TrialRecord],
    objectives: Mapping[str, str],
    constraints: Sequence[str] = (),
    ref: Sequence[float] | None = None,
) -> tuple[list[int], list[float]]:
    """Dominated hypervolume of the feasible trials after each finished trial.

    Args:
        trials: The study's trials.
        objectives: Objective name to direction.
        constraints: Outcome constraints a trial must meet to count.
        ref: Reference point in the objectives' own units; by default `reference_point` over all
            feasible trials.

    Returns:
        ``(numbers, hv)``: the finished trials' numbers in order and the hypervolume after each.
    """
    finished = sorted((t for t in trials if t.state.is_finished), key=lambda t: t.number)
    ok = {t.number for t in feasible(finished, constraints)}
    good = [t for t in finished if t.number in ok]
    if not good:
        return [t.number for t in finished], [0.0] * len(finished)
    Y_all = _maximized(good, objectives)
    if ref is None:
        r = reference_point(Y_all)
    else:
        sign = np.array([1.0 if d == "maximize" else -1.0 for d in objectives.values()])
        r = sign * np.asarray(ref, dtype=np.float64)
    # The volume depends only on the non-dominated points: keep those, and recompute only when
    # a trial enters them (linear in the trials, where recomputing over every point seen was
    # quadratic in time and, in BoTorch's box decomposition, ran out of memory at 2,000 trials).
    numbers, curve = [], []
    front = np.empty((0, len(objectives)))
    value = 0.0
    rows = iter(Y_all)
    for t in finished:
        if t.number in ok:
            y = next(rows)
            if np.all(y > r) and not np.any(np.all(front >= y, axis=1)):
                front = np.vstack([front[~np.all(y >= front, axis=1)], y])
                value = _volume(front, r)
        numbers.append(t.number)
        curve.append(value)
    return numbers, curve


def _volume(front: np.ndarray, r: np.ndarray) -> float:
    """Hypervolume dominated by the mutually non-dominated ``k x m`` points ``front`` (all above
    ``r``, maximization): a sweep for two objectives, BoTorch's `Hypervolume` otherwise."""
    if front.shape[1] == 1:
        return float(front[:, 0].max() - r[0])
    if front.shape[1] == 2:
        pts = front[np.argsort(-front[:, 0])]  # x descending, so y ascending on a front
        widths = pts[:, 0] - r[0]
        heights = np.diff(np.concatenate([[r[1]], pts[:, 1]]))
        return float(np.sum(widths * heights))
    import torch
    from botorch.utils.multi_objective.hypervolume import Hypervolume

    hv = Hypervolume(torch.as_tensor(r, dtype=torch.float64))
    return float(hv.compute(torch.as_tensor(front, dtype=torch.float64)))


# ---------------------------------------------------------------------- pick rules
@dataclass(frozen=True)
class Weighted:
    """Pick the Pareto trial with the largest weighted sum of normalized objectives.

    Each objective is rescaled over the Pareto set to [0, 1] with 1 the best value (an objective
    that is equal on the whole set scores 1); weights are made to sum to 1; ties go to the lowest
    trial number. ``weights=None`` weighs every objective equally.

    Attributes:
        weights: Objective name to a non-negative weight; objectives left out weigh 0.
    """

    weights: Mapping[str, float] | None = None

    def describe(self) -> str:
        """The rule in words, recorded in the export's provenance."""
        w = "equal weights" if self.weights is None else f"weights {dict(self.weights)}"
        return f"max weighted sum of objectives normalized over the Pareto set ({w})"


@dataclass(frozen=True)
class Constrained:
    """Pick the best trial on one objective among those meeting extra constraints.

    Candidates are the feasible trials (COMPLETE, meeting the study's constraints) that also meet
    ``subject_to``; the best on ``objective`` wins, ties go to the lowest trial number.

    Attributes:
        objective: The objective to optimize (in its own direction).
        subject_to: Extra constraints such as ``"search_seconds <= 30"`` on objectives or metrics;
            a single string is one constraint. Stored as a tuple.
    """

    objective: str
    subject_to: Sequence[str] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        # a bare string is one constraint, not a sequence of one-character constraints
        specs = (self.subject_to,) if isinstance(self.subject_to, str) else self.subject_to
        object.__setattr__(self, "subject_to", tuple(specs))

    def describe(self) -> str:
        """The rule in words, recorded in the export's provenance."""
        extra = f" subject to {list(self.subject_to)}" if self.subject_to else ""
        return f"best {self.objective!r} among feasible trials{extra}"


PickRule = Weighted | Constrained | int | Mapping[str, float] | None


def choose_trial(
    trials: Sequence[TrialRecord],
    objectives: Mapping[str, str],
    constraints: Sequence[str],
    pick: PickRule = None,
) -> tuple[TrialRecord, str]:
    """Apply a pick rule; returns the chosen trial and the rule in words.

    Args:
        trials: The study's trials.
        objectives: Objective name to direction.
        constraints: The study's outcome constraints.
        pick: `Weighted` (a plain dict of weights is shorthand for it; ``None`` means equal
            weights), `Constrained`, or a trial number.

    Raises:
        ExportError: If no trial qualifies, or the rule names an unknown objective, or its weights
            are negative, non-finite or all zero.
    """
    if isinstance(pick, bool):
        raise ExportError(f"pick must be a rule or a trial number, got {pick!r}.")
    if isinstance(pick, int):
        match = [t for t in trials if t.number == pick and t.state == "COMPLETE"]
        if not match:
            done = [t.number for t in trials if t.state == "COMPLETE"]
            raise ExportError(f"Trial {pick} is not a COMPLETE trial; COMPLETE trials are {done}.")
        return match[0], f"trial {pick} chosen by number"
    if pick is None or isinstance(pick, Mapping):
        pick = Weighted(None if pick is None else dict(pick))
    if isinstance(pick, Weighted):
        return _weighted(trials, objectives, constraints, pick), pick.describe()
    if isinstance(pick, Constrained):
        return _constrained(trials, objectives, constraints, pick), pick.describe()
    raise ExportError(
        f"pick must be Weighted(...), Constrained(...), a dict of weights or a trial number; "
        f"got {pick!r}."
    )


def _weighted(
    trials: Sequence[TrialRecord],
    objectives: Mapping[str, str],
    constraints: Sequence[str],
    rule: Weighted,
) -> TrialRecord:
    return rank_pareto(trials, objectives, constraints, rule)[0]


def rank_pareto(
    trials: Sequence[TrialRecord],
    objectives: Mapping[str, str],
    constraints: Sequence[str],
    rule: Weighted | None = None,
) -> list[TrialRecord]:
    """The feasible Pareto front ordered best first by a `Weighted` rule (default: equal
    weights over objectives normalized on the front); ties keep trial order.

    Raises:
        ExportError: On invalid weights, or when no feasible COMPLETE trial exists.
    """
    rule = rule or Weighted()
    weights = dict.fromkeys(objectives, 1.0) if rule.weights is None else dict(rule.weights)
    unknown = sorted(set(weights) - set(objectives))
    bad = {k: v for k, v in weights.items() if not (math.isfinite(v) and v >= 0)}
    if unknown or bad or sum(weights.values()) <= 0:
        raise ExportError(
            f"Weights must name objectives {list(objectives)} with finite non-negative values "
            f"and a positive sum; got {weights} (unknown {unknown}, invalid {bad})."
        )
    front = pareto_front(trials, objectives, constraints)
    if not front:
        raise ExportError("The study has no feasible COMPLETE trial to pick from.")
    Y = _maximized(front, objectives)
    lo, hi = Y.min(axis=0), Y.max(axis=0)
    norm = np.where(hi > lo, (Y - lo) / np.where(hi > lo, hi - lo, 1.0), 1.0)
    w = np.array([weights.get(k, 0.0) for k in objectives]) / sum(weights.values())
    scores = norm @ w
    order = np.argsort(-scores, kind="stable")  # equal scores: the lowest number first
    return [front[int(i)] for i in order]


def _constrained(
    trials: Sequence[TrialRecord],
    objectives: Mapping[str, str],
    constraints: Sequence[str],
    rule: Constrained,
) -> TrialRecord:
    if rule.objective not in objectives:
        raise ExportError(
            f"Constrained(objective={rule.objective!r}) must name one of {list(objectives)}."
        )
    _check_known(trials, objectives, rule.subject_to)
    cands = feasible(trials, [*constraints, *rule.subject_to])
    if not cands:
        raise ExportError(
            f"No COMPLETE trial meets the study's constraints {list(constraints)} and "
            f"{list(rule.subject_to)}; relax the constraints."
        )
    sign = 1.0 if objectives[rule.objective] == "maximize" else -1.0
    scores = [sign * t.values[rule.objective] for t in cands]  # type: ignore[index]
    return cands[int(np.argmax(scores))]


def _check_known(
    trials: Sequence[TrialRecord], objectives: Mapping[str, str], specs: Sequence[str]
) -> None:
    """Refuse constraints on a name that is neither an objective nor a metric any COMPLETE trial
    reported (a typo would otherwise read as "no trial meets the constraints")."""
    import difflib

    done = [t for t in trials if t.state == "COMPLETE"]
    if not done:
        return  # nothing to learn the metric names from; the caller reports "no trial"
    known = sorted({*objectives, *(k for t in done for k in t.metrics)})
    for spec, c in zip(specs, _constraints(specs)):
        if c.name not in known:
            close = difflib.get_close_matches(c.name, known, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ExportError(
                f"Constraint {spec!r} names {c.name!r}, which is neither an objective nor a "
                f"metric the COMPLETE trials report; {hint}known names are {known}."
            )
