"""Surrogate choice and the conversion of stored trials to `tuner.Trial` records.

`Study` keeps one `tuner.Tuner` per surrogate kind for its life (see `Study._tuner`); these are
the pieces it is built from, free of any `Study` state.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from tuner.trial import Trial, TrialState

if TYPE_CHECKING:
    from studies.records import TrialRecord
    from studies.settings import StudySettings

__all__ = ["cached_records", "make_surrogate", "surrogate_mode", "tuner_records"]


def tuner_records(trials: Sequence[TrialRecord]) -> list[Any]:
    """Stored trials as `tuner.Trial` records (what the tuner is rebuilt from)."""
    return [
        Trial(
            id=t.number,
            config=t.config,
            state=t.state,
            values=t.values,
            metrics=t.metrics,
            error=t.error,
        )
        for t in trials
    ]


def cached_records(
    cache: dict[int, tuple[TrialRecord, Any]], trials: Sequence[TrialRecord]
) -> list[Any]:
    """``trials`` as `tuner.Trial` records, converting only those that changed since they were
    last put in ``cache`` (trial number -> (stored trial, its record); updated in place)."""
    out = []
    for t in trials:
        hit = cache.get(t.number)
        if hit is None or hit[0] != t:
            hit = cache[t.number] = (t, tuner_records([t])[0])
        out.append(hit[1])
    return out


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
    from structure import StructuredSurrogate

    return StructuredSurrogate()
