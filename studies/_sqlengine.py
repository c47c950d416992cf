"""Engine creation for `studies.storage.Storage`: URL parsing, the SQLite engine (pragmas, WAL,
``BEGIN IMMEDIATE``, busy handling), the PostgreSQL engine, the read-only look at an existing SQLite
file before the engine touches it, and the translation of driver errors into `StorageError`s.

Nothing here opens a transaction on a `Storage`'s behalf; `Storage` owns its transactions.
"""

from __future__ import annotations

import os
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

__all__ = ["make_engine", "precheck_sqlite", "set_wal", "translate_error"]


def make_engine(url: str, busy_timeout: float) -> Engine:
    """An unpooled engine for ``url`` (SQLite: see `_sqlite_engine`).

    Raises:
        StorageError: For a malformed URL, a missing driver or a missing SQLite directory.
    """
    try:
        parsed = make_url(url)
    except ArgumentError as err:
        raise StorageError(
            f"Storage URL {url!r} is malformed; use 'sqlite:///study.db' or "
            "'postgresql+psycopg://user@host/db'."
        ) from err
    if parsed.get_backend_name() == "sqlite":
        return _sqlite_engine(parsed, busy_timeout)
    try:
        return create_engine(parsed, poolclass=NullPool)
    except (NoSuchModuleError, ImportError) as err:
        hint = " (pip install 'rewrite-tuner[postgres]')" if "postgres" in url else ""
        raise StorageError(f"No database driver for {url!r}{hint}: {err}") from err


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
        raise StorageError(f"Cannot open {url}: {err}.") from err
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
        raise StorageCorruptError(
            f"{url} is damaged or is not a SQLite database ({err}). Nothing was changed; restore "
            "it from a backup or pass another --storage."
        ) from err
    finally:
        con.close()


def translate_error(err: DBAPIError, url: str) -> StorageError:
    """The `StorageError` to raise for driver error ``err`` on database ``url``."""
    msg = str(err.orig) if err.orig is not None else str(err)
    low = msg.lower()
    if "locked" in low or "busy" in low:
        return StorageLockedError(
            f"{url} is locked by another process ({msg}); nothing was written. Wait for the other "
            "process, or raise busy_timeout."
        )
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return StorageCorruptError(
            f"{url} is damaged or is not a SQLite database ({msg}). Nothing was changed; restore "
            "it from a backup or pass another --storage."
        )
    return StorageError(f"Database error on {url}: {msg}")
