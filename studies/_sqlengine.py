"""Engine creation for `studies.storage.Storage`: URL parsing, the SQLite engine (pragmas, WAL,
``BEGIN IMMEDIATE``, busy handling), the PostgreSQL engine, the read-only look at an existing SQLite
file before the engine touches it, and the translation of driver errors into `StorageError`s.

Nothing here opens a transaction on a `Storage`'s behalf; `Storage` owns its transactions.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import NullPool, StaticPool

from studies import schema
from studies._migrations import check_version
from studies.errors import StorageCorruptError, StorageError, StorageLockedError

__all__ = [
    "make_engine",
    "mask_secrets",
    "mask_url",
    "precheck_sqlite",
    "set_wal",
    "translate_error",
]

# ``scheme://user:PASSWORD@`` and ``?password=PASSWORD`` / ``&password=PASSWORD`` in any text
_URL_PASSWORD = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]*://[^\s:/?#@]*:)([^\s@/]*)(@)")
_QUERY_PASSWORD = re.compile(r"([?&](?:password|passwd|pwd)=)([^&\s'\"]*)", re.IGNORECASE)


def mask_secrets(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***`` (the user-info
    password and a ``password=`` query parameter), so messages, logs and files never show one."""
    text = _URL_PASSWORD.sub(lambda m: f"{m[1]}***{m[3]}" if m[2] else m[0], text)
    return _QUERY_PASSWORD.sub(lambda m: f"{m[1]}***" if m[2] else m[0], text)


def mask_url(url: str) -> str:
    """A database URL as it may be shown: its password replaced by ``***``."""
    return mask_secrets(str(url))


def make_engine(url: str, busy_timeout: float) -> Engine:
    """An unpooled engine for ``url`` (SQLite: see `_sqlite_engine`).

    Raises:
        StorageError: For a malformed URL, a missing driver or a missing SQLite directory.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise StorageError(
            f"Storage URL {mask_url(url)!r} is malformed; use 'sqlite:///study.db' or "
            "'postgresql+psycopg://user@host/db'."
        ) from None
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, busy_timeout)
    try:
        return create_engine(parsed, poolclass=NullPool)
    except (NoSuchModuleError, ImportError) as err:
        hint = " (pip install 'rewrite-tuner[postgres]')" if "postgres" in url else ""
        raise StorageError(
            f"No database driver for {mask_url(url)!r}{hint}: {mask_secrets(str(err))}"
        ) from None


def _sqlite_engine(parsed: Any, busy_timeout: float) -> Engine:
    database = parsed.database
    in_memory = database in (None, "", ":memory:")
    if not in_memory:
        parent = os.path.dirname(os.path.abspath(database))
        if not os.path.isdir(parent):
            raise StorageError(
                f"The directory {parent!r} of SQLite database {database!r} does not exist; create "
                "it first."
            )
    kwargs: dict[str, Any] = {"connect_args": {"timeout": busy_timeout}}
    if in_memory:
        kwargs["poolclass"] = StaticPool
        kwargs["connect_args"]["check_same_thread"] = False
    else:
        kwargs["poolclass"] = NullPool
        kwargs["creator"] = _file_connector(os.path.abspath(database), busy_timeout)
    engine = create_engine(parsed, **kwargs)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (see _on_begin)
        cursor = dbapi_conn.cursor()
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        if not in_memory:
            set_wal(cursor, busy_timeout)
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get("rt_read_only", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _file_connector(path: str, busy_timeout: float) -> Any:
    """Connections to the SQLite file ``path``: the first one may create the file, later ones
    never do (``mode=rw``), so a database deleted while in use is reported, not silently
    recreated empty (`translate_error`)."""
    opened = False

    def connect() -> sqlite3.Connection:
        nonlocal opened
        conn = _connect_file(path, "rw" if opened else "rwc", busy_timeout)
        opened = True
        return conn

    return connect


def _connect_file(path: str, mode: str, timeout: float) -> sqlite3.Connection:
    """A connection to the SQLite file ``path`` opened in ``mode`` (``rw``: never created)."""
    from urllib.parse import quote

    return sqlite3.connect(f"file:{quote(path)}?mode={mode}", uri=True, timeout=timeout)


def sqlite_lock_held(url: str) -> bool | None:
    """Whether another connection holds a write lock on the SQLite file of ``url`` now: a
    ``BEGIN IMMEDIATE`` that may not wait is refused. None where it cannot be told (not a
    SQLite file, a malformed URL); False where the file does not exist."""
    try:
        parsed = make_url(url)
    except ArgumentError:
        return None
    database = parsed.database
    if parsed.get_backend_name() != "sqlite" or database in (None, "", ":memory:"):
        return None
    path = os.path.abspath(database)
    if not os.path.exists(path):
        return False
    try:
        conn = _connect_file(path, "rw", 0)
    except sqlite3.Error:
        return None
    try:
        conn.isolation_level = None
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as err:
        text = str(err).lower()
        return True if "locked" in text or "busy" in text else None
    finally:
        conn.close()


def set_wal(cursor: Any, busy_timeout: float) -> None:
    """Switch a database file to WAL journaling (persistent, so a no-op once done).

    Switching needs an exclusive lock, and SQLite may answer ``database is locked`` at once,
    without waiting on the busy handler, while another process opens or switches the same new
    file; retry for up to ``busy_timeout`` seconds before giving up.
    """
    deadline = time.monotonic() + busy_timeout
    delay = 0.01
    while True:
        try:
            if str(cursor.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() >= deadline:
                raise
            time.sleep(delay)
            delay = min(2 * delay, 0.25)


def precheck_sqlite(path: str, url: str) -> None:
    """Look at an existing SQLite file read-only before the engine touches it (switching a file to
    WAL rewrites its header), so a foreign, damaged or newer file is refused unchanged."""
    if not os.path.exists(path) or os.path.getsize(path) == 0:
        return
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1.0)
    except sqlite3.Error as err:
        raise _cannot_open(path, url, err) from err
    try:
        names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if names and "format_version" not in names:
            raise StorageCorruptError(
                f"{url} holds tables {sorted(names)} but no 'format_version' table, so it is not "
                "a rewrite-tuner study storage. Nothing was changed; use another database file."
            )
        row = con.execute("SELECT max(version) FROM format_version").fetchone() if names else None
        if row and row[0] is not None and int(row[0]) > schema.FORMAT_VERSION:
            check_version(int(row[0]), url)  # raises FormatVersionError
    except sqlite3.DatabaseError as err:
        if "locked" in str(err).lower():
            return  # a writer holds it; the engine's busy timeout decides
        if _disk_full(str(err).lower(), path):
            raise StorageError(_full_message(url, path, str(err))) from err
        if isinstance(err, sqlite3.OperationalError) and "unable to open" in str(err).lower():
            raise _cannot_open(path, url, err) from err
        raise StorageCorruptError(
            f"{url} is damaged or is not a SQLite database ({err}). Nothing was changed; restore "
            "it from a backup or pass another --storage."
        ) from err
    finally:
        con.close()


#: Free bytes under which a SQLite "disk I/O error" is taken for a full disk.
_FULL_BELOW = 1 << 20


def _disk_full(low: str, path: str | None = None) -> bool:
    """Whether a (lowercased) driver message means a full disk: SQLite's ``SQLITE_FULL``,
    ``ENOSPC``, PostgreSQL's ``DiskFull``, or SQLite's "disk I/O error" (what it says when it
    cannot create its -wal or -shm file) with almost no space left beside ``path``."""
    if any(s in low for s in ("disk is full", "no space left", "could not extend file")):
        return True
    if path is None or "disk i/o error" not in low:
        return False
    import shutil

    try:
        return shutil.disk_usage(os.path.dirname(os.path.abspath(path))).free < _FULL_BELOW
    except OSError:
        return False


def _full_message(url: str, path: str | None, msg: str) -> str:
    where = f"the disk holding {path!r}" if path else "the database server's disk"
    return (
        f"{where} is full ({msg}); {url} is not damaged: nothing was written by this step and "
        "the stored trials are intact. Free some space and run again (a study resumes)."
    )


def _cannot_open(path: str, url: str, err: sqlite3.Error) -> StorageError:
    """The error for an existing SQLite file that cannot be opened (not a damaged one)."""
    folder = os.path.dirname(os.path.abspath(path))
    why = _unwritable(folder)
    if why is not None:
        return StorageError(
            f"Cannot open {url}: its folder {folder!r} is read-only ({why}), and a SQLite "
            "database in WAL mode needs to create its -wal and -shm files beside it, even to be "
            f"read ({err}). The database is not damaged and nothing was changed; copy it (with any "
            "-wal file beside it) to a writable folder and pass that --storage, or make the "
            "folder writable."
        )
    return StorageError(
        f"Cannot open {url}: {err}. Nothing was changed; check that the file is readable and "
        "its folder writable (SQLite creates -wal and -shm files beside it)."
    )


def _unwritable(folder: str) -> str | None:
    """Why nothing can be created in ``folder`` (``None``: a file can be)."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder):
            return None
    except OSError as err:
        return err.strerror or str(err)


def translate_error(err: DBAPIError, url: str, path: str | None = None) -> StorageError:
    """The `StorageError` to raise for driver error ``err`` on database ``url`` (passwords
    masked in both); ``path`` is the SQLite file, if any."""
    url = mask_url(url)
    msg = mask_secrets(str(err.orig) if err.orig is not None else str(err))
    low = msg.lower()
    if path is not None and not os.path.exists(path):
        return StorageError(
            f"The SQLite database {path!r} ({url}) is gone: it was deleted or moved while this "
            f"process used it ({msg}). Nothing was written and no empty database was made in its "
            "place; restore the file (from a backup, or move it back) and run again."
        )
    if path is not None and "no such table" in low:
        return StorageCorruptError(
            f"{url} no longer holds the study tables ({msg}): the file was replaced or emptied "
            "while this process used it. Nothing was written; restore it from a backup."
        )
    if _disk_full(low, path):
        return StorageError(_full_message(url, path, msg))
    if "locked" in low or "busy" in low:
        return StorageLockedError(
            f"{url} is locked by another process ({msg}); nothing was written. Wait for the other "
            "process, or wait longer: Storage(url, busy_timeout=SECONDS), or on the command line "
            "`tuner --busy-timeout SECONDS ...`."
        )
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return StorageCorruptError(
            f"{url} is damaged or is not a SQLite database ({msg}). Nothing was changed; restore "
            "it from a backup or pass another --storage."
        )
    return StorageError(f"Database error on {url}: {msg}")
