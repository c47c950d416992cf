"""Studies: the user-facing API, crash-safe storage, resume, plots and the generic `tuner`
commands (the rewrite application, `rewrite_tuner`, adds its own)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING

from lazyimport import lazy_exports

try:
    __version__ = version("rewrite-tuner")
except PackageNotFoundError:  # pragma: no cover - running from a source tree without install
    __version__ = "0.0.0+unknown"

# Public names resolve lazily (PEP 562) so `tuner --help` does not import SQLAlchemy or torch.
_EXPORTS = {
    "Study": "studies.study",
    "StudySettings": "studies.settings",
    "Storage": "studies.storage",
    "StudyRecord": "studies.records",
    "TrialRecord": "studies.records",
    "Weighted": "studies.pareto",
    "Constrained": "studies.pareto",
    "plot_study": "studies.plots",
    "StudyError": "studies.errors",
    "StorageError": "studies.errors",
    "StorageLockedError": "studies.errors",
    "StorageCorruptError": "studies.errors",
    "StorageNotFoundError": "studies.errors",
    "StudySettingsError": "studies.errors",
    "FormatVersionError": "studies.errors",
    "StudyNotFoundError": "studies.errors",
    "StudyConflictError": "studies.errors",
    "StudyFileError": "studies.errors",
    "EvaluateError": "studies.errors",
    "ExportError": "studies.errors",
    "RepeatedFailureError": "studies.errors",
}

__all__ = [
    "Constrained",
    "EvaluateError",
    "ExportError",
    "FormatVersionError",
    "RepeatedFailureError",
    "StorageCorruptError",
    "StorageError",
    "StorageLockedError",
    "StorageNotFoundError",
    "Storage",
    "Study",
    "StudyConflictError",
    "StudyError",
    "StudyFileError",
    "StudyNotFoundError",
    "StudyRecord",
    "StudySettings",
    "StudySettingsError",
    "TrialRecord",
    "Weighted",
    "__version__",
    "plot_study",
]

if TYPE_CHECKING:
    from studies.errors import (
        EvaluateError,
        ExportError,
        FormatVersionError,
        RepeatedFailureError,
        StorageCorruptError,
        StorageError,
        StorageLockedError,
        StorageNotFoundError,
        StudyConflictError,
        StudyError,
        StudyFileError,
        StudyNotFoundError,
        StudySettingsError,
    )
    from studies.pareto import Constrained, Weighted
    from studies.plots import plot_study
    from studies.records import StudyRecord, TrialRecord
    from studies.settings import StudySettings
    from studies.storage import Storage
    from studies.study import Study


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
