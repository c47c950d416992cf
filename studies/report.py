"""`structure_report` and `fit_structure`: what the structured surrogate learns from a study's
completed trials."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any, Protocol

from studies.errors import StudyError
from studies.quiet import numerical_warnings_to_log
from tuner.trial import TrialState

__all__ = ["StudyParts", "fit_structure", "structure_report"]


class StudyParts(Protocol):
    """What `structure_report` reads of a study (a `studies.Study` has all of it)."""

    @property
    def name(self) -> str: ...
    @property
    def space(self) -> Any: ...
    @property
    def problem(self) -> Any: ...
    @property
    def settings(self) -> Any: ...
    @property
    def trials(self) -> Sequence[Any]: ...
    @property
    def seed(self) -> int: ...


def structure_report(
    study: StudyParts, png: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """Fit the structured surrogate on a study's completed trials and describe what it learned.

    Args:
        study: The study (a `studies.Study`, or anything with its parts, `StudyParts`).
        png: Where to draw the learned DAG with its edge strengths (skipped when None, or when
            there is no structure yet: fewer than `StructuredConfig.min_trials` completed
            trials, or no tracking metrics).

    Returns:
        The description of the structured surrogate's fit (`tuner.Fitted.description`): the chosen model and why, both
        models' scores and the edges; ``"png"`` holds the drawing's path when one was made.
    """
    from structure import draw_fit

    desc = fit_structure(
        study.name, study.space, study.problem, study.settings, study.trials, study.seed
    )
    path = None if png is None else draw_fit(desc, png)
    if path is not None:
        desc["png"] = str(path)
    return desc


def fit_structure(
    name: str, space: Any, problem: Any, settings: Any, trials: Sequence[Any], seed: int
) -> dict[str, Any]:
    """Fit the structured surrogate, with a study's own settings, on its completed ``trials``
    and return its fit's description (what `structure_report` and the dashboard show).

    Args:
        name: The study's name (for the error message).
        space: Its `spaces.Space`.
        problem: Its `tuner.Problem` (objectives and constraints).
        settings: Its `StudySettings`.
        trials: Its trials (`tuner.Trial` records); only the COMPLETE ones are used.
        seed: Its seed.

    Raises:
        StudyError: If no trial has completed.
    """
    from studies.tuning import make_surrogate

    records = [r for r in trials if r.state == TrialState.COMPLETE]
    if not records:
        raise StudyError(f"Study {name!r} has no completed trial to learn a structure from.")
    data = problem.training_data(space, records, seed)
    surrogate = make_surrogate("structured", settings)  # the study's own options
    with numerical_warnings_to_log():
        fitted = surrogate.fit(data)
    return dict(fitted.description)
