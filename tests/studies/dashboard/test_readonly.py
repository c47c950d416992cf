"""`ReadOnlyStorage` and `Watcher`: the dashboard reads a study without writing it or taking its
lock, sees what drivers write, and refuses databases it cannot read with a clear message."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
import threading
from pathlib import Path

import pytest
from sqlalchemy import event

from studies.dashboard.readonly import ReadOnlyStorage, read_only_session
from studies.dashboard.snapshot import Watcher
from studies.errors import (
    FormatVersionError,
    StorageCorruptError,
    StorageError,
    StorageNotFoundError,
    StudyNotFoundError,
)
from studies.storage import Storage

from .conftest import drive_elsewhere, write_trials

DATA = Path(__file__).resolve().parents[2] / "data" / "studies"


def _digest(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_reading_leaves_the_database_byte_identical(study_url: str, tmp_path: Path) -> None:
    """The database file never changes. With no driver attached (its WAL checkpointed and
    removed), SQLite's reader makes the empty ``-wal`` and the ``-shm`` index of a WAL database,
    as any reader does; with a driver attached, its ``-wal`` is left as it is too."""
    Storage(study_url).engine.dispose()  # the driver is gone; its WAL is checkpointed
    before = _digest(tmp_path)
    assert list(before) == ["study.db"]
    store = ReadOnlyStorage(study_url)
    watcher = Watcher(store, "toy")
    snap = watcher.snapshot()
    assert len(snap.trials) == 13
    assert watcher.snapshot() is snap  # unchanged: the same snapshot
    store.study_names()
    after = _digest(tmp_path)
    assert after["study.db"] == before["study.db"]
    assert (tmp_path / "study.db-wal").stat().st_size == 0

    driver = sqlite3.connect(tmp_path / "study.db")  # a driver with a non-empty WAL
    driver.execute("UPDATE studies SET budget = 20")
    driver.commit()
    before = _digest(tmp_path)
    assert len(Watcher(ReadOnlyStorage(study_url), "toy").snapshot().trials) == 13
    after = _digest(tmp_path)
    driver.close()
    assert {k: after[k] for k in ("study.db", "study.db-wal")} == {
        k: before[k] for k in ("study.db", "study.db-wal")
    }


def test_every_statement_is_a_read_and_a_writer_never_waits(study_url: str, tmp_path: Path) -> None:
    """Every SQL statement the dashboard sends is a read; a driver's ``BEGIN IMMEDIATE`` (the
    study's lock) with no busy wait at all succeeds while the dashboard reads in a loop."""
    store = ReadOnlyStorage(study_url)
    seen: list[str] = []

    @event.listens_for(store.engine, "connect")
    def trace(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
        dbapi_conn.set_trace_callback(seen.append)

    stop = threading.Event()

    def watch() -> None:
        w = Watcher(store, "toy")
        while not stop.is_set():
            w.snapshot()
            w._snapshot = None  # re-read everything each time  # noqa: SLF001

    reader = threading.Thread(target=watch)
    reader.start()
    try:
        writer = sqlite3.connect(tmp_path / "study.db", timeout=0, isolation_level=None)
        for _ in range(200):
            writer.execute("BEGIN IMMEDIATE")  # raises "database is locked" if a lock is held
            writer.execute("COMMIT")
        writer.close()
    finally:
        stop.set()
        reader.join()
    assert seen
    verbs = {s.split()[0].upper() for s in seen}
    assert verbs <= {"SELECT", "BEGIN", "COMMIT", "ROLLBACK", "PRAGMA"}, verbs
    pragmas = {s for s in seen if s.upper().startswith("PRAGMA")}
    assert all("=" not in p or "query_only" in p or "busy_timeout" in p for p in pragmas), pragmas
    assert not any("IMMEDIATE" in s.upper() or "EXCLUSIVE" in s.upper() for s in seen)
    with store.read() as conn:
        assert read_only_session(conn)


def test_a_write_through_the_reader_is_refused(study_url: str) -> None:
    store = ReadOnlyStorage(study_url)
    with pytest.raises(StorageError), store.read() as conn:
        conn.exec_driver_sql("DELETE FROM trials")
    assert len(Watcher(store, "toy").snapshot().trials) == 13


def test_the_watcher_sees_what_another_process_writes(storage_url: str) -> None:
    """On SQLite and PostgreSQL: a trial that finishes and two trials another process adds."""
    write_trials(storage_url, "toy", 3, running=1)
    watcher = Watcher(ReadOnlyStorage(storage_url), "toy")
    first = watcher.snapshot()
    assert [str(t.state) for t in first.trials] == ["COMPLETE"] * 3 + ["RUNNING"]
    store = Storage(storage_url)
    store.finish_trial(store.get_study("toy").id, 3, state="FAILED", error="ValueError: late")
    drive_elsewhere(storage_url)
    second = watcher.snapshot()
    assert second.version == first.version + 1
    assert [t.number for t in second.trials] == list(range(6))
    assert second.trials[3].error == "ValueError: late"
    assert [str(t.state) for t in second.trials[4:]] == ["COMPLETE", "FAILED"]
    assert second.trials[5].error == "ValueError: written elsewhere"
    assert watcher.snapshot() is second


def test_missing_file_and_missing_study_say_what_to_do(tmp_path: Path, study_url: str) -> None:
    store = ReadOnlyStorage(f"sqlite:///{tmp_path / 'nothing-yet.db'}")
    with pytest.raises(StorageNotFoundError, match="does not exist"):
        store.study_names()
    assert not (tmp_path / "nothing-yet.db").exists()  # never created
    with pytest.raises(StudyNotFoundError, match=r"No study named 'nope'.*it holds \['toy'\]"):
        Watcher(ReadOnlyStorage(study_url), "nope").snapshot()


def test_foreign_damaged_and_newer_databases_are_refused(tmp_path: Path) -> None:
    foreign = tmp_path / "foreign.db"
    with sqlite3.connect(foreign) as c:
        c.execute("CREATE TABLE notes (x)")
    with pytest.raises(StorageCorruptError, match="not a rewrite-tuner study storage"):
        ReadOnlyStorage(f"sqlite:///{foreign}").study_names()
    damaged = tmp_path / "damaged.db"
    damaged.write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageCorruptError, match="damaged or is not a SQLite database"):
        ReadOnlyStorage(f"sqlite:///{damaged}").study_names()
    newer = tmp_path / "newer.db"
    shutil.copy(DATA / "study_v3.db", newer)
    with sqlite3.connect(newer) as c:
        c.execute("UPDATE format_version SET version = 99")
    with pytest.raises(FormatVersionError, match="format_version 99.*Upgrade rewrite-tuner"):
        ReadOnlyStorage(f"sqlite:///{newer}").study_names()
    with pytest.raises(StorageError, match="in-memory"):
        ReadOnlyStorage("sqlite://")


@pytest.mark.parametrize("version", [1, 2, 3])
def test_older_schemas_are_read_as_they_are(tmp_path: Path, version: int) -> None:
    """A database of every past schema version is shown without being migrated."""
    path = tmp_path / f"v{version}.db"
    shutil.copy(DATA / f"study_v{version}.db", path)
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    snap = Watcher(ReadOnlyStorage(f"sqlite:///{path}"), "golden").snapshot()
    assert len(snap.trials) >= 6 and any(t.state == "FAILED" for t in snap.trials)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


@pytest.mark.postgres
def test_postgres_reads_in_read_only_transactions() -> None:
    from tests.studies.conftest import postgres_url

    url = postgres_url()
    write_trials(url, "toy", 5)
    store = ReadOnlyStorage(url)
    assert len(Watcher(store, "toy").snapshot().trials) == 5
    with store.read() as conn:
        assert read_only_session(conn)
    with pytest.raises(StorageError), store.read() as conn:
        conn.exec_driver_sql("DELETE FROM trials")
