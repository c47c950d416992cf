"""Which study database a read command opens when no ``--storage`` is given.

``tuner demo`` writes ``demo-study.db`` and ``tuner run`` files usually ``study.db``; a command
run next (``tuner status``, ``export``, ``plot``, ``structure``, ``resume``) without
``--storage`` opens ``study.db`` when it exists, else the one study database in the current
folder, and says which it chose. Files are only looked at read-only (their SQLite header and
table names), never changed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

__all__ = ["DEFAULT_URL", "choose_storage", "study_databases"]

DEFAULT_URL = "sqlite:///study.db"
_HEADER = b"SQLite format 3\x00"


def study_databases(folder: Path) -> list[Path]:
    """The rewrite-tuner study databases (``*.db`` files with a ``format_version`` and a
    ``studies`` table) in ``folder``, sorted by name."""
    found = []
    for path in sorted(folder.glob("*.db")):
        try:
            with path.open("rb") as f:
                if f.read(len(_HEADER)) != _HEADER:
                    continue
            con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
            try:
                rows = con.execute("SELECT name FROM sqlite_master WHERE type='table'")
                names = {r[0] for r in rows}
            finally:
                con.close()
        except (OSError, sqlite3.Error):
            continue
        if {"format_version", "studies"} <= names:
            found.append(path)
    return found


def choose_storage(given: str | None, folder: Path | None = None) -> tuple[str, str | None]:
    """The storage URL to open, and a note saying why when it was not given.

    Args:
        given: The ``--storage`` the user passed, or ``None``.
        folder: Where to look (default: the current folder).

    Returns:
        ``(url, note)``: ``given`` itself with no note; else ``sqlite:///study.db`` when that file
        exists (no note), else the folder's one study database with a note naming it. With none,
        or several and no ``study.db``, the default URL and a note listing what there is (the
        command then reports the missing database).
    """
    if given is not None:
        return given, None
    folder = Path.cwd() if folder is None else folder
    if (folder / "study.db").exists():
        return DEFAULT_URL, None
    found = study_databases(folder)
    if len(found) == 1:
        url = f"sqlite:///{found[0].name}"
        return url, f"using {url}, the only study database here (pass --storage to choose)"
    if found:
        names = ", ".join(p.name for p in found)
        return DEFAULT_URL, (
            f"no study.db here, but several study databases ({names}); pass --storage "
            f"sqlite:///{found[0].name} (or another) to choose one"
        )
    return DEFAULT_URL, None
