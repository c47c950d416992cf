"""Exception classes of the `studies` package.

Every error names the broken rule, the values involved and the fix. None of them is raised after a
partial write: storage errors happen before anything is written or inside a transaction that is
rolled back, and exports are written to a temporary file first.
"""

from __future__ import annotations

__all__ = [
    "EvaluateError",
    "ExportError",
    "FormatVersionError",
    "RepeatedFailureError",
    "StorageCorruptError",
    "StorageError",
    "StorageLockedError",
    "StorageNotFoundError",
    "StudyConflictError",
    "StudyError",
    "StudyFileError",
    "StudyNotFoundError",
    "StudySettingsError",
]


class StudyError(Exception):
    """Base class of every error raised by `studies`."""


class StorageError(StudyError):
    """The storage cannot be opened or used."""


class StorageLockedError(StorageError):
    """Another process held the database lock for longer than the busy timeout."""


class StorageCorruptError(StorageError):
    """The file is not a database, is damaged, or is not a rewrite-tuner storage."""


class FormatVersionError(StorageError):
    """The storage or file was written by a newer version of rewrite-tuner."""


class StudyNotFoundError(StudyError, KeyError):
    """No study of that name exists in the storage."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class StorageNotFoundError(StorageError, StudyNotFoundError):
    """A read-only open (`Study.load`, ``tuner status``...) found no study database there: the SQLite
    file does not exist, or the database holds no rewrite-tuner tables. Nothing was created."""


class StudySettingsError(StudyError, ValueError):
    """`StudySettings` break a rule (a negative ``n_initial``, a non-bool flag...), or the settings
    stored with a study are invalid."""


class StudyConflictError(StudyError):
    """A study of that name exists with a different definition (space, objectives, ...)."""


class StudyFileError(StudyError):
    """A study file given to `tuner run` cannot be loaded or defines no study."""


class EvaluateError(StudyError):
    """No evaluate function is available to run trials (e.g. a study loaded read-only)."""


class RepeatedFailureError(EvaluateError):
    """`Study.optimize` stopped: trials kept failing with the same error."""


class ExportError(StudyError):
    """A trial's priors cannot be exported (no such trial, no simplex, non-finite numbers)."""
