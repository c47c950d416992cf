"""The `tuner` command: run, resume, status, export, plot, demo, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rewrite_tuner.cli import app
from rewrite_tuner.export import read_priors_file

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()

STUDY_FILE = """
from studies import Study
from studies.examples import toy_space
from tests.studies.helpers import fast_settings

def evaluate(config):
    p = config["priors"]
    return {"latency": 1.0 + (p["fuse"] - 0.5) ** 2, "search_seconds": config["population"] / 10}

study = Study("cli", toy_space(), {"latency": "minimize", "search_seconds": "minimize"},
              evaluate, storage="sqlite:///{db}", settings=fast_settings(100))
n_trials = 5
"""


def _invoke(*args: str) -> object:
    result = runner.invoke(app, list(args))
    return result


@pytest.fixture
def study_file(tmp_path: Path) -> tuple[Path, str]:
    db = tmp_path / "cli.db"
    path = tmp_path / "my_study.py"
    path.write_text(STUDY_FILE.replace("{db}", str(db)))
    return path, f"sqlite:///{db}"


def test_help_and_version_import_nothing_heavy() -> None:
    # `tuner --help` stays quick because the command module imports no heavy library at import
    # time (checked below); no wall-clock assertion, which a loaded machine would break.
    out = subprocess.run(
        [sys.executable, "-m", "rewrite_tuner.cli", "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    for command in ("run", "resume", "status", "export", "plot", "demo"):
        assert command in out.stdout
    heavy = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, rewrite_tuner.cli; print(sorted(m for m in "
            "('torch', 'sqlalchemy', 'pandas', 'matplotlib') if m in sys.modules))",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    assert heavy.stdout.strip() == "[]"
    result = _invoke("--version")
    assert result.exit_code == 0 and result.stdout.startswith("rewrite-tuner ")


def test_run_status_export_plot_resume(study_file: tuple[Path, str], tmp_path: Path) -> None:
    path, url = study_file
    result = _invoke("run", str(path), "--no-progress")
    assert result.exit_code == 0, result.output
    assert "Pareto set" in result.stdout and "5/5 trials finished" in result.stdout

    result = _invoke("status", "cli", "--storage", url)
    assert result.exit_code == 0 and "cli: trials" in result.stdout
    assert _invoke("status", "--storage", url).stdout.split() == ["cli"]

    out = tmp_path / "priors.json"
    result = _invoke(
        "export",
        "cli",
        "--storage",
        url,
        "--out",
        str(out),
        "--best",
        "latency",
        "--subject-to",
        "search_seconds <= 100",
    )
    assert result.exit_code == 0, result.output
    doc = read_priors_file(out)
    assert doc.provenance["study"] == "cli" and "best 'latency'" in doc.provenance["pick"]

    result = _invoke(
        "plot",
        "cli",
        "--storage",
        url,
        "--out-dir",
        str(tmp_path / "png"),
        "--weights",
        "latency=1,search_seconds=0",
    )
    assert result.exit_code == 0, result.output
    pngs = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert pngs == ["cli-hypervolume.png", "cli-pareto.png", "cli-priors.png"]
    assert all((tmp_path / "png" / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)

    # resume finds the evaluate function from the stored file reference
    result = _invoke("resume", "cli", "--storage", url, "--n-trials", "7", "--no-progress")
    assert result.exit_code == 0, result.output
    assert "7/7 trials finished" in result.stdout


def test_resume_with_module_reference(tmp_path: Path) -> None:
    from studies.examples import toy_study

    url = f"sqlite:///{tmp_path / 'r.db'}"
    from tests.studies.helpers import fast_settings

    toy_study("toy", url, settings=fast_settings(100)).optimize(2, progress=False)
    result = _invoke("resume", "toy", "-s", url, "-n", "3", "--no-progress")
    assert result.exit_code == 0, result.output
    assert "studies.examples:toy_evaluate" in result.output


def test_resume_from_another_folder_leaves_no_database_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 52: resuming with an absolute --storage from another folder imported the study file,
    whose module-level Study created an empty study.db in that folder."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    path = tmp_path / "a" / "elsewhere_study.py"
    path.write_text(STUDY_FILE.replace("sqlite:///{db}", "sqlite:///study.db"))
    monkeypatch.chdir(tmp_path / "a")
    assert _invoke("run", str(path), "-n", "2", "--no-progress").exit_code == 0
    monkeypatch.delitem(sys.modules, "__tuner_study__elsewhere_study")  # a fresh process
    monkeypatch.chdir(tmp_path / "b")
    url = f"sqlite:///{tmp_path / 'a' / 'study.db'}"
    result = _invoke("resume", "cli", "--storage", url, "-n", "3", "--no-progress")
    assert result.exit_code == 0, result.output
    assert "3/3 trials finished" in result.stdout
    assert list((tmp_path / "b").iterdir()) == []


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def broken(:\n", "syntax error in the study file"),
        ("raise RuntimeError('nope')\n", "failed with RuntimeError: nope"),
        ("x = 1\n", "must define `study = studies.Study(...)` or a function `main()`"),
        ("study = 42\n", "its `study` is a int"),
    ],
)
def test_malformed_study_files(tmp_path: Path, source: str, message: str) -> None:
    path = tmp_path / "bad.py"
    path.write_text(source)
    result = _invoke("run", str(path))
    assert result.exit_code == 1
    assert message in " ".join(result.output.split())


def test_missing_file_and_unknown_study(tmp_path: Path) -> None:
    result = _invoke("run", str(tmp_path / "nope.py"))
    assert result.exit_code == 1 and "must be an existing .py file" in result.output
    url = f"sqlite:///{tmp_path / 'e.db'}"
    result = _invoke("status", "ghost", "--storage", url)
    assert result.exit_code == 1 and "does not exist" in result.output
    assert not (tmp_path / "e.db").exists()  # a read-only command creates no database
    from studies.examples import toy_study

    toy_study("toy", url)
    result = _invoke("status", "ghost", "--storage", url)
    assert result.exit_code == 1 and "No study named 'ghost'" in result.output
    result = _invoke("export", "ghost", "--storage", url, "--weights", "a=x")
    assert result.exit_code == 1 and "--weights must read" in result.output


def test_main_function_file(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    marker = tmp_path / "called"
    path.write_text(f"def main():\n    open({str(marker)!r}, 'w').write('yes')\n")
    result = _invoke("run", str(path))
    assert result.exit_code == 0 and marker.read_text() == "yes"


def test_demo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    # the stored budget makes a second call with the same -n a no-op; start it small
    from studies.examples import toy_study
    from tests.studies.helpers import fast_settings

    toy_study("demo", url, settings=fast_settings(100))
    result = _invoke("demo", "--toy", "-s", url, "-n", "4", "-w", "1", "--no-progress")
    assert result.exit_code == 0, result.output
    assert "Pareto set" in result.stdout and "demo-priors.json" in result.stdout
    assert json.loads((tmp_path / "demo-priors.json").read_text())["provenance"]["study"] == "demo"
    # the demo's export replaces no other file unless --force (and then only a priors file)
    notes = tmp_path / "notes.json"
    notes.write_text('{"priors": {"fuse": 1.0}}')
    base = ("demo", "--toy", "-s", url, "-n", "4", "--no-progress", "--out", str(notes))
    refused = _invoke(*base)
    assert refused.exit_code != 0 and "--force" in refused.output
    assert notes.read_text() == '{"priors": {"fuse": 1.0}}'
    assert _invoke(*base, "--force").exit_code == 0
    assert json.loads(notes.read_text())["provenance"]["study"] == "demo"


def test_space_command() -> None:
    result = _invoke("space", "--n", "3")
    assert result.exit_code == 0 and "ok" in result.stdout


def test_structure_command_draws_the_dag_and_explains_the_choice(tmp_path: Path) -> None:
    from studies.examples import toy_study
    from tests.studies.helpers import fast_settings

    url = f"sqlite:///{tmp_path / 's.db'}"
    # every trial is Sobol (n_initial = budget): the report fits the surrogate, not the tuner
    toy_study("toy", url, settings=fast_settings(12)).optimize(12, progress=False)
    png = tmp_path / "dag.png"
    result = _invoke("structure", "toy", "-s", url, "--out", str(png))
    assert result.exit_code == 0, result.output
    assert "Surrogate in use:" in result.stdout and "Why:" in result.stdout
    assert png.stat().st_size > 0  # the toy's `steps` metric gives a learned DAG


def test_structure_command_on_an_empty_study_is_a_clear_error(tmp_path: Path) -> None:
    from studies.examples import toy_study

    url = f"sqlite:///{tmp_path / 's.db'}"
    toy_study("toy", url)
    result = _invoke("structure", "toy", "-s", url)
    assert result.exit_code == 1 and "no completed trial" in result.output


# ---------------------------------------------------------------------- audited defects
def _one_line_error(result: object) -> str:
    text = " ".join(result.output.split())  # type: ignore[attr-defined]
    assert "Traceback" not in result.output and text.startswith("error: "), result.output  # type: ignore[attr-defined]
    return text


@pytest.fixture
def two_trials(tmp_path: Path) -> str:
    from studies.examples import toy_study
    from tests.studies.helpers import fast_settings

    url = f"sqlite:///{tmp_path / 't.db'}"
    for name in ("team/tune", "../escape"):
        toy_study(name, url, settings=fast_settings(100)).optimize(2, progress=False)
    return url


def test_plot_file_names_are_safe_and_bad_out_dirs_are_one_line(
    two_trials: str, tmp_path: Path
) -> None:
    out = tmp_path / "pl"
    result = _invoke("plot", "team/tune", "-s", two_trials, "--out-dir", str(out))
    assert result.exit_code == 0, result.output
    result = _invoke("plot", "../escape", "-s", two_trials, "--out-dir", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        f"{stem}-{kind}.png"
        for stem in ("___escape", "team_tune")
        for kind in ("hypervolume", "pareto", "priors")
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pl", "t.db"]

    taken = tmp_path / "taken"
    taken.write_text("keep")
    result = _invoke("plot", "team/tune", "-s", two_trials, "--out-dir", str(taken))
    assert result.exit_code == 1 and "is an existing file, not a folder" in _one_line_error(result)


def test_plot_of_an_empty_study_writes_nothing(tmp_path: Path) -> None:
    from studies.examples import toy_study

    url = f"sqlite:///{tmp_path / 'e.db'}"
    toy_study("empty", url)
    out = tmp_path / "pl"
    result = _invoke("plot", "empty", "-s", url, "--out-dir", str(out))
    assert result.exit_code == 1 and "no feasible COMPLETE trial" in _one_line_error(result)
    assert not out.exists()


def test_file_system_errors_are_one_line_naming_the_path(two_trials: str, tmp_path: Path) -> None:
    for target in (tmp_path / "missing" / "p.json", tmp_path):
        result = _invoke("export", "team/tune", "-s", two_trials, "-o", str(target))
        assert result.exit_code == 1 and str(target) in _one_line_error(result)
    assert not list(tmp_path.glob(".*.tmp"))
    taken = tmp_path / "taken"
    taken.write_text("keep")
    result = _invoke("plot", "team/tune", "-s", two_trials, "--out-dir", str(taken / "sub"))
    text = _one_line_error(result)
    assert result.exit_code == 1 and f"Cannot use {str(taken / 'sub')!r}: Not a directory" in text
    assert "a part of the path is a file, not a folder" in text


def test_os_errors_become_messages_but_programming_errors_keep_their_traceback() -> None:
    import typer

    from studies.console import guard, os_message

    err = PermissionError(13, "Permission denied", "/srv/out.json")
    assert os_message(err) == (
        "Cannot use '/srv/out.json': Permission denied (PermissionError); choose a path you can "
        "write, or fix its permissions."
    )
    with pytest.raises(typer.Exit):
        guard(open, "/nonexistent-folder/x")
    with pytest.raises(KeyError):
        guard(lambda: {}["k"])
    with pytest.raises(TypeError):
        guard(len, 3)


def test_negative_last_is_refused(two_trials: str) -> None:
    result = _invoke("status", "team/tune", "-s", two_trials, "--last", "-3")
    assert result.exit_code == 2 and "--last" in result.output


def test_subject_to_an_unknown_metric_says_so(two_trials: str, tmp_path: Path) -> None:
    from studies.pareto import Constrained

    assert Constrained("latency", "search_seconds <= 10").subject_to == ("search_seconds <= 10",)
    result = _invoke(
        "export",
        "team/tune",
        "-s",
        two_trials,
        "-o",
        str(tmp_path / "p.json"),
        "--best",
        "latency",
        "--subject-to",
        "search_second <= 1",
    )
    text = _one_line_error(result)
    assert result.exit_code == 1 and "names 'search_second'" in text
    assert "did you mean 'search_seconds'?" in text


def test_export_force_replaces_a_priors_file_that_is_not_an_export(
    two_trials: str, tmp_path: Path
) -> None:
    target = tmp_path / "mine.json"
    target.write_text('{"priors": {"fuse": 1.0}}\n')
    result = _invoke("export", "team/tune", "-s", two_trials, "-o", str(target))
    assert result.exit_code == 1 and target.read_text() == '{"priors": {"fuse": 1.0}}\n'
    result = _invoke("export", "team/tune", "-s", two_trials, "-o", str(target), "--force")
    assert result.exit_code == 0, result.output
    assert read_priors_file(target).provenance["study"] == "team/tune"


def test_interrupt_hint_names_the_storage(two_trials: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from studies.study import Study

    def interrupted(self: Study, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Study, "optimize", interrupted)
    result = _invoke("resume", "team/tune", "-s", two_trials, "-n", "4", "--no-progress")
    assert result.exit_code == 130
    assert f"`tuner resume team/tune --storage {two_trials}`" in " ".join(result.output.split())


def test_demo_name_starts_a_new_study_after_a_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from studies.examples import toy_study

    monkeypatch.chdir(tmp_path)
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    toy_study("demo", url, seed=7)  # the same name with other settings
    result = _invoke("demo", "--toy", "-s", url, "-n", "2", "-w", "1", "--no-progress")
    assert result.exit_code == 1 and "--name NEW_NAME" in _one_line_error(result)
    result = _invoke(
        "demo", "--toy", "-s", url, "--name", "demo2", "-n", "2", "-w", "1", "--no-progress"
    )
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "demo-priors.json").read_text())
    assert doc["provenance"]["study"] == "demo2"


def _pg_study(url: str) -> object:
    """What `resume_hint` reads of a study: its name and its storage's URLs."""
    from types import SimpleNamespace

    from sqlalchemy.engine import make_url

    from studies._sqlengine import mask_url

    storage = SimpleNamespace(url=mask_url(url), engine=SimpleNamespace(url=make_url(url)))
    return SimpleNamespace(name="tune", storage=storage)


def test_the_resume_command_of_a_postgres_study_runs_as_printed() -> None:
    """Issue 52: Ctrl-C on a PostgreSQL study printed a resume command with '***' for the
    password, which cannot run as printed; the password goes in the environment instead."""
    from studies.console import password_note, resume_hint

    study = _pg_study("postgresql+psycopg://rt:s3cret@db.example:5432/studies")
    hint, note = resume_hint(study), password_note(study)  # type: ignore[arg-type]
    assert hint == "tuner resume tune --storage postgresql+psycopg://rt@db.example:5432/studies"
    assert "PGPASSWORD" in note and "s3cret" not in hint + note and "***" not in hint
    plain = _pg_study("postgresql+psycopg://rt@db.example/studies")
    assert password_note(plain) == ""  # type: ignore[arg-type]


@pytest.mark.postgres
def test_interrupting_a_postgres_study_prints_a_runnable_resume(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sqlalchemy.engine import make_url

    from studies.examples import toy_study
    from studies.study import Study
    from tests.studies.conftest import postgres_url
    from tests.studies.helpers import fast_settings

    url = make_url(postgres_url()).set(password="trusted-anyway")  # the CI server trusts loopback
    text_url = url.render_as_string(hide_password=False)
    toy_study("pg", text_url, settings=fast_settings(100)).optimize(1, progress=False)

    def interrupted(self: Study, *args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(Study, "optimize", interrupted)
    result = _invoke("resume", "pg", "-s", text_url, "-n", "2", "--no-progress")
    text = " ".join(result.output.split())
    assert result.exit_code == 130 and "trusted-anyway" not in text and "***" not in text
    assert f"postgresql+psycopg://{url.username}@{url.host}:{url.port}/{url.database}" in text
    assert "PGPASSWORD" in text


def test_a_slow_start_with_no_lock_says_nothing_of_a_lock(
    two_trials: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A cold `tuner plot` took over 3 s to import and said another process may hold the
    lock, with none held: the notice now probes the lock."""
    import time

    import studies.console as console
    from studies._sqlengine import sqlite_lock_held

    monkeypatch.setattr(console, "LOCK_NOTICE_AFTER", 0.05)
    monkeypatch.setattr(console, "console", console.Console(stderr=True, width=200))
    assert console.noticing_waits(two_trials, lambda: time.sleep(0.8) or 7) == 7
    assert "lock" not in capsys.readouterr().err
    assert sqlite_lock_held(two_trials) is False
    assert sqlite_lock_held("sqlite:///" + "no/such/file.db") is False
    assert sqlite_lock_held("postgresql+psycopg://u@h/db") is None


def test_a_locked_database_is_said_and_the_wait_can_be_set(
    two_trials: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 52: a locked SQLite database made `tuner status` wait 63 s with no word, then
    advised raising busy_timeout, which the command line had no option for."""
    import sqlite3

    import studies.console as console

    monkeypatch.setattr(console, "LOCK_NOTICE_AFTER", 0.2)
    holder = sqlite3.connect(two_trials.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        result = _invoke("--busy-timeout", "1", "status", "team/tune", "-s", two_trials)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    text = " ".join(result.output.split())
    assert result.exit_code == 1, text
    assert "another process holds its lock; waiting up to 1 s" in text
    assert "is locked by another process" in text and "tuner --busy-timeout SECONDS" in text
    assert _invoke("status", "team/tune", "-s", two_trials).exit_code == 0
