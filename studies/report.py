"""`structure_report`: what the structured surrogate learns from a study's completed trials."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from studies.errors import StudyError
from studies.quiet import numerical_warnings_to_log
from tuner.trial import TrialState

if TYPE_CHECKING:
    from studies.study import Study

__all__ = ["structure_report"]


def structure_report(study: Study, png: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Fit the structured surrogate on a study's completed trials and describe what it learned.

    Args:
        study: The study.
        png: Where to draw the learned DAG with its edge strengths (skipped when None, or when
            there is no structure yet: fewer than `StructuredConfig.min_trials` completed
            trials, or no tracking metrics).

    Returns:
        `structure.StructuredSurrogate.describe()` of the fit: the chosen model and why, both
        models' scores and the edges; ``"png"`` holds the drawing's path when one was made.
    """
    from structure import draw_structure, explain
    from studies.tuning import make_surrogate

    records = [r for r in study.trials if r.state == TrialState.COMPLETE]
    if not records:
        raise StudyError(f"Study {study.name!r} has no completed trial to learn a structure from.")
    data = study.problem.training_data(study.space, records, study.seed)
    surrogate = make_surrogate("structured", study.settings)  # the study's own options
    with numerical_warnings_to_log():
        surrogate.fit(data)
    desc = surrogate.describe()
    if png is not None and desc.get("structure"):
        note = explain(desc).splitlines()[0]
        desc["png"] = str(draw_structure(desc["structure"], png, note=note))
    return desc
