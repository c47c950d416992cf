"""The study-definition conflict check of `studies.storage.Storage.create_study`: attaching to a
stored study of the same name with another definition raises `StudyConflictError` listing only the
differences."""

from __future__ import annotations

from typing import Any

from studies.errors import StudyConflictError
from studies.records import StudyRecord

__all__ = ["MAX_DIFFS", "check_same", "differences"]

#: At most this many differences are listed when a study definition conflicts.
MAX_DIFFS = 8


def check_same(stored: StudyRecord, new: StudyRecord, url: str) -> None:
    """Refuse to attach ``new`` to a stored study of the same name with another definition,
    listing only what differs."""
    found = {
        field: differences(getattr(stored, field), getattr(new, field), field)
        for field in ("space", "objectives", "constraints", "seed", "context")
    }
    fields = [field for field, diffs in found.items() if diffs]
    if not fields:
        return
    diffs = [d for field in fields for d in found[field]]
    shown = "; ".join(diffs[:MAX_DIFFS])
    more = f"; and {len(diffs) - MAX_DIFFS} more" if len(diffs) > MAX_DIFFS else ""
    raise StudyConflictError(
        f"A study named {stored.name!r} already exists in {url} with a different "
        f"{' and '.join(fields)} ({shown}{more}). Use another study name or another storage, or "
        f"Study.load({stored.name!r}, storage) to continue the stored one. Nothing was changed."
    )


def differences(a: Any, b: Any, path: str) -> list[str]:
    """``"path: stored X, given Y"`` for each leaf where ``a`` (stored) and ``b`` (given) differ;
    dicts are compared key by key and lists of named dicts (space parameters) name by name."""
    if a == b:
        return []
    if _named_list(a) and _named_list(b):
        a, b = {p["name"]: p for p in a}, {p["name"]: p for p in b}
    if isinstance(a, dict) and isinstance(b, dict):
        out: list[str] = []
        for key in [*a, *(k for k in b if k not in a)]:
            sub = f"{path}.{key}"
            if key not in b:
                out.append(f"{sub} removed (stored {_short(a[key])})")
            elif key not in a:
                out.append(f"{sub} added (given {_short(b[key])})")
            else:
                out += differences(a[key], b[key], sub)
        return out
    return [f"{path}: stored {_short(a)}, given {_short(b)}"]


def _named_list(x: Any) -> bool:
    return (
        isinstance(x, list)
        and all(isinstance(p, dict) and isinstance(p.get("name"), str) for p in x)
        and len({p["name"] for p in x}) == len(x)
    )


def _short(x: Any, limit: int = 60) -> str:
    text_ = repr(x)
    return text_ if len(text_) <= limit else text_[: limit - 3] + "..."
