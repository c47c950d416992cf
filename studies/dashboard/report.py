"""`write_report`: the dashboard's views of one study as a single self-contained HTML file.

The file holds everything it shows: the views (`studies.dashboard.views.build`), the view of every
trial, the learned structure, and plotly.js itself (about 5 MB), so it opens offline, from an
e-mail, a pull request or a paper's artifact, with no server and no network. It is read from the
storage exactly as the live dashboard reads it (`ReadOnlyStorage`: nothing is written, no lock is
taken) and written atomically.
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from studies.dashboard import views
from studies.dashboard.hooks import Hooks
from studies.dashboard.page import render_page
from studies.dashboard.panels import structure_summary
from studies.dashboard.readonly import ReadOnlyStorage
from studies.dashboard.snapshot import Snapshot, Watcher
from studies.errors import StudyError

__all__ = ["describe", "report_html", "write_report"]

logger = logging.getLogger(__name__)


def report_html(snap: Snapshot, hooks: Hooks | None = None, *, structure: bool = True) -> str:
    """The report page of ``snap`` (see the module docstring).

    Args:
        snap: The study as read.
        hooks: The application's additions.
        structure: Learn the structure (as ``tuner structure`` does: a minute or two for a few
            dozen trials) when the study uses the structured surrogate.
    """
    hooks = hooks or Hooks()
    fit: dict[str, Any] | None = None
    if structure and structure_summary(snap)["mode"] == "structured":
        from studies.dashboard.structure_fits import fit_snapshot

        try:
            fit = {**fit_snapshot(snap), "final": True}
        except StudyError as err:
            fit = {"state": "error", "error": str(err)}
    elif not structure:
        fit = {"state": "error", "error": "not learned for this report (--no-structure)"}
    payload = views.build(snap, hooks, report=True, structure=fit)
    trials = {t.number: views.trial_detail(snap, t.number, hooks) for t in snap.trials}
    return render_page(snap.name, payload=payload, trials=trials, inline_plotly=True)


def write_report(
    url: str,
    name: str,
    out: str | os.PathLike[str],
    hooks: Hooks | None = None,
    *,
    structure: bool = True,
) -> tuple[Path, Snapshot]:
    """Read study ``name`` from storage ``url`` (read-only) and write its report to ``out``.

    Returns:
        The path written and the snapshot it shows (its trial counts, for the caller's message).

    Raises:
        StudyError: If the storage or the study cannot be read (nothing is written then).
        OSError: If ``out`` cannot be written.
    """
    snap = Watcher(ReadOnlyStorage(url), name).snapshot()
    text = report_html(snap, hooks, structure=structure)
    path = Path(out)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path, snap


def describe(path: Path, snap: Snapshot) -> list[str]:
    """What ``tuner report`` prints about the file it wrote."""
    size = path.stat().st_size / 1e6
    lines = [f"wrote {path} ({size:.1f} MB, {len(snap.trials)} trials; opens offline)"]
    running = sum(t.state == "RUNNING" for t in snap.trials)
    if running:
        lines.append(f"note: {running} trials are still RUNNING; it shows the study as of now")
    return lines


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
