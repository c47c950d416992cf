"""Crash-safe study storage on SQLAlchemy Core: SQLite by default, PostgreSQL with the same code.

Contract:

- Every write is one transaction; a process killed at any moment leaves either the whole write or
  none of it. Records read from the storage are snapshots (`studies.records`) that later writes
  never modify.
- SQLite runs in WAL mode with ``synchronous=NORMAL`` and a busy timeout; every write transaction
  starts with ``BEGIN IMMEDIATE`` so two processes never interleave a read-modify-write (reads use a
  deferred ``BEGIN`` and never block behind a writer in WAL mode). On PostgreSQL a write that
  allocates trials locks the study row (``SELECT ... FOR UPDATE``) and claims WAITING trials with
  ``FOR UPDATE SKIP LOCKED``.
- Connections are not pooled (`NullPool`): none stays open between transactions, so forking worker
  processes never shares a database handle.
- Opening a file that is not a database, is damaged, belongs to another program or was written by a
  newer schema raises before anything is written. ``Storage(url, create=False)`` (what read-only
  commands use, through `Study.load`) refuses a missing SQLite file or an empty database instead
  of creating one.
- A stored row whose JSON does not parse raises `StorageCorruptError` naming the study, the trial
  and the column; nothing is changed.
- ``trials.seconds`` (the worker-measured evaluation time) is a nullable column added on open to
  databases written before it existed; older readers ignore it, so ``format_version`` stays 1.

A `Storage` object may be used from one thread at a time; several processes (on one host for
SQLite, anywhere for PostgreSQL) may share one database.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    create_engine,
    event,
    func,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import NullPool, StaticPool

from studies import schema
from studies.errors import (
    FormatVersionError,
    StorageCorruptError,
    StorageError,
    StorageLockedError,
    StorageNotFoundError,
    StudyConflictError,
    StudyNotFoundError,
)
from studies.records import StudyRecord, TrialRecord
from studies.schema import dumps, loads

__all__ = ["DEFAULT_STORAGE", "Storage"]

DEFAULT_STORAGE = "sqlite:///study.db"
_S = schema.studies
_T = schema.trials
#: At most this many differences are listed when a study definition conflicts.
_MAX_DIFFS = 8


class Storage:
    """A study database.

    Args:
        url: SQLAlchemy URL: ``sqlite:///path.db`` (default ``sqlite:///study.db``),
            ``sqlite://`` (in memory, one process), or ``postgresql+psycopg://user@host/db``.
        busy_timeout: Seconds a write waits for another process's lock before
            `StorageLockedError`.
        create: Create the database (SQLite file and tables) when it does not exist. Read-only
            callers pass ``False`` so a mistyped path is reported, not created.

    Raises:
        StorageError: For a malformed URL or a missing driver.
        StorageNotFoundError: With ``create=False``, if the SQLite file does not exist or the
            database holds no tables.
        StorageCorruptError: If the database is damaged or not a rewrite-tuner storage.
        StorageLockedError: If another process holds the lock past ``busy_timeout``.
        FormatVersionError: If the database was written by a newer rewrite-tuner.
    """

    def __init__(
        self, url: str = DEFAULT_STORAGE, *, busy_timeout: float = 60.0, create: bool = True
    ) -> None:
        self.url = str(url)
        self.busy_timeout = float(busy_timeout)
        self.create = bool(create)
        self.engine = _make_engine(self.url, self.busy_timeout)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        if self.is_sqlite and self.engine.url.database not in (None, "", ":memory:"):
            path = self.engine.url.database
            if not create and (not os.path.isfile(path) or os.path.getsize(path) == 0):
                state = "is empty" if os.path.isfile(path) else "does not exist"
                raise StorageNotFoundError(
                    f"The SQLite database {path!r} ({self.url}) {state}, so it holds no study; "
                    "nothing was created. Check the path and the --storage URL, or create a "
                    "study there first (`tuner run FILE`, `tuner demo`, or "
                    "studies.Study(name, space, objectives, storage=URL))."
                )
            _precheck_sqlite(path, self.url)
        with self._errors():
            self._open()

    def __repr__(self) -> str:
        return f"Storage({self.engine.url.render_as_string(hide_password=True)!r})"

    # ------------------------------------------------------------------ transactions
    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        """Translate driver errors into `StorageError`s that name the database and the fix."""
        try:
            yield
        except DBAPIError as err:
            raise _translate(err, self.url) from err

    @contextlib.contextmanager
    def _decoding(self, study: int | str, conn: Connection | None = None) -> Iterator[None]:
        """Report a stored row whose JSON does not parse as `StorageCorruptError` (``study``: the
        study's name, or its id to look the name up)."""
        try:
            yield
        except _Damaged as err:
            name = study if isinstance(study, str) else self._study_name(study, conn)
            raise StorageCorruptError(err.describe(name, self.url)) from err.__cause__

    def _study_name(self, study_id: int, conn: Connection | None) -> str:
        """The name of study ``study_id`` for an error message (best effort)."""
        query = select(_S.c.name).where(_S.c.id == study_id)
        try:
            if conn is not None:
                name = conn.execute(query).scalar()
            else:
                with self.read() as c:
                    name = c.execute(query).scalar()
        except Exception:  # noqa: BLE001 - only naming the study in a message
            name = None
        return str(name) if name is not None else f"<id {study_id}>"

    @contextlib.contextmanager
    def write(self) -> Iterator[Connection]:
        """A write transaction (``BEGIN IMMEDIATE`` on SQLite), committed on success."""
        with self._errors(), self.engine.connect() as conn, conn.begin():
            yield conn

    @contextlib.contextmanager
    def read(self) -> Iterator[Connection]:
        """A read-only transaction that does not take the write lock."""
        with self._errors(), self.engine.connect() as conn:
            conn = conn.execution_options(rt_read_only=True)
            with conn.begin():
                yield conn

    def _open(self) -> None:
        """Create the schema on an empty database, migrate an old one, refuse a newer one."""
        with self.write() as conn:
            if not self.is_sqlite:
                conn.execute(text("SELECT pg_advisory_xact_lock(7311001)"))
            tables = set(inspect(conn).get_table_names())
            if not tables:
                if not self.create:
                    raise StorageNotFoundError(
                        f"{self.url} is an empty database, so it holds no study; nothing was "
                        "created. Check the --storage URL, or create a study there first "
                        "(`tuner run FILE`, `tuner demo`, or studies.Study(..., storage=URL))."
                    )
                schema.metadata.create_all(conn)
                conn.execute(schema.format_version.insert().values(**_version_row()))
                return
            if "format_version" not in tables:
                raise StorageCorruptError(
                    f"{self.url} holds tables {sorted(tables)} but no 'format_version' table, so "
                    "it is not a rewrite-tuner study storage. Nothing was changed; use another "
                    "database file or URL."
                )
            version = conn.execute(select(schema.format_version.c.version)).scalar()
            if version is None:
                raise StorageCorruptError(
                    f"{self.url} has an empty 'format_version' table; the storage is damaged. "
                    "Nothing was changed; restore it from a backup or use a new database."
                )
            _migrate(conn, int(version), self.url)
            _add_missing_columns(conn)

    # ------------------------------------------------------------------ studies
    def create_study(self, study: StudyRecord) -> StudyRecord:
        """Insert ``study`` (its ``id`` is ignored), or return the stored one if it is identical.

        Raises:
            StudyConflictError: If a study of that name exists with another definition.
        """
        with self._decoding(study.name), self.write() as conn:
            if not self.is_sqlite:  # two processes creating one study: the second attaches
                conn.execute(text("SELECT pg_advisory_xact_lock(7311002)"))
            row = conn.execute(select(_S).where(_S.c.name == study.name)).first()
            if row is not None:
                stored = _study(row)
                _check_same(stored, study, self.url)
                return stored
            values = {
                "name": study.name,
                "space": dumps(study.space),
                "objectives": dumps(study.objectives),
                "constraints": dumps(study.constraints),
                "settings": dumps(study.settings),
                "seed": study.seed,
                "budget": study.budget,
                "evaluate_ref": study.evaluate_ref,
                "created": study.created,
            }
            conn.execute(_S.insert().values(**values))
            return _study(conn.execute(select(_S).where(_S.c.name == study.name)).one())

    def get_study(self, name: str) -> StudyRecord:
        """The study called ``name``.

        Raises:
            StudyNotFoundError: If there is none (the message lists the names there are).
        """
        with self._decoding(name), self.read() as conn:
            row = conn.execute(select(_S).where(_S.c.name == name)).first()
            if row is None:
                names = list(conn.execute(select(_S.c.name).order_by(_S.c.name)).scalars())
                raise StudyNotFoundError(
                    f"No study named {name!r} in {self.url}; it holds {names}. Check the name and "
                    "the --storage URL."
                )
            return _study(row)

    def study_names(self) -> list[str]:
        """Names of all studies, sorted."""
        with self.read() as conn:
            return list(conn.execute(select(_S.c.name).order_by(_S.c.name)).scalars())

    def update_study(self, study_id: int, **fields: Any) -> None:
        """Set ``budget`` and/or ``evaluate_ref`` of a study (settings: `replace_settings`)."""
        allowed = {"budget", "evaluate_ref"}
        if not set(fields) <= allowed:
            raise ValueError(f"Only {sorted(allowed)} can be updated, got {sorted(fields)}.")
        with self.write() as conn:
            conn.execute(update(_S).where(_S.c.id == study_id).values(**fields))

    def replace_settings(self, study_id: int, old: dict[str, Any], new: dict[str, Any]) -> bool:
        """Store settings ``new`` if the study's stored settings are still ``old`` (compare and
        set, so two processes replacing invalid settings agree on one). Returns whether it did.
        """
        with self.write() as conn:
            self.lock_study(conn, study_id)
            row = conn.execute(select(_S.c.settings).where(_S.c.id == study_id)).first()
            with self._decoding(study_id, conn):
                current = _decode(row._mapping, "settings", dict) if row is not None else None
            if current != old:
                return False
            conn.execute(update(_S).where(_S.c.id == study_id).values(settings=dumps(new)))
            return True

    # ------------------------------------------------------------------ trials
    def trials(self, study_id: int, conn: Connection | None = None) -> list[TrialRecord]:
        """All trials of a study in number order."""
        query = select(_T).where(_T.c.study_id == study_id).order_by(_T.c.number)
        with self._decoding(study_id, conn):
            if conn is not None:
                return [_trial(r) for r in conn.execute(query)]
            with self.read() as c:
                return [_trial(r) for r in c.execute(query)]

    def add_trial(
        self,
        conn: Connection,
        study_id: int,
        config: dict[str, Any],
        *,
        state: str = "RUNNING",
        worker: str | None = None,
        heartbeat: bool = True,
        retry_of: int | None = None,
    ) -> TrialRecord:
        """Insert a trial with the next number, inside the caller's write transaction."""
        now = time.time()
        number = conn.execute(
            select(func.coalesce(func.max(_T.c.number) + 1, 0)).where(_T.c.study_id == study_id)
        ).scalar_one()
        running = state == "RUNNING"
        row = {
            "study_id": study_id,
            "number": number,
            "state": state,
            "config": dumps(config),
            "values": None,
            "metrics": dumps({}),
            "error": None,
            "created": now,
            "started": now if running else None,
            "finished": None,
            "heartbeat": now if running and heartbeat else None,
            "worker": worker if running else None,
            "retry_of": retry_of,
        }
        conn.execute(_T.insert().values(**row))
        return _trial({**row, "values": None})

    def count_trials(self, conn: Connection, study_id: int) -> int:
        """Number of trials of a study (rows are never deleted, numbers are 0..n-1)."""
        return int(
            conn.execute(
                select(func.count()).select_from(_T).where(_T.c.study_id == study_id)
            ).scalar_one()
        )

    def lock_study(self, conn: Connection, study_id: int) -> None:
        """Serialize trial allocation for one study (row lock on PostgreSQL; SQLite's write
        transaction already holds the database lock)."""
        if not self.is_sqlite:
            conn.execute(select(_S.c.id).where(_S.c.id == study_id).with_for_update()).first()

    def claim_waiting(
        self, conn: Connection, study_id: int, worker: str, heartbeat: bool = True
    ) -> TrialRecord | None:
        """Move the lowest-numbered WAITING trial to RUNNING for ``worker``; ``None`` if none.

        With ``heartbeat=False`` (trials run by hand) the trial carries no heartbeat."""
        query = (
            select(_T)
            .where(_T.c.study_id == study_id, _T.c.state == "WAITING")
            .order_by(_T.c.number)
            .limit(1)
            .with_for_update(skip_locked=True)
        )
        row = conn.execute(query).first()
        if row is None:
            return None
        now = time.time()
        fields = {
            "state": "RUNNING",
            "started": now,
            "heartbeat": now if heartbeat else None,
            "worker": worker,
        }
        conn.execute(update(_T).where(_T.c.id == row.id, _T.c.state == "WAITING").values(**fields))
        with self._decoding(study_id, conn):
            return _trial({**row._asdict(), **fields})

    def reap_stale(
        self,
        conn: Connection,
        study_id: int,
        grace_period: float,
        is_dead: Callable[[str], bool] = lambda worker: False,
        alive: str | None = None,
    ) -> list[int]:
        """Fail RUNNING trials whose heartbeat is older than ``grace_period`` seconds (or whose
        worker ``is_dead``) and re-queue each one's config as a new WAITING trial.

        Trials without a heartbeat (from `Study.ask`) and trials of the worker ``alive`` (the
        caller itself) are left alone; the caller's heartbeats are refreshed first. Runs inside
        the caller's write transaction. Returns the numbers of the trials declared stale.
        """
        now = time.time()
        if alive is not None:
            conn.execute(
                update(_T)
                .where(
                    _T.c.study_id == study_id,
                    _T.c.state == "RUNNING",
                    _T.c.worker == alive,
                    _T.c.heartbeat.is_not(None),
                )
                .values(heartbeat=now)
            )
        rows = conn.execute(
            select(_T)
            .where(_T.c.study_id == study_id, _T.c.state == "RUNNING", _T.c.heartbeat.is_not(None))
            .order_by(_T.c.number)
            .with_for_update()
        ).all()
        stale = []
        for row in rows:
            if row.worker == alive:
                continue
            age = now - row.heartbeat
            if age <= grace_period and not is_dead(row.worker or ""):
                continue
            error = (
                f"StaleTrial: worker {row.worker} stopped reporting (last heartbeat {age:.1f} s "
                f"ago, grace period {grace_period:g} s); the config was re-queued."
            )
            fields = {"state": "FAILED", "error": error, "finished": now}
            conn.execute(update(_T).where(_T.c.id == row.id).values(**fields))
            with self._decoding(study_id, conn):
                config = _decode(row._mapping, "config", dict, row.number)
            self.add_trial(conn, study_id, config, state="WAITING", retry_of=row.number)
            stale.append(row.number)
        return stale

    def requeue(self, study_id: int, numbers: Sequence[int], worker: str, reason: str) -> list[int]:
        """Fail ``worker``'s RUNNING trials ``numbers`` with ``reason`` and re-queue their configs
        as WAITING trials (used when a driving process is interrupted). Returns those re-queued."""
        done = []
        with self.write() as conn:
            self.lock_study(conn, study_id)
            for number in numbers:
                row = conn.execute(
                    select(_T).where(
                        _T.c.study_id == study_id,
                        _T.c.number == number,
                        _T.c.state == "RUNNING",
                        _T.c.worker == worker,
                    )
                ).first()
                if row is None:
                    continue
                fields = {"state": "FAILED", "error": reason, "finished": time.time()}
                conn.execute(update(_T).where(_T.c.id == row.id).values(**fields))
                with self._decoding(study_id, conn):
                    config = _decode(row._mapping, "config", dict, number)
                self.add_trial(conn, study_id, config, state="WAITING", retry_of=number)
                done.append(number)
        return done

    def finish_trial(
        self,
        study_id: int,
        number: int,
        *,
        state: str,
        values: dict[str, float] | None = None,
        metrics: dict[str, float] | None = None,
        error: str | None = None,
        worker: str | None = None,
        seconds: float | None = None,
    ) -> bool:
        """Record a RUNNING trial's outcome (COMPLETE or FAILED).

        Only a trial still RUNNING (and, if ``worker`` is given, owned by it) is updated, so a
        result arriving after the trial was declared stale is dropped. ``seconds`` is how long the
        evaluation itself took as the worker measured it (``None``: unknown; a negative or
        non-finite number is stored as ``None``). Returns whether it was recorded.
        """
        if state not in ("COMPLETE", "FAILED"):
            raise ValueError(f"A trial finishes COMPLETE or FAILED, not {state!r}.")
        cond = [_T.c.study_id == study_id, _T.c.number == number, _T.c.state == "RUNNING"]
        if worker is not None:
            cond.append(_T.c.worker == worker)
        measured = None
        if seconds is not None and schema.finite(seconds) and seconds >= 0:
            measured = float(seconds)
        fields = {
            "state": state,
            "values": None if values is None else dumps(values),
            "metrics": dumps(metrics or {}),
            "error": error,
            "finished": time.time(),
            "seconds": measured,
        }
        with self.write() as conn:
            return conn.execute(update(_T).where(*cond).values(**fields)).rowcount == 1

    def heartbeat(self, study_id: int, numbers: Sequence[int], worker: str) -> None:
        """Refresh the heartbeat of ``worker``'s RUNNING trials ``numbers``."""
        if not numbers:
            return
        with self.write() as conn:
            conn.execute(
                update(_T)
                .where(
                    _T.c.study_id == study_id,
                    _T.c.number.in_(list(numbers)),
                    _T.c.state == "RUNNING",
                    _T.c.worker == worker,
                )
                .values(heartbeat=time.time())
            )

    def integrity_check(self) -> str:
        """``"ok"`` if the database passes its integrity check (SQLite ``PRAGMA integrity_check``;
        PostgreSQL: the connection works), else the problems found."""
        with self.read() as conn:
            if not self.is_sqlite:
                conn.execute(text("SELECT 1"))
                return "ok"
            rows = conn.exec_driver_sql("PRAGMA integrity_check").scalars().all()
            return "\n".join(str(r) for r in rows)


# ---------------------------------------------------------------------- engine and pragmas
def _make_engine(url: str, busy_timeout: float) -> Engine:
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
            _set_wal(cursor, busy_timeout)
        cursor.execute("PRAGMA synchronous = NORMAL")
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        read_only = conn.get_execution_options().get("rt_read_only", False)
        conn.exec_driver_sql("BEGIN" if read_only else "BEGIN IMMEDIATE")

    return engine


def _set_wal(cursor: Any, busy_timeout: float) -> None:
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


def _precheck_sqlite(path: str, url: str) -> None:
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
            _migrate(None, int(row[0]), url)  # raises FormatVersionError
    except sqlite3.DatabaseError as err:
        if "locked" in str(err).lower():
            return  # a writer holds it; the engine's busy timeout decides
        raise StorageCorruptError(
            f"{url} is damaged or is not a SQLite database ({err}). Nothing was changed; restore "
            "it from a backup or pass another --storage."
        ) from err
    finally:
        con.close()


def _translate(err: DBAPIError, url: str) -> StorageError:
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


# ---------------------------------------------------------------------- versions
def _version_row() -> dict[str, Any]:
    from studies import __version__

    return {
        "id": 1,
        "version": schema.FORMAT_VERSION,
        "written_by": f"rewrite-tuner {__version__}",
        "updated": time.time(),
    }


def _migrate(conn: Connection | None, version: int, url: str) -> None:
    if version > schema.FORMAT_VERSION:
        raise FormatVersionError(
            f"{url} has schema format_version {version}, but this rewrite-tuner reads versions up "
            f"to {schema.FORMAT_VERSION}. Upgrade rewrite-tuner (pip install -U rewrite-tuner); "
            "nothing was changed."
        )
    if conn is None:
        return
    while version < schema.FORMAT_VERSION:
        schema.MIGRATIONS[version](conn)
        version += 1
    if conn.execute(select(schema.format_version.c.version)).scalar() != version:
        conn.execute(update(schema.format_version).values(**_version_row()))


# ---------------------------------------------------------------------- schema additions
def _add_missing_columns(conn: Connection) -> None:
    """Add the nullable columns of `schema.ADDED_COLUMNS` that an older database lacks (inside the
    open transaction, so concurrent openers add each column once)."""
    insp = inspect(conn)
    for table, column in schema.ADDED_COLUMNS:
        have = {c["name"] for c in insp.get_columns(table)}
        if column.name not in have:
            kind = column.type.compile(dialect=conn.dialect)
            prep = conn.dialect.identifier_preparer
            conn.execute(
                text(f"ALTER TABLE {prep.quote(table)} ADD COLUMN {prep.quote(column.name)} {kind}")
            )


# ---------------------------------------------------------------------- rows -> records
class _Damaged(Exception):
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


def _decode(m: Any, column: str, kind: type | None, number: int | None = None) -> Any:
    """Parse JSON column ``column`` of row mapping ``m``; ``kind`` is the type it must hold
    (``None`` stays ``None`` where the column is nullable)."""
    raw = m[column]
    try:
        value = loads(raw)
    except (ValueError, TypeError) as err:
        shown = raw if not isinstance(raw, str) or len(raw) <= 60 else raw[:57] + "..."
        detail = str(err).rstrip(".")
        raise _Damaged(column, number, f"is not valid JSON ({detail}): {shown!r}") from err
    if value is not None and kind is not None and not isinstance(value, kind):
        raise _Damaged(
            column, number, f"holds a JSON {type(value).__name__}, not a {kind.__name__}"
        )
    return value


def _study(row: Any) -> StudyRecord:
    m = row._mapping
    return StudyRecord(
        id=int(m["id"]),
        name=m["name"],
        space=_decode(m, "space", dict),
        objectives=_decode(m, "objectives", dict),
        constraints=_decode(m, "constraints", list),
        settings=_decode(m, "settings", dict),
        seed=int(m["seed"]),
        budget=m["budget"],
        evaluate_ref=m["evaluate_ref"],
        created=float(m["created"]),
    )


def _trial(row: Any) -> TrialRecord:
    m = row._mapping if hasattr(row, "_mapping") else row
    number = int(m["number"])
    return TrialRecord(
        number=number,
        state=m["state"],
        config=_decode(m, "config", dict, number),
        values=_decode(m, "values", dict, number),
        metrics=_decode(m, "metrics", dict, number) or {},
        error=m["error"],
        created=float(m["created"]),
        started=m["started"],
        finished=m["finished"],
        heartbeat=m["heartbeat"],
        worker=m["worker"],
        retry_of=m["retry_of"],
        seconds=m.get("seconds"),
    )


def _check_same(stored: StudyRecord, new: StudyRecord, url: str) -> None:
    """Refuse to attach ``new`` to a stored study of the same name with another definition,
    listing only what differs."""
    found = {
        field: _differences(getattr(stored, field), getattr(new, field), field)
        for field in ("space", "objectives", "constraints", "seed")
    }
    fields = [field for field, diffs in found.items() if diffs]
    if not fields:
        return
    diffs = [d for field in fields for d in found[field]]
    shown = "; ".join(diffs[:_MAX_DIFFS])
    more = f"; and {len(diffs) - _MAX_DIFFS} more" if len(diffs) > _MAX_DIFFS else ""
    raise StudyConflictError(
        f"A study named {stored.name!r} already exists in {url} with a different "
        f"{' and '.join(fields)} ({shown}{more}). Use another study name or another storage, or "
        f"Study.load({stored.name!r}, storage) to continue the stored one. Nothing was changed."
    )


def _differences(a: Any, b: Any, path: str) -> list[str]:
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
                out += _differences(a[key], b[key], sub)
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
