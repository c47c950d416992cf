"""What a study stores, checked before it is stored: the values and metrics a trial reports
(`judge_outcome`, for `Study.tell` and the driver's `StudySource.record` alike) and the study's
evaluation context (`json_object`). Stored state is JSON holding finite numbers only."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from studies.errors import StudyError
from studies.schema import dumps, loads

if TYPE_CHECKING:
    from tuner.problem import Problem

__all__ = ["json_object", "judge_outcome"]

logger = logging.getLogger(__name__)


def judge_outcome(
    problem: Problem,
    values: Any,
    metrics: Any,
    *,
    study: str,
    number: int = -1,
    from_evaluate: bool = False,
) -> tuple[dict[str, float] | None, dict[str, float], str | None]:
    """Told values and metrics judged by the one validator, `tuner.Problem.outcome`:
    ``(values or None, metrics, error or None)``. A missing outcome raises from `Study.tell` and
    is FAILED from `StudySource.record` (``from_evaluate``); non-finite tracking metrics, and ones
    beyond ``±MAX_OUTCOME_MAGNITUDE``, are dropped with a warning naming trial ``number`` of
    ``study`` (stored JSON holds finite numbers only, and the model could not use the huge ones).
    """
    from tuner.problem import MAX_OUTCOME_MAGNITUDE

    vals, mets, msg = problem.outcome(values, metrics, from_evaluate=from_evaluate)
    dropped = {k: v for k, v in mets.items() if not _storable(v, MAX_OUTCOME_MAGNITUDE)}
    if dropped:
        logger.warning(
            "Metrics %s of trial %d of study %r are not stored (%s): the database holds "
            "finite numbers within ±%g only, so they are missing from the trial's metrics and "
            "to_dataframe(). Return a finite number, or leave the metric out.",
            dropped,
            number,
            study,
            "not finite" if any(not math.isfinite(v) for v in dropped.values()) else "too big",
            MAX_OUTCOME_MAGNITUDE,
        )
    return vals, {k: v for k, v in mets.items() if k not in dropped}, msg


def json_object(context: Any) -> dict[str, Any] | None:
    """``context`` as the JSON object it is stored as (tuples become lists), or ``None``.

    Raises:
        StudyError: If it is not a mapping with string keys that JSON represents exactly.
    """
    if context is None:
        return None
    if not isinstance(context, Mapping):
        raise StudyError(
            f"context must be a dict of JSON values (what every evaluation needs that is not "
            f"tuned), got {type(context).__name__}."
        )
    bad = [k for k in context if not isinstance(k, str)]
    if bad:
        raise StudyError(f"context keys must be strings, got {bad[:3]!r}; rename them.")
    try:
        stored: dict[str, Any] = loads(dumps(dict(context)))
    except (TypeError, ValueError) as err:
        raise StudyError(
            f"context must hold only JSON values (numbers, strings, lists, dicts; finite "
            f"floats): {err}. Store a description of the object (its name, its parameters) "
            "and rebuild it inside evaluate."
        ) from err
    return stored


def _storable(value: float, limit: float) -> bool:
    return math.isfinite(value) and abs(value) <= limit
