"""Bad inputs and faults at the `studies` layer (issue 36), one table per layer: storage, evaluate
and the command line. Each row names the error class (or exit code) and what the message must
hold: the value and the fix. Every row failed before its fix (a raw error, a traceback, a silent
wrong result or a secret printed)."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rewrite_tuner.cli import app
from studies import Study
from studies._sqlengine import mask_secrets
from studies.errors import StorageCorruptError, StorageError, StudyError
from studies.examples import toy_study
from studies.storage import Storage
from tests.bad_inputs import assert_refused
from tests.studies import helpers
from tests.studies.helpers import fast_settings

ROOT = Path(__file__).resolve().parents[2]
SECRET = "hunter2"
PG = f"postgresql+psycopg://user:{SECRET}@127.0.0.1:1/db"  # nothing listens on port 1
runner = CliRunner()


def _toy(tmp_path: Path, name: str = "t", db: str = "s.db") -> Study:
    study = toy_study(name, f"sqlite:///{tmp_path / db}", settings=fast_settings())
    trial = study.ask()
    study.tell(trial, {"latency": 1.0, "search_seconds": 2.0})
    return study


def _state_done(tmp_path: Path) -> Study:
    study = _toy(tmp_path)
    with sqlite3.connect(tmp_path / "s.db") as con:
        con.execute("UPDATE trials SET state = 'DONE'")
    return study


def _deleted_midway(tmp_path: Path) -> None:
    study = _toy(tmp_path)
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp_path / 's.db'}{suffix}").unlink(missing_ok=True)
    try:
        study.tell(study.ask(), {"latency": 1.0, "search_seconds": 2.0})
    finally:
        assert not (tmp_path / "s.db").exists()  # no empty database made in its place


#: (id, call(tmp_path), error class, substrings of the message)
STORAGE: list[tuple[str, Callable[[Path], Any], type[Exception], tuple[str, ...]]] = [
    (
        "path-is-a-folder",  # "disk I/O error"
        lambda tmp: toy_study("t", f"sqlite:///{tmp}"),
        StorageError,
        ("names the folder", "study.db", "Name a file in it"),
    ),
    (
        "path-is-a-folder-read-only",  # "does not exist"
        lambda tmp: Study.load("t", f"sqlite:///{tmp}"),
        StorageError,
        ("names the folder", "Name a file in it"),
    ),
    (
        "stored-state-DONE",  # a raw ValueError
        lambda tmp: _state_done(tmp).trials,
        StorageCorruptError,
        ("trial 0 of 't'", "'state' column holds 'DONE'", "'COMPLETE'", "repair or delete"),
    ),
    (
        "database-deleted-mid-run",  # "no such table: trials", an empty file recreated
        _deleted_midway,
        StorageError,
        ("s.db", "is gone", "deleted or moved", "no empty database was made", "restore the file"),
    ),
    (
        "postgres-password-api",  # the password echoed whole
        lambda tmp: Study.load("t", PG),
        StorageError,
        ("user:***@127.0.0.1:1/db", "connect"),
    ),
    (
        "postgres-password-query",
        lambda tmp: Storage(f"postgresql+psycopg://user@127.0.0.1:1/db?password={SECRET}"),
        StorageError,
        ("password=***",),
    ),
    (
        "postgres-password-no-driver",
        lambda tmp: Storage(f"postgresql+nodriver://user:{SECRET}@h/db"),
        StorageError,
        ("user:***@h/db", "No database driver"),
    ),
]


@pytest.mark.parametrize(
    ("call", "error", "needles"), [c[1:] for c in STORAGE], ids=[c[0] for c in STORAGE]
)
def test_bad_storage_is_refused_with_value_and_fix(
    tmp_path: Path, call: Callable[[Path], Any], error: type[Exception], needles: tuple[str, ...]
) -> None:
    text = assert_refused(call, (tmp_path,), error, needles)
    assert SECRET not in text


def test_mask_secrets_masks_every_url_password() -> None:
    text = f"a {PG} b sqlite:///x.db c postgresql://u:p%40ss@h/d?sslmode=x&password=q"
    masked = mask_secrets(text)
    assert SECRET not in masked and "p%40ss" not in masked and "password=q" not in masked
    assert "postgresql+psycopg://user:***@127.0.0.1:1/db" in masked and "sqlite:///x.db" in masked
    assert mask_secrets("postgresql://user@h/d") == "postgresql://user@h/d"


READ_ONLY = textwrap.dedent(
    """
    import sys
    from studies import Study
    try:
        Study.load("t", sys.argv[1]).trials
    except Exception as err:
        print(type(err).__name__, err)
    """
)


def test_wal_database_in_a_read_only_folder_is_not_called_damaged(tmp_path: Path) -> None:
    """Before: "damaged or is not a SQLite database (unable to open database file)"."""
    folder = tmp_path / "ro"
    folder.mkdir()
    _toy(folder)
    url = f"sqlite:///{folder / 's.db'}"
    script = tmp_path / "load.py"
    script.write_text(READ_ONLY)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            done = subprocess.run([sys.executable, str(script), url], env=env, **_CAPTURE)
        finally:
            folder.chmod(0o755)
    else:  # root writes anywhere: a read-only bind mount, where the system allows one
        mount = tmp_path / "mnt"
        mount.mkdir()
        url = f"sqlite:///{mount / 's.db'}"
        inner = (
            f"mount --bind {folder} {mount} && mount -o remount,ro,bind {mount} && "
            f"{sys.executable} {script} {url}"
        )
        if shutil.which("unshare") is None:
            pytest.skip("needs a read-only folder: run as a user, or have unshare for root")
        done = subprocess.run(["unshare", "-m", "sh", "-c", inner], env=env, **_CAPTURE)
        if "StorageError" not in done.stdout and "Storage" not in done.stdout:
            pytest.skip(f"no read-only bind mount here: {done.stderr.strip()[:200]}")
    text = done.stdout
    assert text.startswith("StorageError"), (text, done.stderr)
    assert "is read-only" in text and "not damaged" in text and "writable folder" in text


_CAPTURE: dict[str, Any] = {"capture_output": True, "text": True, "timeout": 60}


# ---------------------------------------------------------------------- evaluate
def test_huge_objective_fails_the_trial_and_the_study_runs_on(sqlite_url: str) -> None:
    """Before: stored COMPLETE, then every proposal (and every resume) failed."""
    study = toy_study("huge", sqlite_url, settings=fast_settings())
    study.evaluate = helpers.huge_objective
    _optimize_in_a_thread(study, 7)  # 3 model-based proposals
    trials = study.trials
    assert len(trials) == 7 and all(t.state.is_finished for t in trials)
    huge = [t for t in trials if t.config["population"] % 2 == 1]
    assert huge and all(t.state == "FAILED" for t in huge)
    assert all("UnusableOutcome: latency=1e+308" in (t.error or "") for t in huge)
    assert "smaller unit" in (huge[0].error or "")


def test_study_holding_a_stored_huge_trial_resumes(
    sqlite_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A study written before the check, with a COMPLETE trial at latency 1e308, resumes."""
    study = toy_study("old", sqlite_url, settings=fast_settings())
    for i in range(5):
        trial = study.ask()
        latency = 1e308 if i == 1 else 1.0 + i / 10
        study.storage.finish_trial(  # as an older rewrite-tuner stored it
            study.id,
            trial.number,
            state="COMPLETE",
            values={"latency": latency, "search_seconds": 1.0 + i},
        )
    resumed = Study.load("old", sqlite_url, helpers.slow_toy)
    with caplog.at_level(logging.WARNING, logger="tuner.tuner"):
        _optimize_in_a_thread(resumed, 7)
    assert [t.state for t in resumed.trials[5:]] == ["COMPLETE", "COMPLETE"]
    assert "Trial 1 is stored COMPLETE, but UnusableOutcome" in caplog.text


def test_dropped_metrics_are_named(sqlite_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """Before: a NaN tracking metric disappeared from the trial and to_dataframe() unnoticed."""
    study = toy_study("metrics", sqlite_url, settings=fast_settings())
    study.evaluate = helpers.odd_metrics
    with caplog.at_level(logging.WARNING, logger="studies.study"):
        _optimize_in_a_thread(study, 1)
    (trial,) = study.trials
    assert (
        trial.state == "COMPLETE" and "steps" not in trial.metrics and "bytes" not in trial.metrics
    )
    assert "'steps': nan" in caplog.text and "'bytes': 1e+300" in caplog.text
    assert "of trial 0 of study 'metrics' are not stored" in caplog.text
    assert "Return a finite number" in caplog.text


# ---------------------------------------------------------------------- command line
def _other_db(tmp: Path) -> Path:
    _toy(tmp, "mine", "mine.db")
    other = tmp / "other.db"
    _toy(tmp, "theirs", "other.db")
    return other


def _cli_export_force(tmp: Path) -> Any:
    other = _other_db(tmp)
    before = other.read_bytes()
    result = runner.invoke(
        app, ["export", "mine", "-s", f"sqlite:///{tmp / 'mine.db'}", "-o", str(other), "--force"]
    )
    assert other.read_bytes() == before  # another study's database is never overwritten
    return result


def _cli_damaged_status(tmp: Path) -> Any:
    _state_done(tmp)
    return runner.invoke(app, ["status", "t", "-s", f"sqlite:///{tmp / 's.db'}"])


def _cli_resume_unimportable(tmp: Path) -> Any:
    study = _toy(tmp)
    study.storage.update_study(study.id, evaluate_ref="no_such_module_here:evaluate")
    return runner.invoke(app, ["resume", "t", "-s", f"sqlite:///{tmp / 's.db'}", "-n", "2"])


_NO_BOX = str.maketrans(dict.fromkeys("│╭╮╰╯─", " "))

#: (id, args or call(tmp_path), exit code, substrings of the output)
CLI: list[tuple[str, Any, int, tuple[str, ...]]] = [
    ("status-password", ["status", "x", "-s", PG], 1, ("user:***@127.0.0.1",)),
    ("status-list-password", ["status", "-s", PG], 1, ("user:***@127.0.0.1",)),
    ("space-negative-n", ["space", "--n", "-1"], 2, ("--n", "greater than or equal to 0")),
    ("demo-held-out-typo", ["demo", "--held-out", "gpt-2"], 1, ("'gpt-2'", "did you mean 'gpt2'")),
    ("demo-workload-typo", ["demo", "--workloads", "gpt2,bret"], 1, ("'bret'", "'bert'")),
    ("demo-steps-0", ["demo", "--steps", "0"], 2, ("--steps", "greater than or equal to 1")),
    ("demo-n-negative", ["demo", "-n", "-5"], 2, ("--n-trials", "greater than or equal to 1")),
    ("demo-workers-0", ["demo", "-w", "0"], 2, ("--workers", "greater than or equal to 1")),
    ("run-workers-0", ["run", "x.py", "-w", "0"], 2, ("--workers", "greater than or equal to 1")),
    (
        "export-force-onto-another-study-db",
        _cli_export_force,
        1,
        ("other.db", "even with force", "SQLite database", "choose another --out"),
    ),
    (
        "status-damaged-row",
        _cli_damaged_status,
        1,
        ("'state' column holds 'DONE'", "repair or delete"),
    ),
    (
        "resume-unimportable-evaluate",
        _cli_resume_unimportable,
        1,
        ("no_such_module_here", "Pass --evaluate module:function", "path/to/file.py:function"),
    ),
]


@pytest.mark.parametrize(("call", "code", "needles"), [c[1:] for c in CLI], ids=[c[0] for c in CLI])
def test_bad_command_line_is_one_clear_message(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    call: Any,
    code: int,
    needles: tuple[str, ...],
) -> None:
    monkeypatch.chdir(tmp_path)
    result = call(tmp_path) if callable(call) else runner.invoke(app, call)
    text = " ".join(result.output.translate(_NO_BOX).split())
    assert result.exit_code == code, result.output
    assert "Traceback" not in result.output and SECRET not in result.output
    for needle in needles:
        assert needle in text, (needle, result.output)
    assert not (tmp_path / "demo-study.db").exists()  # refused before any work


def test_flags_show_no_value_in_help() -> None:
    for args in (["demo", "--help"], ["--help"], ["export", "--help"]):
        result = runner.invoke(app, args, env={"COLUMNS": "120"})
        assert result.exit_code == 0 and "<bool>" not in result.output, result.output


def test_read_commands_find_the_demo_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: after `make run` (demo-study.db), `tuner status` looked for study.db and failed."""
    monkeypatch.chdir(tmp_path)
    toy_study("demo", "sqlite:///demo-study.db", settings=fast_settings()).optimize(
        2, progress=False
    )
    result = runner.invoke(app, ["status", "demo"])
    assert result.exit_code == 0, result.output
    assert "using sqlite:///demo-study.db, the only study database here" in result.output
    result = runner.invoke(app, ["export", "demo", "-o", "p.json"])
    assert result.exit_code == 0 and (tmp_path / "p.json").exists(), result.output
    toy_study("other", "sqlite:///other.db")  # two study databases: none is guessed
    result = runner.invoke(app, ["status", "demo"])
    assert (
        result.exit_code == 1
        and "several study databases (demo-study.db, other.db)" in " ".join(result.output.split())
    )


def test_structure_says_what_it_does_and_where_the_png_went(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    toy_study("s", "sqlite:///s.db", settings=fast_settings()).optimize(2, progress=False)
    result = runner.invoke(app, ["structure", "s", "-s", "sqlite:///s.db"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "learning the structure of 's' from its 2 completed trials" in text
    assert "no drawing" in text and "s-structure.png was not written" in text


def test_study_error_messages_never_show_the_password() -> None:
    with pytest.raises(StudyError) as info:
        Study.load("x", PG)
    assert SECRET not in str(info.value) and SECRET not in repr(info.value.args)


def test_command_line_log_lines_never_show_the_password() -> None:
    from studies.cli import _mask_log_record

    record = logging.LogRecord("studies", logging.WARNING, __file__, 1, "lost %s", (PG,), None)
    assert _mask_log_record(record) and SECRET not in record.getMessage()
    assert "user:***@127.0.0.1" in record.getMessage()


def _optimize_in_a_thread(study: Any, n: int) -> None:
    """``study.optimize(n)`` on one worker thread instead of a process pool."""
    pool = ThreadPoolExecutor(1)
    try:
        study.optimize(n, executor=pool, progress=False)
    finally:
        pool.shutdown(wait=True)
