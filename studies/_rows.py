"""Stored rows to `studies.records` snapshots for `studies.storage.Storage`, with the JSON columns
checked: a column that does not parse or holds the wrong type raises `Damaged`, which `Storage`
turns into a `StorageCorruptError` naming the study (it knows the study's name)."""

from __future__ import annotations

from typing import Any

from studies.records import StudyRecord, TrialRecord
from studies.schema import loads
from tuner.trial import TrialState

__all__ = ["Damaged", "decode", "study_record", "trial_record"]


class Damaged(Exception):
    """A stored JSON column that does not parse or has the wrong type (raised while decoding a row,
    turned into `StorageCorruptError` by `Storage._decoding`, which knows the study's name)."""

    def __init__(self, column: str, number: int | None, detail: str) -> None:
        super().__init__(column, number, detail)
        self.column, self.number, self.detail = column, number, detail

    def describe(self, study: str, url: str) -> str:
        where = f"study {study!r}" if self.number is None else f"trial {self.number} of {study!r}"
        return (
            f"The stored {where} in {url} is damaged: its '{self.column}' column {self.detail}. "
            "Nothing was changed; restore the database from a backup, or repair or delete that "
            "row by hand."
        )


def decode(m: Any, column: str, kind: type | None, number: int | None = None) -> Any:
    """Parse JSON column ``column`` of row mapping ``m``; ``kind`` is the type it must hold
    (``None`` stays ``None`` where the column is nullable)."""
    raw = m[column]
    try:
        value = loads(raw)
    except (ValueError, TypeError) as err:
        shown = raw if not isinstance(raw, str) or len(raw) <= 60 else raw[:57] + "..."
        detail = str(err).rstrip(".")
        raise Damaged(column, number, f"is not valid JSON ({detail}): {shown!r}") from err
    if value is not None and kind is not None and not isinstance(value, kind):
        raise Damaged(column, number, f"holds a JSON {type(value).__name__}, not a {kind.__name__}")
    return value


def study_record(row: Any) -> StudyRecord:
    """The `StudyRecord` of a ``studies`` row."""
    m = row._mapping
    return StudyRecord(
        id=int(m["id"]),
        name=m["name"],
        space=decode(m, "space", dict),
        objectives=decode(m, "objectives", dict),
        constraints=decode(m, "constraints", list),
        settings=decode(m, "settings", dict),
        seed=int(m["seed"]),
        budget=m["budget"],
        evaluate_ref=m["evaluate_ref"],
        created=float(m["created"]),
        context=decode(m, "context", dict),
    )


_STATES = tuple(s.value for s in TrialState)


def trial_record(row: Any) -> TrialRecord:
    """The `TrialRecord` of a ``trials`` row (a row or a mapping of its columns)."""
    m = row._mapping if hasattr(row, "_mapping") else row
    number = int(m["number"])
    if m["state"] not in _STATES:
        raise Damaged("state", number, f"holds {m['state']!r}, not one of {list(_STATES)}")
    return TrialRecord(
        id=number,
        state=m["state"],
        config=decode(m, "config", dict, number),
        values=decode(m, "values", dict, number),
        metrics=decode(m, "metrics", dict, number) or {},
        error=m["error"],
        created=float(m["created"]),
        started=m["started"],
        finished=m["finished"],
        heartbeat=m["heartbeat"],
        worker=m["worker"],
        retry_of=m["retry_of"],
        seconds=m.get("seconds"),
        proposed_at=m.get("position"),
    )
