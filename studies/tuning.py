"""Which surrogate a study's tuner uses.

`Study` keeps one `tuner.Tuner` per surrogate kind for its life (see `Study._tuner`); these are
the pieces it is built from, free of any `Study` state. The kinds themselves live in one
registry, `tuner.kinds`; `structure` registers its own there when it is imported.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from studies.errors import StudySettingsError
from tuner.trial import TrialState

if TYPE_CHECKING:
    from studies.settings import StudySettings
    from tuner.kinds import SurrogateKind

__all__ = ["check_kind", "make_surrogate", "model_kind", "surrogate_kind", "surrogate_mode"]

AUTO = "auto"
"""The `StudySettings.surrogate` that picks a kind by the trials (`surrogate_mode`)."""

MOVED: dict[str, str] = {}
"""Kinds that stored settings may name but the library no longer registers -> the module that
registers them (kept for experiments under ``benchmarks/``)."""


def surrogate_mode(setting: str, constraint_metrics: Collection[str], trials: Sequence[Any]) -> str:
    """The surrogate kind `StudySettings.surrogate` (``setting``) picks for ``trials``
    (`tuner.Trial` records): ``"auto"`` is ``"structured"`` once a completed trial reported a
    tracking metric (a number besides the objectives and ``constraint_metrics``), else
    ``"flat"``; any other setting is itself."""
    if setting != AUTO:
        return setting
    told = set(constraint_metrics)
    if any(set(t.metrics) - told for t in trials if t.state == TrialState.COMPLETE):
        return "structured"
    return "flat"


def model_kind(settings: Any, constraint_metrics: Collection[str], trials: Sequence[Any]) -> str:
    """The surrogate kind a study with ``settings`` (`StudySettings`) uses for ``trials``: its
    `StudySettings.warm_start_model` when it is warm-started (warm start replaces
    ``surrogate``), else what `surrogate_mode` picks."""
    if settings.warm_start:
        return str(settings.warm_start_model)
    return surrogate_mode(settings.surrogate, constraint_metrics, trials)


def _registered(name: str, warm_start: bool) -> bool:
    """Whether ``name`` is a registered kind, once `structure` has registered its own."""
    from tuner.kinds import surrogate_kinds

    if name in surrogate_kinds(warm_start):
        return True
    import structure  # noqa: F401 - registers the network-of-GPs kinds

    return name in surrogate_kinds(warm_start)


def check_kind(field: str, name: Any, warm_start: bool = False) -> None:
    """Refuse a ``name`` that is neither a registered kind nor one `MOVED` (a stored study
    naming one opens; building its surrogate says how to run it).

    Raises:
        StudySettingsError: Naming the field, the value and the registered kinds.
    """
    if isinstance(name, str) and (name in MOVED or _registered(name, warm_start)):
        return
    from tuner.kinds import surrogate_kinds

    known = [*([] if warm_start else [AUTO]), *surrogate_kinds(warm_start)]
    raise StudySettingsError(f"StudySettings.{field} must be one of {known}, got {name!r}.")


def surrogate_kind(field: str, name: str, warm_start: bool = False) -> SurrogateKind:
    """The registered kind ``name`` (`tuner.kinds`).

    Raises:
        StudySettingsError: ``name`` is a kind moved out of the library whose module was not
            imported (the message names it), or no kind at all.
    """
    from tuner.kinds import surrogate_kind as lookup

    if not _registered(name, warm_start) and name in MOVED:
        raise StudySettingsError(
            f"StudySettings.{field}={name!r} names a surrogate kept for experiments in "
            f"{MOVED[name]} (not part of the library); import that module first (from a "
            f"checkout of the repository) to run this study with it, or set "
            f"StudySettings.{field} to one of the library's kinds."
        )
    check_kind(field, name, warm_start)
    return lookup(name, warm_start)


def make_surrogate(mode: str, settings: StudySettings, related: Sequence[Any] | None = None) -> Any:
    """A new surrogate of kind ``mode`` under ``settings``: their GP-fit cap, and the
    structured kind's knowledge, fixed structure and ignored metrics, the warm start's gate and
    rank.

    Args:
        mode: A registered kind's name (a warm-start kind's where ``related`` is given).
        settings: The study's settings.
        related: The related tasks of a warm start (`tuner.warmstart.RelatedTask`), or None.

    Raises:
        StudySettingsError: ``mode`` is not a registered kind (see `surrogate_kind`).
    """
    from tuner.kinds import SurrogateRequest

    warm = related is not None
    field = "warm_start_model" if warm else "surrogate"
    kind = surrogate_kind(field, mode, warm_start=warm)
    options = {
        "knowledge": settings.knowledge,
        "structure": settings.structure,
        "ignore_metrics": settings.ignore_metrics,
        "gate": settings.warm_start_gate,
        "rank": settings.warm_start_rank,
    }
    request = SurrogateRequest(settings.options().fit_maxiter, options, tuple(related or ()))
    return kind.factory(request)
