"""Which surrogate a study's tuner uses.

`Study` keeps one `tuner.Tuner` per surrogate kind for its life (see `Study._tuner`); these are
the pieces it is built from, free of any `Study` state.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from tuner.trial import TrialState

if TYPE_CHECKING:
    from studies.settings import StudySettings

__all__ = ["make_surrogate", "surrogate_mode"]


def surrogate_mode(setting: str, constraint_metrics: Collection[str], trials: Sequence[Any]) -> str:
    """The surrogate kind `StudySettings.surrogate` (``setting``) picks for ``trials``
    (`tuner.Trial` records): ``"auto"`` is ``"structured"`` once a completed trial reported a
    tracking metric (a number besides the objectives and ``constraint_metrics``), else
    ``"flat"``; any other setting is itself."""
    if setting != "auto":
        return setting
    told = set(constraint_metrics)
    if any(set(t.metrics) - told for t in trials if t.state == TrialState.COMPLETE):
        return "structured"
    return "flat"


def make_surrogate(mode: str, settings: StudySettings) -> Any:
    """A new surrogate of kind ``mode``; None for ``"flat"`` (the tuner's own GP)."""
    if mode == "flat":
        return None
    if mode == "saas":
        from tuner.surrogate import SaasSurrogate

        return SaasSurrogate({"maxiter": settings.options().fit_maxiter or 150})
    if mode == "grouped":
        from tuner.groups import GroupedSurrogate

        return GroupedSurrogate(fit_options={"maxiter": settings.options().fit_maxiter or 150})
    from structure import Knowledge, StructuredConfig, StructuredSurrogate

    knowledge = Knowledge.from_dict(settings.knowledge) if settings.knowledge else None
    config = StructuredConfig(ignore_metrics=settings.ignore_metrics)
    edges = [(a, b) for a, b in settings.structure] if settings.structure else None
    return StructuredSurrogate(knowledge, config=config, structure=edges)
