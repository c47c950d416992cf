"""Storage conformance: every test runs on SQLite and (when configured) PostgreSQL."""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest
from sqlalchemy import create_engine, select, text, update
from sqlalchemy.pool import NullPool

from studies import schema
from studies.errors import (
    FormatVersionError,
    StorageCorruptError,
    StorageError,
    StorageLockedError,
    StudyConflictError,
    StudyNotFoundError,
)
from studies.records import StudyRecord
from studies.storage import Storage
from tests.studies.helpers import FakeClock


def _record(name: str = "s", seed: int = 0, space: dict | None = None) -> StudyRecord:
    return StudyRecord(
        id=0,
        name=name,
        space=space or {"format_version": 1, "params": {}},
        objectives={"f": "minimize"},
        constraints=[],
        settings={"grace_period": 1.0},
        seed=seed,
        budget=None,
        evaluate_ref=None,
        created=time.time(),
    )


def test_create_get_and_reattach(storage_url: str) -> None:
    store = Storage(storage_url)
    created = store.create_study(_record())
    assert store.get_study("s") == created
    assert store.create_study(_record()) == created  # identical definition: attach
    assert store.study_names() == ["s"]
    with pytest.raises(StudyConflictError, match="different seed"):
        store.create_study(_record(seed=1))
    with pytest.raises(StudyNotFoundError, match=r"No study named 'x'.*\['s'\]"):
        store.get_study("x")


def test_trial_lifecycle_and_numbers(storage_url: str) -> None:
    store = Storage(storage_url)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        store.lock_study(conn, sid)
        a = store.add_trial(conn, sid, {"x": 0.1}, worker="w1")
        b = store.add_trial(conn, sid, {"x": 0.2}, state="WAITING")
    assert (a.number, a.state, b.number, b.state) == (0, "RUNNING", 1, "WAITING")
    with store.write() as conn:
        claimed = store.claim_waiting(conn, sid, "w2")
        assert store.claim_waiting(conn, sid, "w2") is None
    assert claimed is not None and claimed.number == 1 and claimed.worker == "w2"
    assert store.finish_trial(sid, 0, state="COMPLETE", values={"f": 1.5}, worker="w1")
    assert not store.finish_trial(sid, 0, state="COMPLETE", values={"f": 2.0})  # already done
    assert not store.finish_trial(sid, 1, state="FAILED", error="x", worker="w1")  # not owner
    assert store.finish_trial(sid, 1, state="FAILED", error="E: x", metrics={"m": 1.0})
    t0, t1 = store.trials(sid)
    assert t0.values == {"f": 1.5} and t0.duration is not None and t0.duration >= 0
    assert t1.state == "FAILED" and t1.error == "E: x" and t1.metrics == {"m": 1.0}


def test_reap_stale_requeues_once(storage_url: str) -> None:
    clock = FakeClock()
    store = Storage(storage_url, clock=clock)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        store.add_trial(conn, sid, {"x": 0.3}, worker="dead")
        store.add_trial(conn, sid, {"x": 0.4}, worker="manual", heartbeat=False)
    with store.write() as conn:  # no time passed on the storage's clock: nothing is stale
        assert store.reap_stale(conn, sid, grace_period=0.1) == []
    clock.advance(0.3)
    with store.write() as conn:
        assert store.reap_stale(conn, sid, grace_period=0.1) == [0]
        assert store.reap_stale(conn, sid, grace_period=0.1) == []
    trials = store.trials(sid)
    assert [t.state for t in trials] == ["FAILED", "RUNNING", "WAITING"]
    assert "StaleTrial" in trials[0].error and trials[2].retry_of == 0
    assert trials[2].config == trials[0].config
    # a live heartbeat keeps a trial; a dead-worker predicate reaps it at once
    with store.write() as conn:
        store.add_trial(conn, sid, {"x": 0.5}, worker="gone")
        assert store.reap_stale(conn, sid, 60.0, is_dead=lambda w: w == "gone") == [3]


def test_times_come_from_the_storage_clock(storage_url: str) -> None:
    clock = FakeClock(start=1000.0)
    store = Storage(storage_url, clock=clock)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        store.add_trial(conn, sid, {"x": 0.1}, worker="me")
        store.add_trial(conn, sid, {"x": 0.2}, worker="me")
    clock.advance(2.0)
    store.heartbeat(sid, [0], "me")
    clock.advance(3.0)
    assert store.finish_trial(sid, 1, state="COMPLETE", values={"f": 1.0}, worker="me")
    t0, t1 = store.trials(sid)
    assert (t0.created, t0.started, t0.heartbeat, t0.finished) == (1000.0, 1000.0, 1002.0, None)
    assert (t1.created, t1.started, t1.heartbeat, t1.finished) == (1000.0, 1000.0, 1000.0, 1005.0)
    assert store.requeue(sid, [0], "me", "Interrupted") == [0]
    t0, _, t2 = store.trials(sid)
    assert t0.finished == 1005.0 and t2.created == 1005.0 and t2.started is None


def test_requeue_only_own_running(storage_url: str) -> None:
    store = Storage(storage_url)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        store.add_trial(conn, sid, {"x": 0.1}, worker="me")
        store.add_trial(conn, sid, {"x": 0.2}, worker="other")
    assert store.requeue(sid, [0, 1], "me", "Interrupted") == [0]
    assert [t.state for t in store.trials(sid)] == ["FAILED", "RUNNING", "WAITING"]


def test_json_columns_are_strict_json(storage_url: str) -> None:
    store = Storage(storage_url)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        store.add_trial(conn, sid, {"x": 0.1, "p": {"a": 0.5, "b": 0.5}}, worker="w")
    store.finish_trial(sid, 0, state="COMPLETE", values={"f": 1.0}, metrics={"m": 2.0})
    with store.read() as conn:
        row = conn.execute(select(schema.trials)).one()._mapping
        raw = {k: row[k] for k in ("config", "values", "metrics")}
    assert {k: json.loads(v) for k, v in raw.items()} == {
        "config": {"p": {"a": 0.5, "b": 0.5}, "x": 0.1},
        "values": {"f": 1.0},
        "metrics": {"m": 2.0},
    }
    with pytest.raises(ValueError):
        store.finish_trial(sid, 0, state="COMPLETE", values={"f": float("nan")})


def test_newer_format_version_is_refused(storage_url: str) -> None:
    Storage(storage_url)
    engine = create_engine(storage_url, poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(update(schema.format_version).values(version=schema.FORMAT_VERSION + 1))
    engine.dispose()
    with pytest.raises(FormatVersionError, match="Upgrade rewrite-tuner"):
        Storage(storage_url)


def test_foreign_database_is_not_touched(tmp_path) -> None:
    path = tmp_path / "other.db"
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE users (id INTEGER)")
    con.commit()
    con.close()
    before = path.read_bytes()
    with pytest.raises(StorageCorruptError, match=r"not a rewrite-tuner study storage"):
        Storage(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_corrupt_file_is_not_touched(tmp_path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database\n" * 200)
    before = path.read_bytes()
    with pytest.raises(StorageCorruptError, match="not a SQLite database"):
        Storage(f"sqlite:///{path}")
    assert path.read_bytes() == before


def test_damaged_database_is_reported(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = Storage(url)
    store.create_study(_record())
    del store
    raw = bytearray((tmp_path / "s.db").read_bytes())
    raw[100:4096] = b"\xff" * (4096 - 100)  # wipe the rest of page 1 (schema root)
    (tmp_path / "s.db").write_bytes(bytes(raw))
    with pytest.raises(StorageCorruptError):
        Storage(url).get_study("s")


def test_locked_database(tmp_path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    Storage(url)
    holder = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StorageLockedError, match="locked by another process"):
            Storage(url, busy_timeout=0.2)  # opening takes the write lock to check the schema
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def test_switch_to_wal_waits_for_a_writer(tmp_path) -> None:
    """SQLite answers ``database is locked`` at once, without its busy handler, when a new file is
    switched to WAL while another process holds the write lock (two drivers creating one study
    together); the switch retries until the lock is released (regression: a CI failure)."""
    import threading

    from studies.storage import _set_wal

    path = tmp_path / "fresh.db"
    sqlite3.connect(path).close()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    con = sqlite3.connect(path, isolation_level=None, timeout=5.0)
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            con.execute("PRAGMA journal_mode = WAL")  # the driver's behaviour, no waiting
        _set_wal(con.cursor(), busy_timeout=10.0)
        assert con.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        release.join()
        con.close()
        holder.close()


def test_bad_urls(tmp_path) -> None:
    with pytest.raises(StorageError, match="malformed"):
        Storage("not a url")
    with pytest.raises(StorageError, match="does not exist"):
        Storage(f"sqlite:///{tmp_path / 'missing' / 'x.db'}")


def test_sqlite_pragmas(sqlite_url: str) -> None:
    store = Storage(sqlite_url)
    with store.read() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert conn.execute(text("PRAGMA synchronous")).scalar() == 1  # NORMAL
        assert conn.execute(text("PRAGMA busy_timeout")).scalar() == 60000
    assert store.integrity_check() == "ok"


def test_golden_v1_database_loads_and_resumes(tmp_path) -> None:
    """A database written by schema version 1 stays readable (and resumable) forever."""
    import dataclasses
    import shutil
    from pathlib import Path

    from studies import Study
    from studies.examples import toy_evaluate

    data = Path(__file__).resolve().parents[1] / "data" / "studies"
    shutil.copy(data / "study_v1.db", tmp_path / "v1.db")
    expected = json.loads((data / "study_v1.json").read_text())
    url = f"sqlite:///{tmp_path / 'v1.db'}"
    study = Study.load("golden", url, evaluate=toy_evaluate)
    # the nullable `seconds` column (worker-measured duration) is added on open; old rows hold None
    # and their duration falls back to finished - started
    old = [dataclasses.asdict(t) for t in study.trials]
    assert [t.pop("seconds") for t in old] == [None] * len(old)
    assert [t.pop("proposed_at") for t in old] == [None] * len(old)  # positions came in v2
    for t in old:  # the golden file predates TrialRecord subclassing tuner.Trial (`number` -> `id`)
        t["number"] = t.pop("id")
    assert old == expected["trials"]
    first = study.trials[0]
    assert first.duration == first.finished - first.started
    stored = dataclasses.asdict(study.storage.get_study("golden"))
    assert stored.pop("context") is None  # schema version 3 adds the column, NULL for old rows
    assert {k: v for k, v in stored.items() if k != "id"} == expected["study"]
    assert study.constraints == ["search_seconds <= 5"] and study.seed == 3
    # trial 7 is held by hand (no heartbeat): it counts against the budget, never goes stale,
    # and does not keep optimize from returning
    study.optimize(9, progress=False)
    assert study.progress() == {"finished": 8, "used": 9, "waiting": 0, "running": 1}
    assert [t.state for t in study.trials][:8] == [t["state"] for t in expected["trials"]]
    rerun = study.trials[8]
    assert rerun.state == "COMPLETE" and rerun.seconds is not None and rerun.seconds >= 0


def test_read_only_open_creates_nothing(tmp_path) -> None:
    from studies import Study
    from studies.errors import StorageNotFoundError

    url = f"sqlite:///{tmp_path / 'nope.db'}"
    for open_ in (lambda: Storage(url, create=False), lambda: Study.load("tune", url)):
        with pytest.raises(StorageNotFoundError, match=r"nope.db.*does not exist.*nothing was"):
            open_()
    with pytest.raises(StudyNotFoundError):  # callers catching "no such study" still do
        Study.load("tune", url)
    assert list(tmp_path.iterdir()) == []
    Storage(url)  # creating is the default
    assert Storage(url, create=False).study_names() == []


def test_read_only_open_refuses_an_empty_database(storage_url: str) -> None:
    from studies.errors import StorageNotFoundError

    path = storage_url[len("sqlite:///") :] if storage_url.startswith("sqlite") else None
    if path is not None:
        open(path, "wb").close()  # an empty file
    with pytest.raises(StorageNotFoundError, match="empty.*holds no study; nothing was created"):
        Storage(storage_url, create=False)
    if path is not None:
        assert os.path.getsize(path) == 0
    Storage(storage_url)
    Storage(storage_url, create=False)


@pytest.mark.parametrize(
    ("table", "column", "raw", "message"),
    [
        ("trials", "config", "{bad", r"trial 0 of 's'.*'config' column is not valid JSON"),
        ("trials", "values", '{"f": NaN}', r"trial 0 of 's'.*'values'.*must not contain NaN"),
        ("trials", "metrics", "[1, 2]", r"trial 0 of 's'.*'metrics' column holds a JSON list"),
        ("studies", "settings", "{", r"study 's'.*'settings' column is not valid JSON"),
        ("studies", "space", '"x"', r"study 's'.*'space' column holds a JSON str"),
    ],
)
def test_damaged_rows_are_reported_not_raised_raw(
    storage_url: str, table: str, column: str, raw: str, message: str
) -> None:
    from studies import Study
    from studies.examples import toy_space

    study = Study("s", toy_space(), {"f": "minimize"}, storage=storage_url)
    study.tell(study.ask(), {"f": 1.0})
    store, sid = study.storage, study.id
    target = schema.trials if table == "trials" else schema.studies
    with store.write() as conn:
        conn.execute(update(target).values({column: raw}))
    reads = [lambda: Study.load("s", storage_url).trials]
    reads.append((lambda: store.trials(sid)) if table == "trials" else lambda: store.get_study("s"))
    for read in reads:
        with pytest.raises(StorageCorruptError, match=message + ".*Nothing was changed"):
            read()
    with store.read() as conn:  # the damaged row is left as it was
        assert conn.execute(select(target.c[column])).scalar() == raw


def test_damaged_space_is_reported(sqlite_url: str) -> None:
    from studies import Study
    from studies.examples import toy_space

    Study("t", toy_space(), {"latency": "minimize"}, storage=sqlite_url)
    store = Storage(sqlite_url)
    with store.write() as conn:
        conn.execute(update(schema.studies).values(space='{"x": 1}'))
    with pytest.raises(StorageCorruptError, match=r"study 't'.*'space' column does not describe"):
        Study.load("t", sqlite_url)


def test_conflict_names_only_the_differences(storage_url: str) -> None:
    params = [{"name": f"p{i}", "type": "float", "low": 0.0, "high": float(i)} for i in range(200)]
    space = {"format_version": 1, "parameters": params}
    store = Storage(storage_url)
    store.create_study(_record(space=space))
    changed = json.loads(json.dumps(space))
    changed["parameters"][7]["high"] = 99.0
    changed["parameters"].append({"name": "extra", "type": "int", "low": 0, "high": 3})
    with pytest.raises(StudyConflictError) as info:
        store.create_study(_record(space=changed, seed=4))
    msg = str(info.value)
    assert "space.parameters.p7.high: stored 7.0, given 99.0" in msg
    assert "space.parameters.extra added" in msg and "seed: stored 0, given 4" in msg
    assert "another study name or another storage" in msg and "p8" not in msg
    assert len(msg) < 700


def test_worker_measured_seconds_are_stored(storage_url: str) -> None:
    store = Storage(storage_url)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        store.add_trial(conn, sid, {"x": 0.1}, worker="w1")
        store.add_trial(conn, sid, {"x": 0.2}, worker="w1")
    time.sleep(0.05)  # e.g. a model fit in the driving process: not trial time
    store.finish_trial(sid, 0, state="COMPLETE", values={"f": 1.0}, seconds=0.001)
    store.finish_trial(sid, 1, state="FAILED", error="E: x", seconds=float("nan"))
    t0, t1 = store.trials(sid)
    assert t0.seconds == 0.001 and t0.duration == 0.001
    assert t1.seconds is None and t1.duration == t1.finished - t1.started >= 0.05


def test_reserved_positions_never_repeat(storage_url: str) -> None:
    """A process proposing alone reserves the trial count; processes proposing at once get
    distinct positions, and a position filled in is never reserved again."""
    store = Storage(storage_url)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        store.add_trial(conn, sid, {"x": 0.1}, worker="w", position=0)
        store.add_trial(conn, sid, {"x": 0.2}, worker="w", position=1)
        assert store.reserve(conn, sid, "a", 2) == [2, 3]
        assert store.reserve(conn, sid, "b", 1) == [4]
        assert store.reserve(conn, sid, "c", 0) == []
    assert [(r.position, r.worker) for r in store.reservations(sid)] == [
        (2, "a"),
        (3, "a"),
        (4, "b"),
    ]
    with store.write() as conn:  # b fills its position in first, as trial 2
        store.add_trial(conn, sid, {"x": 0.3}, worker="b", position=4)
        assert store.release(conn, sid, "b") == 1
        assert store.reserve(conn, sid, "b", 1) == [5]  # not 4 again, though 4 is no longer held
        assert store.release(conn, sid, "a", [3]) == 1
        assert store.release(conn, sid, "a", [3]) == 0
    with store.write() as conn:
        assert [r.position for r in store.reservations(sid, conn)] == [2, 5]
        store.release(conn, sid, "a")
        store.release(conn, sid, "b")
        assert store.reserve(conn, sid, "a", 1) == [5]
        store.release(conn, sid, "a")
    with store.read() as conn:
        stored = conn.execute(select(schema.trials.c.position).order_by(schema.trials.c.number))
        assert list(stored.scalars()) == [0, 1, 4]
    assert store.reservations(sid) == []


def test_count_used_leaves_out_requeued_copies(storage_url: str) -> None:
    clock = FakeClock()
    store = Storage(storage_url, clock=clock)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        store.add_trial(conn, sid, {"x": 0.1}, worker="gone")
        store.add_trial(conn, sid, {"x": 0.2}, worker="me")
    clock.advance(5.0)
    with store.write() as conn:
        assert store.reap_stale(conn, sid, 1.0, alive="me") == [0]
        assert store.count_trials(conn, sid) == 3
        assert store.count_used(conn, sid) == 2


def test_reap_reservations(storage_url: str) -> None:
    """A reservation whose process stopped reporting (or died on this host) is deleted; the
    caller's own are refreshed, never reaped."""
    clock = FakeClock()
    store = Storage(storage_url, clock=clock)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        store.reserve(conn, sid, "me", 1)
        store.reserve(conn, sid, "slow", 1)
        store.reserve(conn, sid, "gone", 1)
    clock.advance(0.8)
    with store.write() as conn:
        got = store.reap_reservations(conn, sid, 1.0, is_dead=lambda w: w == "gone", alive="me")
        assert [(r.position, r.worker) for r in got] == [(2, "gone")]
    clock.advance(0.8)  # me was refreshed 0.8 s ago, slow 1.6 s ago
    with store.write() as conn:
        got = store.reap_reservations(conn, sid, 1.0, alive="me")
        assert [r.worker for r in got] == ["slow"]
    (left,) = store.reservations(sid)
    assert (left.position, left.worker, left.heartbeat) == (0, "me", clock.now)


def test_v1_database_migrates_to_v3(tmp_path) -> None:
    """Opening a version-1 database adds ``trials.position``, the ``reservations`` table and
    ``studies.context`` in place (old rows hold NULL in both columns), and writes version 3."""
    import shutil
    from pathlib import Path

    data = Path(__file__).resolve().parents[1] / "data" / "studies"
    shutil.copy(data / "study_v1.db", tmp_path / "v1.db")
    con = sqlite3.connect(tmp_path / "v1.db")
    try:
        assert con.execute("SELECT version FROM format_version").fetchone()[0] == 1
        assert "reservations" not in {r[0] for r in con.execute("SELECT name FROM sqlite_master")}
    finally:
        con.close()
    store = Storage(f"sqlite:///{tmp_path / 'v1.db'}")
    with store.read() as conn:
        assert conn.execute(select(schema.format_version.c.version)).scalar() == 3
        assert set(conn.execute(select(schema.trials.c.position)).scalars()) == {None}
        assert set(conn.execute(select(schema.studies.c.context)).scalars()) == {None}
    sid = store.get_study("golden").id
    assert store.reservations(sid) == []
    with store.write() as conn:
        assert store.reserve(conn, sid, "w", 1) == [8]  # the trial count: rows have no position
    assert store.integrity_check() == "ok"


@pytest.mark.parametrize("version", [2, 3])
def test_golden_v2_v3_databases_load_and_resume(tmp_path, version: int) -> None:
    """Databases written by schema versions 2 (positions, a reservation left behind by a process
    on a host that went away) and 3 (the same with a study context) stay readable and
    resumable: the stale reservation is freed, the stored context reaches evaluate."""
    import dataclasses
    import shutil
    from pathlib import Path

    from studies import Study
    from studies.examples import toy_evaluate
    from tests.studies.test_context import scaled

    data = Path(__file__).resolve().parents[1] / "data" / "studies"
    shutil.copy(data / f"study_v{version}.db", tmp_path / "old.db")
    expected = json.loads((data / f"study_v{version}.json").read_text())
    url = f"sqlite:///{tmp_path / 'old.db'}"
    study = Study.load("golden", url, evaluate=toy_evaluate if version == 2 else scaled)
    got = [dataclasses.asdict(t) for t in study.trials]
    with study.storage.read() as conn:  # the golden files predate `TrialRecord.proposed_at`
        query = select(schema.trials.c.position).order_by(schema.trials.c.number)
        assert [t.pop("proposed_at") for t in got] == list(conn.execute(query).scalars())
    assert got == expected["trials"]
    stored = dataclasses.asdict(study.storage.get_study("golden"))
    if version == 2:  # version 3 adds the column, NULL for older studies
        assert stored.pop("context") is None and study.context is None
    else:
        assert study.context == expected["study"]["context"] is not None
    assert {k: v for k, v in stored.items() if k != "id"} == expected["study"]
    held = [dataclasses.asdict(r) for r in study.storage.reservations(study.id)]
    assert held == expected["reservations"]
    study.optimize(8, progress=False)
    assert study.progress() == {"finished": 8, "used": 8, "waiting": 0, "running": 0}
    assert study.storage.reservations(study.id) == []
    with study.storage.read() as conn:
        query = select(schema.trials.c.position).order_by(schema.trials.c.number)
        assert list(conn.execute(query).scalars()) == expected["positions"] + [6, 7]
    if version == 3:
        assert study.trials[7].metrics["workloads"] == 2.0  # evaluate saw the stored context


def test_integrity_check_finds_broken_invariants(storage_url: str) -> None:
    """Both backends check what every write keeps: numbers without gaps, re-queued copies of
    FAILED trials (each once), known states, COMPLETE trials with values."""
    clock = FakeClock()
    store = Storage(storage_url, clock=clock)
    sid = store.create_study(_record()).id
    with store.write() as conn:
        for x in (0.1, 0.2, 0.3):
            store.add_trial(conn, sid, {"x": x}, worker="gone")
    store.finish_trial(sid, 1, state="COMPLETE", values={"f": 1.0})
    clock.advance(5.0)
    with store.write() as conn:
        assert store.reap_stale(conn, sid, 1.0) == [0, 2]
    assert store.integrity_check() == "ok"
    T = schema.trials
    with store.write() as conn:
        conn.execute(update(T).where(T.c.number == 0).values(state="COMPLETE"))
        conn.execute(update(T).where(T.c.number == 4).values(retry_of=3))
        conn.execute(update(T).where(T.c.number == 2).values(number=9))
    report = store.integrity_check()
    assert "numbered 0..9, not 0..4" in report
    assert "trial 0: state 'COMPLETE' without values" in report
    assert "re-runs trial 0, which is COMPLETE" in report
    assert "trial 4: re-runs trial 3, which is WAITING" in report


def test_a_full_disk_is_not_reported_as_a_damaged_database(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 52: a full disk was reported as "damaged or not a SQLite database ... restore it
    from a backup", with every trial intact. The driver's errors as SQLite gives them: a write
    that finds the disk full, and the "disk I/O error" of opening a database whose -wal and -shm
    files cannot be created (with almost no free space beside it)."""
    import shutil
    from collections import namedtuple

    from sqlalchemy.exc import OperationalError

    from studies._sqlengine import translate_error

    path = str(tmp_path / "study.db")
    Storage(f"sqlite:///{path}")  # the file exists
    full = OperationalError("INSERT", {}, sqlite3.OperationalError("database or disk is full"))
    err = translate_error(full, f"sqlite:///{path}", path)
    assert type(err) is StorageError and "is full" in str(err) and "intact" in str(err)
    io = OperationalError("BEGIN", {}, sqlite3.OperationalError("disk I/O error"))
    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, 1 << 30, 4096))
    assert "is full" in str(translate_error(io, f"sqlite:///{path}", path))
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, 0, 1 << 30))
    assert "is full" not in str(translate_error(io, f"sqlite:///{path}", path))


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs (root only)")
def test_a_study_on_a_disk_that_filled_up_opens_with_a_clear_error(tmp_path) -> None:
    """The same on a real full disk, where the system lets a test mount a tiny tmpfs."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=400k", "tmpfs", str(disk)]).returncode:
        pytest.skip("cannot mount a tmpfs here")
    try:
        url = f"sqlite:///{disk / 'study.db'}"
        store = Storage(url)
        store.engine.dispose()
        fd = os.open(disk / "junk", os.O_WRONLY | os.O_CREAT)
        try:  # fill the disk
            while os.write(fd, b"\0" * 4096):
                pass
        except OSError:
            pass
        finally:
            os.close(fd)
        with pytest.raises(StorageError, match="is full") as info:
            Storage(url, create=False).study_names()
        assert not isinstance(info.value, StorageCorruptError)
    finally:
        subprocess.run(["umount", str(disk)])
