"""`ReadOnlyStorage`: a study database opened for reading only, for the dashboard and the report.

Contract (what the dashboard promises the study it watches):

- Nothing is ever written. A SQLite file is opened through a ``file:...?mode=ro`` URI with
  ``PRAGMA query_only``: SQLite itself refuses any write, and the file's bytes never change (no
  WAL switch, no schema creation, no migration, no checkpoint). A PostgreSQL connection runs every
  transaction ``READ ONLY`` (``default_transaction_read_only``).
- The study's lock is never taken. On SQLite a read is a deferred ``BEGIN`` (a WAL reader never
  blocks the writer and never waits for it; `studies.storage.Storage` keeps its databases in WAL
  mode), never the ``BEGIN IMMEDIATE`` of a driver; on PostgreSQL a plain ``SELECT`` (no ``FOR
  UPDATE``, no advisory lock).
- A database of an older schema is read as it is (columns it lacks read as ``NULL``); one of a
  newer schema raises `FormatVersionError`; a foreign or damaged one `StorageCorruptError`; a
  missing file or an empty database `StorageNotFoundError`. Every error says what to do.

One `ReadOnlyStorage` may be used from several threads: it holds no connection between calls (no
pool), and its only state, the table columns, is read once.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event, func, inspect, select, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import NullPool

from studies import schema
from studies._migrations import check_version
from studies._rows import Damaged, study_record, trial_record
from studies._sqlengine import mask_secrets, mask_url, translate_error
from studies.errors import (
    StorageCorruptError,
    StorageError,
    StorageNotFoundError,
    StudyNotFoundError,
)
from studies.records import Reservation, StudyRecord, TrialRecord

__all__ = ["ReadOnlyStorage", "Stamp"]

_S = schema.studies
_T = schema.trials
_R = schema.reservations

Stamp = tuple[Any, ...]
"""What `ReadOnlyStorage.stamp` returns: equal stamps mean the study's rows did not change."""


class ReadOnlyStorage:
    """A study database read without writing it or taking its lock (module docstring).

    Args:
        url: The SQLAlchemy URL drivers write to (``sqlite:///path.db`` or
            ``postgresql+psycopg://...``); ``url`` holds it with its password masked.
        busy_timeout: Seconds a read may wait on SQLite (only while the file is switched to WAL
            or checkpointed by a writer; a WAL read never waits for a write transaction).

    Raises:
        StorageError: For a malformed URL, an in-memory SQLite URL (another process's memory
            cannot be watched) or a missing driver.
    """

    def __init__(self, url: str, *, busy_timeout: float = 5.0) -> None:
        self.url = mask_url(str(url))
        try:
            parsed = make_url(str(url))
        except ArgumentError:
            raise StorageError(
                f"Storage URL {self.url!r} is malformed; use 'sqlite:///study.db' or "
                "'postgresql+psycopg://user@host/db'."
            ) from None
        self.is_sqlite = parsed.get_backend_name() == "sqlite"
        self.path: str | None = None
        if self.is_sqlite:
            if parsed.database in (None, "", ":memory:"):
                raise StorageError(
                    f"{self.url} is an in-memory database, which only its own process can read; "
                    "watch a study in a file (sqlite:///study.db) or on PostgreSQL."
                )
            self.path = os.path.abspath(parsed.database)
            self.engine = _sqlite_engine(self.path, busy_timeout)
        else:
            self.engine = _postgres_engine(parsed, self.url)
        self._columns: dict[str, set[str]] | None = None

    def __repr__(self) -> str:
        return f"ReadOnlyStorage({self.url!r})"

    # ------------------------------------------------------------------ reading
    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read transaction (one consistent snapshot of the database), checked first: the
        file exists, holds a rewrite-tuner storage, of a schema this release reads.

        Raises:
            StorageNotFoundError: If the SQLite file does not exist (yet) or the database is empty.
            StorageCorruptError: If it is damaged or not a rewrite-tuner storage.
            FormatVersionError: If a newer rewrite-tuner wrote it.
            StorageError: For any other database error (the message names the database).
        """
        if self.path is not None and not os.path.isfile(self.path):
            raise StorageNotFoundError(
                f"The SQLite database {self.path!r} ({self.url}) does not exist, so it holds no "
                "study yet. Check the --storage path, or start the study (a driver creates the "
                "file; this view shows it once it exists)."
            )
        try:
            with self.engine.connect() as conn, conn.begin():
                self._check(conn)
                yield conn
        except DBAPIError as err:
            raise self._translate(err) from err
        except Damaged as err:
            raise StorageCorruptError(err.describe("?", self.url)) from None

    def _translate(self, err: DBAPIError) -> StorageError:
        msg = str(err.orig if err.orig is not None else err).lower()
        if self.path is not None and ("unable to open" in msg or "readonly" in msg):
            return StorageError(
                f"Cannot read {self.url}: {mask_secrets(str(err.orig))}. A SQLite database in WAL "
                "mode is read through its -shm file beside it, which the reader must be able to "
                "open (or create, in a writable folder). Nothing was changed; check the "
                "permissions of the file and its folder."
            )
        return translate_error(err, self.url, self.path)

    def _check(self, conn: Connection) -> None:
        """Refuse a database that is empty, foreign or newer (inside the read ``conn``)."""
        if self._columns is not None:
            return
        tables = set(inspect(conn).get_table_names())
        if not tables:
            raise StorageNotFoundError(
                f"{self.url} is an empty database, so it holds no study yet. Check the --storage "
                "URL, or start the study (this view shows it once a driver creates it)."
            )
        if "format_version" not in tables or "studies" not in tables or "trials" not in tables:
            raise StorageCorruptError(
                f"{self.url} holds tables {sorted(tables)}, not a rewrite-tuner study storage "
                "(no 'format_version', 'studies' and 'trials' tables). Nothing was read or "
                "changed; pass the --storage of a study."
            )
        version = conn.execute(select(func.max(schema.format_version.c.version))).scalar()
        if version is None:
            raise StorageCorruptError(
                f"{self.url} has an empty 'format_version' table; the storage is damaged. "
                "Nothing was changed; restore it from a backup."
            )
        check_version(int(version), self.url)  # FormatVersionError for a newer one
        insp = inspect(conn)
        self._columns = {t: {c["name"] for c in insp.get_columns(t)} for t in tables}

    def _select(self, table: Any) -> Any:
        """``SELECT`` of the columns of ``table`` that this database has (an older schema lacks
        some; `_rows` reads those as ``NULL``)."""
        assert self._columns is not None
        have = self._columns.get(table.name, set())
        return select(*[c for c in table.columns if c.name in have])

    def study_names(self) -> list[str]:
        """Names of every study, sorted."""
        with self.read() as conn:
            return list(conn.execute(select(_S.c.name).order_by(_S.c.name)).scalars())

    def study(self, name: str, conn: Connection | None = None) -> StudyRecord:
        """The stored study ``name``.

        Raises:
            StudyNotFoundError: If there is none (the message lists the studies there are).
        """
        with self._reading(conn) as c:
            row = c.execute(self._select(_S).where(_S.c.name == name)).first()
            if row is None:
                names = list(c.execute(select(_S.c.name).order_by(_S.c.name)).scalars())
                raise StudyNotFoundError(
                    f"No study named {name!r} in {self.url} (yet); it holds {names}. Check the "
                    "name and the --storage URL."
                )
            try:
                return study_record(_Row({"context": None, **row._asdict()}))
            except Damaged as err:
                raise StorageCorruptError(err.describe(name, self.url)) from None

    def trials(
        self, study: StudyRecord, conn: Connection | None = None, *, since: int = 0
    ) -> list[TrialRecord]:
        """The trials of ``study`` numbered ``since`` or later, in number order (a finished trial
        never changes again, so a caller that keeps the finished ones reads only the rest)."""
        query = self._select(_T).where(_T.c.study_id == study.id, _T.c.number >= since)
        with self._reading(conn) as c:
            try:
                return [trial_record(r._asdict()) for r in c.execute(query.order_by(_T.c.number))]
            except Damaged as err:
                raise StorageCorruptError(err.describe(study.name, self.url)) from None

    def reservations(self, study: StudyRecord, conn: Connection | None = None) -> list[Reservation]:
        """The proposals drivers of ``study`` are computing now (none before schema 2)."""
        with self._reading(conn) as c:
            assert self._columns is not None
            if "reservations" not in self._columns:
                return []
            rows = c.execute(
                select(_R.c.position, _R.c.worker, _R.c.created, _R.c.heartbeat)
                .where(_R.c.study_id == study.id)
                .order_by(_R.c.position)
            )
            return [Reservation(int(r[0]), str(r[1]), float(r[2]), float(r[3])) for r in rows]

    def stamp(self, study: StudyRecord, conn: Connection | None = None) -> Stamp:
        """A cheap fingerprint of the study's rows (one aggregate query): it changes whenever a
        trial is added, claimed, finished or heart-beaten, a proposal reserved or released, or
        the budget changes."""
        agg = select(
            func.count(),
            func.max(_T.c.created),
            func.max(_T.c.started),
            func.max(_T.c.finished),
            func.max(_T.c.heartbeat),
            func.sum(func.length(_T.c.state)),
        ).where(_T.c.study_id == study.id)
        with self._reading(conn) as c:
            row = tuple(c.execute(agg).one())
            budget = c.execute(select(_S.c.budget).where(_S.c.id == study.id)).scalar()
            assert self._columns is not None
            if "reservations" in self._columns:
                res = c.execute(
                    select(func.count(), func.max(_R.c.heartbeat)).where(_R.c.study_id == study.id)
                ).one()
                row += tuple(res)
            return (*row, budget)

    @contextlib.contextmanager
    def _reading(self, conn: Connection | None) -> Iterator[Connection]:
        if conn is not None:
            yield conn
        else:
            with self.read() as own:
                yield own

    def close(self) -> None:
        """Release the engine (nothing stays open between reads anyway)."""
        self.engine.dispose()


class _Row:
    """A mapping posing as a SQLAlchemy row for `studies._rows` (``row._mapping``)."""

    def __init__(self, mapping: dict[str, Any]) -> None:
        self._mapping = mapping


def _sqlite_engine(path: str, busy_timeout: float) -> Engine:
    """An unpooled engine whose connections open ``path`` read-only (``mode=ro``: never created,
    never written) and begin deferred read transactions."""
    uri = f"file:{quote(path)}?mode=ro"

    def connect() -> sqlite3.Connection:
        return sqlite3.connect(uri, uri=True, timeout=busy_timeout, check_same_thread=False)

    engine = create_engine("sqlite://", creator=connect, poolclass=NullPool)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None  # we emit BEGIN ourselves (deferred: a WAL read)
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA query_only = 1")
        cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN")

    return engine


def _postgres_engine(parsed: Any, shown: str) -> Engine:
    """An unpooled engine whose every transaction is ``READ ONLY``."""
    try:
        return create_engine(
            parsed,
            poolclass=NullPool,
            connect_args={"options": "-c default_transaction_read_only=on"},
        )
    except (NoSuchModuleError, ImportError) as err:
        hint = " (pip install 'rewrite-tuner[postgres]')" if "postgres" in shown else ""
        raise StorageError(
            f"No database driver for {shown!r}{hint}: {mask_secrets(str(err))}"
        ) from None


def read_only_session(conn: Connection) -> bool:
    """Whether ``conn`` refuses writes (SQLite ``query_only``, PostgreSQL
    ``transaction_read_only``); for tests and the dashboard's own check."""
    if conn.dialect.name == "sqlite":
        return bool(conn.exec_driver_sql("PRAGMA query_only").scalar())
    return str(conn.execute(text("SHOW transaction_read_only")).scalar()) == "on"
