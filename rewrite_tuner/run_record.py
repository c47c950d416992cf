"""The record of a ``tuner demo`` run: what the study storage does not hold, for the dashboard.

``tuner demo`` writes ``<study>-run.json`` beside its priors file (``--out``): after the
calibration, the calibration's wall seconds; at the end, the validation's seconds, the whole time
split as measured (calibration, proposals, evaluations, validation), the held-out validation
report (`rewrite_tuner.transfer.TunedReport.to_dict`) and the priors file exported, if any. A
resumed run keeps the first run's calibration. ``tuner dashboard`` and ``tuner report``
(`rewrite_tuner.dashboard`) read it from the study database's folder or the current one.

Format (``format_version`` 1; JSON, written atomically)::

    {"kind": "rewrite-tuner/demo-run", "format_version": 1, "study": "rewrite-demo",
     "storage": "sqlite:///demo-study.db", "updated": 1767225600.0,
     "calibration": 8.1, "validation": 13.2,
     "split": {"calibration": 8, "proposals": 8, "evaluations": 2, "validation": 13},
     "report": {...}, "exported": {"path": "demo-priors.json", "trial": 11, "beats": true}}
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

__all__ = ["FORMAT_VERSION", "KIND", "read_record", "record_path", "update_record"]

KIND = "rewrite-tuner/demo-run"
FORMAT_VERSION = 1
#: Larger files are never a run record (they are a few kilobytes).
_MAX_BYTES = 1 << 20


def record_path(folder: str | os.PathLike[str], study: str) -> Path:
    """Where the run record of ``study`` is in ``folder``: ``<study>-run.json`` (the name made
    safe for a file name, as `studies.plots.file_stem`)."""
    from studies.plots import file_stem

    return Path(folder) / f"{file_stem(study)}-run.json"


def read_record(path: str | os.PathLike[str], study: str) -> dict[str, Any] | None:
    """The run record at ``path`` if it is one of ``study`` (None otherwise: missing, another
    kind of file, another study, a newer format, or damaged)."""
    p = Path(path)
    try:
        if not p.is_file() or p.stat().st_size > _MAX_BYTES:
            return None
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("kind") != KIND or doc.get("study") != study:
        return None
    if not isinstance(doc.get("format_version"), int) or doc["format_version"] > FORMAT_VERSION:
        return None
    return doc


def update_record(
    path: str | os.PathLike[str], study: str, storage: str, **fields: Any
) -> dict[str, Any]:
    """Merge ``fields`` into the run record at ``path`` (created if missing; a file there that is
    not a record of ``study`` is replaced) and write it atomically. ``storage`` is stored with
    its password masked. Returns the record written."""
    from studies.storage import mask_url

    doc = read_record(path, study) or {}
    doc.update(fields)
    doc.update(
        kind=KIND,
        format_version=FORMAT_VERSION,
        study=study,
        storage=mask_url(storage),
        updated=time.time(),
    )
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(doc, f, indent=1, allow_nan=False)  # the split keeps its phases' order
            f.flush()
            os.fsync(f.fileno())
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)  # what a plain open() would give it
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return doc
