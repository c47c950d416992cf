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
  databases written before it existed; older readers ignore it, so ``format_version`` stayed 1.
- Format version 2 adds ``trials.position`` and the ``reservations`` table: a driving process
  reserves proposal positions in its allocation transaction (`reserve`), proposes outside any
  transaction, and fills them in as trials in a second one (`add_trial` with ``position``, then
  `release`). Reservations count against the budget; stale ones (their process died) are
  deleted by `reap_reservations`. A version-1 database is migrated on open.

A `Storage` object may be used from one thread at a time; several processes (on one host for
SQLite, anywhere for PostgreSQL) may share one database.

`Storage` (here) holds the transactions, the study and the trial operations; the private modules
around it hold the rest: `studies._sqlengine` (URL parsing, engines, SQLite pragmas and WAL, driver
error translation), `studies._migrations` (schema creation, version check, migrations),
`studies._rows` (rows to records, damaged JSON), `studies._conflicts` (the study-definition
conflict check) and `studies._reservations` (proposal reservations).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from sqlalchemy import Connection, func, select, text, update
from sqlalchemy.exc import DBAPIError

from studies import _reservations, schema
from studies._conflicts import check_same
from studies._consistency import consistency_problems
from studies._migrations import prepare_schema
from studies._rows import Damaged, decode, study_record, trial_record
from studies._sqlengine import make_engine, mask_url, precheck_sqlite, translate_error
from studies._sqlengine import set_wal as _set_wal  # noqa: F401 - importable from here, as before
from studies.errors import (
    StorageCorruptError,
    StorageError,
    StorageNotFoundError,
    StudyNotFoundError,
)
from studies.records import Reservation, StudyRecord, TrialRecord
from studies.schema import dumps

__all__ = ["DEFAULT_STORAGE", "Storage", "mask_url"]

DEFAULT_STORAGE = "sqlite:///study.db"
_S = schema.studies
_T = schema.trials


class Storage:
    """A study database.

    Args:
        url: SQLAlchemy URL: ``sqlite:///path.db`` (default ``sqlite:///study.db``),
            ``sqlite://`` (in memory, one process), or ``postgresql+psycopg://user@host/db``.
            The ``url`` attribute holds it with its password masked (``***``), as every message
            shows it; the engine connects with the URL given.
        busy_timeout: Seconds a write waits for another process's lock before
            `StorageLockedError`.
        create: Create the database (SQLite file and tables) when it does not exist. Read-only
            callers pass ``False`` so a mistyped path is reported, not created.
        clock: Returns the time in Unix seconds, read for every time this object writes (trial
            ``created``, ``started``, ``finished`` and ``heartbeat``) and for a heartbeat's age
            when reaping stale trials (`Study` reads it for a new study's ``created`` too);
            default `time.time`. Tests pass a fake clock to age heartbeats without sleeping. It
            is not stored in the database: processes sharing one should use clocks that agree.

    Raises:
        StorageError: For a malformed URL or a missing driver.
        StorageNotFoundError: With ``create=False``, if the SQLite file does not exist or the
            database holds no tables.
        StorageCorruptError: If the database is damaged or not a rewrite-tuner storage.
        StorageLockedError: If another process holds the lock past ``busy_timeout``.
        FormatVersionError: If the database was written by a newer rewrite-tuner.

    Transactions: only `write` and `read` connect to the database, and every method follows one
    of three patterns.

    - Methods without a ``conn`` parameter run in one transaction of their own, committed (or
      rolled back) before they return: `create_study`, `get_study`, `study_names`,
      `update_study`, `replace_settings`, `finish_trial`, `heartbeat`, `requeue`,
      `integrity_check`. Do not call them inside an open `write`: on SQLite the nested write
      waits for the caller's own lock and fails with `StorageLockedError`, and a nested read does
      not see the caller's uncommitted changes.
    - Methods whose first argument is ``conn`` are steps of the caller's transaction (a `write`;
      `lock_study` first when trials are allocated, as `Study` does): `lock_study`,
      `count_trials`, `count_used`, `add_trial`, `claim_waiting`, `reap_stale`, `reserve`,
      `release`, `reap_reservations`. They never connect, commit or
      roll back; the caller's ``with storage.write() as conn:`` commits them together, and leaving
      it turns driver errors into `StorageError`s.
    - An optional ``conn`` comes last: given, the method reads inside that transaction (seeing
      its uncommitted changes); omitted, it opens a `read` of its own (`_reading`). Public:
      ``trials(study_id, conn=None)``, ``reservations(study_id, conn=None)``; private:
      `_decoding`, `_study_name`.
    """

    def __init__(
        self,
        url: str = DEFAULT_STORAGE,
        *,
        busy_timeout: float = 60.0,
        create: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.url = mask_url(str(url))
        self.clock = clock
        self.busy_timeout = float(busy_timeout)
        self.create = bool(create)
        self.engine = make_engine(str(url), self.busy_timeout)
        self.is_sqlite = self.engine.dialect.name == "sqlite"
        self._path: str | None = None  # the SQLite file, if any
        if self.is_sqlite and self.engine.url.database not in (None, "", ":memory:"):
            path = self.engine.url.database
            self._path = os.path.abspath(path)
            if os.path.isdir(path):
                raise StorageError(
                    f"The SQLite storage {self.url} names the folder {path!r}, not a database "
                    "file. Name a file in it, e.g. --storage "
                    f"'sqlite:///{os.path.join(path, 'study.db')}'."
                )
            if not create and (not os.path.isfile(path) or os.path.getsize(path) == 0):
                state = "is empty" if os.path.isfile(path) else "does not exist"
                raise StorageNotFoundError(
                    f"The SQLite database {path!r} ({self.url}) {state}, so it holds no study; "
                    "nothing was created. Check the path and the --storage URL, or create a "
                    "study there first (`tuner run FILE`, `tuner demo`, or "
                    "studies.Study(name, space, objectives, storage=URL))."
                )
            precheck_sqlite(path, self.url)
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
            raise translate_error(err, self.url, self._path) from err

    @contextlib.contextmanager
    def _decoding(self, study: int | str, conn: Connection | None = None) -> Iterator[None]:
        """Report a stored row whose JSON does not parse as `StorageCorruptError` (``study``: the
        study's name, or its id to look the name up)."""
        try:
            yield
        except Damaged as err:
            name = study if isinstance(study, str) else self._study_name(study, conn)
            raise StorageCorruptError(err.describe(name, self.url)) from err.__cause__

    def _study_name(self, study_id: int, conn: Connection | None = None) -> str:
        """The name of study ``study_id`` for an error message (best effort)."""
        query = select(_S.c.name).where(_S.c.id == study_id)
        try:
            with self._reading(conn) as c:
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

    @contextlib.contextmanager
    def _reading(self, conn: Connection | None) -> Iterator[Connection]:
        """The caller's transaction ``conn`` if given (left open), else a `read` of its own."""
        if conn is not None:
            yield conn
        else:
            with self.read() as own:
                yield own

    def _open(self) -> None:
        """Create the schema on an empty database, migrate an old one, refuse a newer one."""
        with self.write() as conn:
            prepare_schema(conn, self.url, create=self.create)

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
                stored = study_record(row)
                check_same(stored, study, self.url)
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
                "context": None if study.context is None else dumps(study.context),
            }
            conn.execute(_S.insert().values(**values))
            return study_record(conn.execute(select(_S).where(_S.c.name == study.name)).one())

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
            return study_record(row)

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
                current = decode(row._mapping, "settings", dict) if row is not None else None
            if current != old:
                return False
            conn.execute(update(_S).where(_S.c.id == study_id).values(settings=dumps(new)))
            return True

    # ------------------------------------------------------------------ trials
    def trials(self, study_id: int, conn: Connection | None = None) -> list[TrialRecord]:
        """All trials of a study in number order, read inside the caller's transaction ``conn``
        if given, else in a read transaction of its own."""
        query = select(_T).where(_T.c.study_id == study_id).order_by(_T.c.number)
        with self._decoding(study_id, conn), self._reading(conn) as c:
            return [trial_record(r) for r in c.execute(query)]

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
        position: int | None = None,
    ) -> TrialRecord:
        """Insert a trial with the next number, inside the caller's write transaction.

        ``position`` is the proposal position its config was proposed at (`reserve`), ``None``
        for a re-queued copy or a config not proposed by the tuner."""
        now = self.clock()
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
            "position": position,
        }
        conn.execute(_T.insert().values(**row))
        return trial_record({**row, "values": None})

    def count_trials(self, conn: Connection, study_id: int) -> int:
        """Number of trials of a study (rows are never deleted, numbers are 0..n-1), inside the
        caller's transaction."""
        return int(
            conn.execute(
                select(func.count()).select_from(_T).where(_T.c.study_id == study_id)
            ).scalar_one()
        )

    def count_used(self, conn: Connection, study_id: int) -> int:
        """Trials counted against the budget (`studies.views.used`: re-queued copies replace
        their stale originals), inside the caller's transaction."""
        retries = func.count(_T.c.retry_of)  # counts the non-NULL ones
        row = conn.execute(
            select(func.count(), retries).select_from(_T).where(_T.c.study_id == study_id)
        ).one()
        return int(row[0]) - int(row[1])

    # ------------------------------------------------------------------ reservations
    def reservations(self, study_id: int, conn: Connection | None = None) -> list[Reservation]:
        """The study's live reservations in position order, read inside the caller's
        transaction ``conn`` if given, else in a read transaction of its own."""
        with self._reading(conn) as c:
            return _reservations.reservations(c, study_id)

    def reserve(self, conn: Connection, study_id: int, worker: str, k: int) -> list[int]:
        """Reserve ``k`` consecutive proposal positions for ``worker``, inside the caller's write
        transaction (the study locked); returns them.

        The first is the trial count, unless a stored trial or a live reservation already has a
        position at or past it (several processes proposing at once): then the one after the
        highest, so no two proposals of a study share a position. A process proposing alone
        always gets the trial count, the position a tuner rebuilt from the trials would use.
        """
        n = self.count_trials(conn, study_id)
        return _reservations.reserve(conn, study_id, worker, k, n, self.clock())

    def release(
        self, conn: Connection, study_id: int, worker: str, positions: Sequence[int] | None = None
    ) -> int:
        """Delete ``worker``'s reservations (only ``positions``, if given) inside the caller's
        write transaction; returns how many there were."""
        return _reservations.release(conn, study_id, worker, positions)

    def reap_reservations(
        self,
        conn: Connection,
        study_id: int,
        grace_period: float,
        is_dead: Callable[[str], bool] = lambda worker: False,
        alive: str | None = None,
    ) -> list[Reservation]:
        """Delete reservations whose heartbeat is older than ``grace_period`` seconds (or whose
        worker ``is_dead``): their process died while proposing, and nothing of the proposal
        was stored, so the position and the budget they held are simply freed.

        Reservations of the worker ``alive`` (the caller) are refreshed instead. Runs inside the
        caller's write transaction; returns the reservations deleted."""
        return _reservations.reap(conn, study_id, grace_period, is_dead, alive, self.clock())

    def lock_study(self, conn: Connection, study_id: int) -> None:
        """Serialize trial allocation for one study inside the caller's write transaction (row
        lock on PostgreSQL until it ends; SQLite's write transaction already holds the database
        lock)."""
        if not self.is_sqlite:
            conn.execute(select(_S.c.id).where(_S.c.id == study_id).with_for_update()).first()

    def claim_waiting(
        self, conn: Connection, study_id: int, worker: str, heartbeat: bool = True
    ) -> TrialRecord | None:
        """Move the lowest-numbered WAITING trial to RUNNING for ``worker``; ``None`` if none.

        With ``heartbeat=False`` (trials run by hand) the trial carries no heartbeat. Runs inside
        the caller's write transaction."""
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
        now = self.clock()
        fields = {
            "state": "RUNNING",
            "started": now,
            "heartbeat": now if heartbeat else None,
            "worker": worker,
        }
        conn.execute(update(_T).where(_T.c.id == row.id, _T.c.state == "WAITING").values(**fields))
        with self._decoding(study_id, conn):
            return trial_record({**row._asdict(), **fields})

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
        now = self.clock()
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
                config = decode(row._mapping, "config", dict, row.number)
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
                fields = {"state": "FAILED", "error": reason, "finished": self.clock()}
                conn.execute(update(_T).where(_T.c.id == row.id).values(**fields))
                with self._decoding(study_id, conn):
                    config = decode(row._mapping, "config", dict, number)
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
            "finished": self.clock(),
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
                .values(heartbeat=self.clock())
            )

    def integrity_check(self) -> str:
        """``"ok"`` if the database passes its integrity checks, else the problems found, one a
        line: SQLite's ``PRAGMA integrity_check`` (pages, indexes), then on both backends the
        logical consistency of the stored studies (`studies._consistency`: trial numbers without
        gaps, known states, re-queued copies of FAILED trials, each re-queued once, no orphan
        rows)."""
        with self.read() as conn:
            if self.is_sqlite:
                rows = conn.exec_driver_sql("PRAGMA integrity_check").scalars().all()
                if [str(r) for r in rows] != ["ok"]:
                    return "\n".join(str(r) for r in rows)  # the rest would read damaged pages
            problems = consistency_problems(conn)
            return "\n".join(problems) if problems else "ok"
