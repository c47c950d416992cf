"""What the ``tuner`` commands share: the consoles, one-line errors, the storage a command opens,
loading and running a study, and the trial-pick options.

`studies.cli` builds its generic commands from these, and an application builds its own commands
from them too (`studies.cli.make_app` adds them to the app): `guard` and `guard_write` turn the
project's errors (and the error types the application registers with `make_app`) into one
``error:`` line and exit code 1, `load_study` opens a stored study with the ``--busy-timeout`` of
the call, `storage_url` picks the storage a command opens, `run_study` runs a study to its budget
and prints its status, `pick` reads the ``--weights``/``--best``/``--subject-to``/``--trial``
options. The ``*Opt`` names are the options' `typing.Annotated` types, to reuse in a command's
signature.

The settings of the call (``--busy-timeout``, the registered error types) are set by the app's
callback (`configure`) before a command runs. Heavy modules are imported inside the functions.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

from studies._discover import DEFAULT_URL

if TYPE_CHECKING:
    from studies.driver import RunStats
    from studies.pareto import PickRule
    from studies.study import Study

__all__ = [
    "LOCK_NOTICE_AFTER",
    "BestOpt",
    "ErrorType",
    "SimplexOpt",
    "StorageOpt",
    "SubjectOpt",
    "TrialOpt",
    "WeightsOpt",
    "configure",
    "console",
    "fail",
    "guard",
    "guard_write",
    "load_study",
    "os_message",
    "out",
    "password_note",
    "pick",
    "print_status",
    "resume_hint",
    "run_study",
    "shown",
    "storage_url",
    "study_names",
]

console = Console(stderr=True)
"""Messages, notices and errors (stderr)."""
out = Console()
"""What a command produces: tables, paths written (stdout)."""

ErrorType = type[BaseException] | str
"""An error class the commands report as one line, or ``"module:Class"`` for one whose module
is imported only when used (it is looked up once that module is loaded: before, no error of it
can have been raised), so that registering it imports nothing."""

#: Seconds a command waits on its database before it says it is waiting.
LOCK_NOTICE_AFTER = 3.0

_CALL: dict[str, Any] = {"busy_timeout": 60.0, "error_types": ()}  # set by `configure`

StorageOpt = Annotated[
    str | None,
    typer.Option(
        "--storage",
        "-s",
        help="SQLAlchemy URL of the study database (default: sqlite:///study.db, or else the "
        "only study database in this folder, such as demo-study.db after `tuner demo`).",
        show_default=False,
    ),
]
WeightsOpt = Annotated[
    str | None, typer.Option(help="Pick by weights over normalized objectives, 'a=0.7,b=0.3'.")
]
BestOpt = Annotated[str | None, typer.Option(help="Pick the best trial on this objective...")]
SubjectOpt = Annotated[
    list[str] | None, typer.Option(help="...among those meeting 'metric <= bound' (repeatable).")
]
TrialOpt = Annotated[int | None, typer.Option(help="Pick this trial number.")]
SimplexOpt = Annotated[
    str | None, typer.Option(help="The Simplex parameter holding the priors (if several).")
]


def configure(busy_timeout: float, error_types: Sequence[ErrorType] = ()) -> None:
    """Set what the commands of this call use: the seconds to wait for a locked database and
    the application's error types that `guard` reports as one line (besides `StudyError`,
    `TunerError` and file-system errors). Called by the app's callback (`studies.cli.make_app`)."""
    _CALL["busy_timeout"] = busy_timeout
    _CALL["error_types"] = tuple(error_types)


def fail(message: str, code: int = 1) -> typer.Exit:
    """Print ``error: MESSAGE`` (URL passwords masked) and return the `typer.Exit` to raise."""
    from rich.markup import escape

    from studies._sqlengine import mask_secrets

    # escaped: a message quoting 'dtype[d0,d1,...]' must not lose it as markup
    text = escape(mask_secrets(message))
    console.print(f"[bold red]error:[/] {text}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def guard(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``fn``; turn the project's errors (`StudyError`, `TunerError`, the types registered
    with `configure`) and file-system errors (a missing folder, a path that is a directory, no
    permission, a full disk) into a one-line message and exit code 1.

    Programming errors (TypeError, KeyError, ...) keep their traceback.
    """
    return _guarded(None, fn, args, kwargs)


def guard_write(path: Path, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`guard` for a call that writes ``path``: a file-system error names ``path`` itself (not
    the temporary file an atomic write goes through)."""
    return _guarded(path, fn, args, kwargs)


def _guarded(path: Path | None, fn: Any, args: Any, kwargs: Any) -> Any:
    from studies.errors import StudyError
    from tuner.errors import TunerError

    try:
        return fn(*args, **kwargs)
    except (StudyError, TunerError) as err:
        raise fail(str(err)) from None
    except OSError as err:
        raise fail(os_message(err, path)) from None
    except Exception as err:
        if isinstance(err, _registered()):
            raise fail(str(err)) from None
        raise


def _registered() -> tuple[type[BaseException], ...]:
    """The error types registered with `configure`, those named ``"module:Class"`` only once
    their module is loaded."""
    found = []
    for kind in _CALL["error_types"]:
        if isinstance(kind, str):
            module, _, name = kind.partition(":")
            kind = getattr(sys.modules.get(module), name, None)
        if isinstance(kind, type):
            found.append(kind)
    return tuple(found)


def os_message(err: OSError, path: Path | None = None) -> str:
    """``"Cannot write 'out/x.json': No such file or directory (FileNotFoundError); ..."``."""
    what = err.strerror or str(err)
    paths = [str(p) for p in (err.filename, err.filename2) if p is not None]
    if path is not None:
        paths = [str(path)]
    where = " -> ".join(repr(p) for p in paths) if paths else "a path"
    verb = "write" if path is not None else "use"
    fix = {
        FileNotFoundError: "create the folder first or fix the path",
        IsADirectoryError: "name a file, not a folder",
        NotADirectoryError: "a part of the path is a file, not a folder; fix the path",
        PermissionError: "choose a path you can write, or fix its permissions",
        FileExistsError: "choose another path or remove the file",
    }.get(type(err), "check the path, its permissions and the free disk space")
    return f"Cannot {verb} {where}: {what} ({type(err).__name__}); {fix}."


def load_study(name: str, url: str) -> Study:
    """`Study.load` of ``name`` in ``url`` with the ``--busy-timeout`` of this call; a wait of
    more than `LOCK_NOTICE_AFTER` seconds is said (another process may hold the lock)."""
    from studies.storage import Storage
    from studies.study import Study

    def load() -> Study:
        store = Storage(url, busy_timeout=_CALL["busy_timeout"], create=False)
        return Study.load(name, store)

    return guard(noticing_waits, url, load)  # type: ignore[no-any-return]


def study_names(url: str) -> list[str]:
    """The names of the studies in ``url`` (as `load_study` waits for it)."""
    from studies.storage import Storage

    busy = _CALL["busy_timeout"]
    return guard(  # type: ignore[no-any-return]
        noticing_waits, url, lambda: Storage(url, busy_timeout=busy, create=False).study_names()
    )


def noticing_waits(url: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; if it is still running after `LOCK_NOTICE_AFTER` seconds while another
    process holds the database's lock, say so and how long this command waits (a locked SQLite
    file held `tuner status` for a minute with no word). A SQLite file's lock is probed
    (`sqlite_lock_held`) every half second from then on, so a slow start with no lock (imports
    on a cold machine) says nothing; where the lock cannot be probed (a server database), the
    wait itself is said."""
    import threading

    from studies._sqlengine import sqlite_lock_held

    wait = _CALL["busy_timeout"]
    done = threading.Event()

    def watch() -> None:
        if done.wait(LOCK_NOTICE_AFTER):
            return
        while True:
            held = sqlite_lock_held(url)
            if held is None or held:
                break
            if done.wait(0.5):
                return
        if not done.is_set():
            console.print(
                f"waiting for {shown(url)}: another process "
                f"{'holds' if held else 'may hold'} its lock; waiting up to {wait:g} s "
                "(`tuner --busy-timeout SECONDS ...` changes it)",
                highlight=False,
            )

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        return fn()
    finally:
        done.set()


def storage_url(given: str | None) -> str:
    """The storage a command opens: ``--storage``, else ``study.db``, else the folder's only
    study database (`studies._discover.choose_storage`; what was chosen is said on stderr)."""
    from studies._discover import choose_storage

    url, note = choose_storage(given)
    if note is not None:
        console.print(note, highlight=False)
    return url


def shown(url: str) -> str:
    """A storage URL as printed: its password masked."""
    from studies._sqlengine import mask_url

    return mask_url(url)


def resume_hint(study: Study) -> str:
    """The command that continues ``study``, with ``--storage`` unless it is the default; a URL
    with a password is printed without it (a ``***`` in the command would not run as printed,
    and the password must not be shown): `password_note` says how to pass it."""
    import shlex

    cmd = f"tuner resume {shlex.quote(study.name)}"
    engine_url = study.storage.engine.url
    url = study.storage.url  # its password masked
    if engine_url.password is not None:
        u = engine_url  # URL.set(password=None) keeps the password: build it without
        bare = type(u).create(u.drivername, u.username, None, u.host, u.port, u.database, u.query)
        url = bare.render_as_string(hide_password=False)
    if url != DEFAULT_URL:
        cmd += f" --storage {shlex.quote(url)}"
    return cmd


def password_note(study: Study) -> str:
    """How to pass the password `resume_hint` leaves out ("" when the URL has none)."""
    if study.storage.engine.url.password is None:
        return ""
    return (
        ", with the password in the environment (PGPASSWORD=...) or in ~/.pgpass, which "
        "PostgreSQL reads when the URL has none"
    )


def run_study(
    study: Study, n_trials: int | None, workers: int, timeout: float | None, progress: bool
) -> RunStats:
    """Run the study to its budget (``n_trials``, else the stored one), print its status and
    where the time went; Ctrl-C says how to resume (exit code 130)."""
    budget = n_trials if n_trials is not None else study.budget
    if budget is None:
        raise fail(f"No trial budget for {study.name!r}: pass --n-trials N.")
    try:
        stats = guard(study.optimize, budget, n_workers=workers, timeout=timeout, progress=progress)
    except KeyboardInterrupt:
        raise fail(
            f"interrupted; trials in flight were re-queued. Continue with `{resume_hint(study)}`"
            f"{password_note(study)}.",
            130,
        ) from None
    print_status(study, last=10)
    if stats.trials:
        out.print(f"tuning took {stats.summary()}", highlight=False)
    return stats  # type: ignore[no-any-return]


def print_status(study: Study, last: int) -> None:
    """The study's trials (the ``last`` ones; 0: all), its Pareto set and a summary line."""
    from studies.tables import pareto_table, summary_line, trials_table

    trials = guard(lambda: study.trials)  # a damaged stored row: one line, no traceback
    out.print(trials_table(study, trials, last))
    out.print(pareto_table(study, trials))
    out.print(summary_line(study, trials), highlight=False)


def pick(
    weights: str | None, best: str | None, subject_to: list[str] | None, trial: int | None
) -> PickRule:
    """The pick rule of the ``--weights``, ``--best``/``--subject-to`` and ``--trial`` options
    (None: none given, the command's default pick)."""
    from studies.pareto import Constrained, Weighted

    given = [x is not None for x in (weights, best, trial)]
    if sum(given) > 1:
        raise fail("Use at most one of --weights, --best and --trial.")
    if subject_to and best is None:
        raise fail("--subject-to goes with --best OBJECTIVE.")
    if trial is not None:
        return trial
    if best is not None:
        return Constrained(best, tuple(subject_to or ()))
    if weights is None:
        return None
    parsed = {}
    for part in weights.split(","):
        key, sep, value = part.partition("=")
        try:
            parsed[key.strip()] = float(value)
        except ValueError:
            sep = ""
        if not sep:
            raise fail(f"--weights must read 'name=weight,name=weight', got {weights!r}.")
    return Weighted(parsed)
