"""The generic ``tuner`` commands: run, resume, inspect and plot studies, learn their structure.

The rewrite application (`rewrite_tuner.cli`, the ``tuner`` console script) adds its commands
(``demo``, ``export``) to this `app`.

Heavy modules (torch, botorch, SQLAlchemy, pandas, matplotlib) are imported inside the commands so
``tuner --help`` stays fast. This is the one place that installs logging handlers.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from typer.core import TyperCommand, TyperGroup

from studies._discover import DEFAULT_URL

if TYPE_CHECKING:
    from collections.abc import Callable

    from studies.dashboard.hooks import Hooks
    from studies.driver import RunStats
    from studies.pareto import PickRule
    from studies.plots import PriorsOf
    from studies.study import Study

__all__ = ["app"]


def _flags_take_no_value(params: list[Any]) -> list[Any]:
    """Show flags in ``--help`` as ``--force``, not ``--force <bool>`` (which reads as if they
    took a value); an empty metavar hides the type column of these parameters only."""
    for p in params:
        if getattr(p, "param_type_name", "") == "option" and p.is_flag and p.metavar is None:
            p.metavar = ""
    return params


class _Command(TyperCommand):
    """A command whose ``--help`` shows flags without a value placeholder."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_take_no_value(super().get_params(ctx))


class _Group(TyperGroup):
    """The ``tuner`` group, its flags shown without a value placeholder."""

    def get_params(self, ctx: Any) -> list[Any]:
        return _flags_take_no_value(super().get_params(ctx))


app = typer.Typer(
    name="tuner",
    help="Multi-objective tuning of the rewrite search: run, resume, inspect and export studies.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=_Group,
)
_command = functools.partial(app.command, cls=_Command)
console = Console(stderr=True)
out = Console()

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


def _version(value: bool) -> None:
    if value:
        from studies import __version__

        out.print(f"rewrite-tuner {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Warnings only.")] = False,
    busy_timeout: Annotated[
        float,
        typer.Option(
            "--busy-timeout",
            min=0.1,
            help="Seconds to wait for a study database another process holds locked.",
        ),
    ] = 60.0,
) -> None:
    """rewrite-tuner command line."""
    _OPTIONS["busy_timeout"] = busy_timeout
    from rich.logging import RichHandler

    # a GPyTorch internal notice, not actionable by users of the command line
    warnings.filterwarnings("ignore", message="Sparse invariant checks", category=UserWarning)
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    handler = RichHandler(console=console, show_path=False, markup=False)
    handler.addFilter(_mask_log_record)
    logging.basicConfig(level=logging.WARNING, handlers=[handler], format="%(message)s")
    for name in ("studies", "tuner", "structure", "rewrite_tuner"):  # the application's too
        logging.getLogger(name).setLevel(level)
    # the search's own INFO lines (one per search, many per trial) only with -v
    logging.getLogger("rewrite").setLevel(logging.DEBUG if verbose else logging.WARNING)
    warnings.showwarning = _warning_to_log


def _mask_log_record(record: logging.LogRecord) -> bool:
    """Logging filter of the command line's handler: no URL password reaches the terminal."""
    from studies._sqlengine import mask_secrets

    text = record.getMessage()
    masked = mask_secrets(text)
    if masked != text:
        record.msg, record.args = masked, None
    return True


def _warning_to_log(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: Any = None,
    line: str | None = None,
) -> None:
    """`warnings.showwarning` for the command line: numerical libraries' warnings become DEBUG
    log lines (shown with -v), other warnings WARNING lines."""
    from studies.quiet import is_numerical

    level = logging.DEBUG if is_numerical(category, filename) else logging.WARNING
    text = f"{category.__name__}: {message} ({filename}:{lineno})"
    logging.getLogger("studies.warnings").log(level, "%s", text)


def _fail(message: str, code: int = 1) -> typer.Exit:
    from rich.markup import escape

    from studies._sqlengine import mask_secrets

    # escaped: a message quoting 'dtype[d0,d1,...]' must not lose it as markup
    text = escape(mask_secrets(message))
    console.print(f"[bold red]error:[/] {text}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _guard(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``fn``; turn the project's errors (the rewrite engine's included) and file-system
    errors (a missing folder, a path that is a directory, no permission, a full disk) into a
    one-line message and exit code 1.

    Programming errors (TypeError, KeyError, ...) keep their traceback.
    """
    return _guarded(None, fn, args, kwargs)


def _guard_write(path: Path, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """`_guard` for a call that writes ``path``: a file-system error names ``path`` itself (not
    the temporary file an atomic write goes through)."""
    return _guarded(path, fn, args, kwargs)


def _guarded(path: Path | None, fn: Any, args: Any, kwargs: Any) -> Any:
    from studies.errors import StudyError
    from tuner.errors import TunerError

    try:
        return fn(*args, **kwargs)
    except (StudyError, TunerError) as err:
        raise _fail(str(err)) from None
    except OSError as err:
        raise _fail(_os_message(err, path)) from None
    except Exception as err:
        # the engine's errors (a zoo model, a priors file...); it is imported only when used
        engine_error = getattr(sys.modules.get("rewrite.errors"), "RewriteError", None)
        if engine_error is not None and isinstance(err, engine_error):
            raise _fail(str(err)) from None
        raise


def _os_message(err: OSError, path: Path | None = None) -> str:
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


_OPTIONS: dict[str, float] = {"busy_timeout": 60.0}  # the `tuner` options of this call
#: Seconds a command waits on its database before it says it is waiting.
LOCK_NOTICE_AFTER = 3.0


def _load(name: str, url: str) -> Study:
    """`Study.load` of ``name`` in ``url`` with the ``--busy-timeout`` of this call; a wait of
    more than `LOCK_NOTICE_AFTER` seconds is said (another process may hold the lock)."""
    from studies.storage import Storage
    from studies.study import Study

    def load() -> Study:
        store = Storage(url, busy_timeout=_OPTIONS["busy_timeout"], create=False)
        return Study.load(name, store)

    return _guard(_noticing_waits, url, load)


def _noticing_waits(url: str, fn: Callable[[], Any]) -> Any:
    """Run ``fn``; if it takes over `LOCK_NOTICE_AFTER` seconds, say that the database may be
    locked and how long this command waits (a locked SQLite file held `tuner status` for a
    minute with no word)."""
    import threading

    wait = _OPTIONS["busy_timeout"]
    timer = threading.Timer(
        LOCK_NOTICE_AFTER,
        lambda: console.print(
            f"waiting for {_shown(url)}: another process may hold its lock; waiting up to "
            f"{wait:g} s (`tuner --busy-timeout SECONDS ...` changes it)",
            highlight=False,
        ),
    )
    timer.daemon = True
    timer.start()
    try:
        return fn()
    finally:
        timer.cancel()


def _storage(given: str | None) -> str:
    """The storage a command opens: ``--storage``, else ``study.db``, else the folder's only
    study database (`studies._discover.choose_storage`; what was chosen is said on stderr)."""
    from studies._discover import choose_storage

    url, note = choose_storage(given)
    if note is not None:
        console.print(note, highlight=False)
    return url


def _shown(url: str) -> str:
    """A storage URL as printed: its password masked."""
    from studies._sqlengine import mask_url

    return mask_url(url)


def _resume_hint(study: Study) -> str:
    """The command that continues ``study``, with ``--storage`` unless it is the default; a URL
    with a password is printed without it (a ``***`` in the command would not run as printed,
    and the password must not be shown): `_password_note` says how to pass it."""
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


def _password_note(study: Study) -> str:
    """How to pass the password `_resume_hint` leaves out ("" when the URL has none)."""
    if study.storage.engine.url.password is None:
        return ""
    return (
        ", with the password in the environment (PGPASSWORD=...) or in ~/.pgpass, which "
        "PostgreSQL reads when the URL has none"
    )


# ---------------------------------------------------------------------- run / resume
@_command()
def run(
    study_file: Annotated[Path, typer.Argument(help="Python file defining `study` or `main()`.")],
    n_trials: Annotated[
        int | None, typer.Option("--n-trials", "-n", min=0, help="Total trial budget.")
    ] = None,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Parallel trials.")] = 1,
    timeout: Annotated[
        float | None, typer.Option(help="Seconds one trial may run before it FAILS.")
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
) -> None:
    """Run the study a Python file defines.

    The file either defines `main()` (called with no arguments) or a `study` object
    (`studies.Study`, run with `study.optimize`). The budget is --n-trials, else the file's
    `n_trials` variable, else the study's stored budget.
    """
    from studies.loader import load_study_file

    module = _guard(load_study_file, study_file)
    if callable(getattr(module, "main", None)):
        _guard(module.main)
        return
    study = module.study
    budget = n_trials if n_trials is not None else getattr(module, "n_trials", None)
    _optimize(study, budget, workers, timeout, progress)


@_command()
def resume(
    name: Annotated[str, typer.Argument(help="Study name.")],
    storage: StorageOpt = None,
    n_trials: Annotated[
        int | None,
        typer.Option("--n-trials", "-n", min=0, help="New total budget (default: stored)."),
    ] = None,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Parallel trials.")] = 1,
    timeout: Annotated[float | None, typer.Option(help="Seconds one trial may run.")] = None,
    evaluate: Annotated[
        str | None,
        typer.Option(help="module:function or path/to/file.py:function (default: as stored)."),
    ] = None,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
) -> None:
    """Continue a stored study: re-queue stale trials, rebuild the tuner, finish the budget."""
    from studies.errors import StudyFileError
    from studies.loader import resolve_evaluate

    study = _load(name, _storage(storage))
    ref = evaluate or study.evaluate_ref
    if ref is None:
        raise _fail(
            f"Study {name!r} has no stored evaluate function (it was defined in __main__ or as a "
            "lambda); pass --evaluate module:function."
        )
    console.print(f"resuming {name!r} with evaluate from {ref}", highlight=False)
    try:
        study.evaluate = resolve_evaluate(ref)
    except StudyFileError as err:
        how = "Fix --evaluate" if evaluate else "Pass --evaluate"
        raise _fail(
            f"{err} {how} module:function or path/to/file.py:function (run from the folder the "
            "study file is in, or give its path), e.g. "
            f"`{_resume_hint(study)} --evaluate my_study.py:evaluate`{_password_note(study)}."
        ) from None
    _optimize(study, n_trials, workers, timeout, progress)


def _optimize(
    study: Study, n_trials: int | None, workers: int, timeout: float | None, progress: bool
) -> RunStats:
    """Run the study to its budget, print its status and where the time went."""
    budget = n_trials if n_trials is not None else study.budget
    if budget is None:
        raise _fail(f"No trial budget for {study.name!r}: pass --n-trials N.")
    try:
        stats = _guard(
            study.optimize, budget, n_workers=workers, timeout=timeout, progress=progress
        )
    except KeyboardInterrupt:
        raise _fail(
            f"interrupted; trials in flight were re-queued. Continue with `{_resume_hint(study)}`"
            f"{_password_note(study)}.",
            130,
        ) from None
    _print_status(study, last=10)
    if stats.trials:
        out.print(f"tuning took {stats.summary()}", highlight=False)
    return stats


# ---------------------------------------------------------------------- status
@_command()
def status(
    name: Annotated[str | None, typer.Argument(help="Study name (omit to list studies).")] = None,
    storage: StorageOpt = None,
    last: Annotated[int, typer.Option(min=0, help="Show the last N trials (0: all).")] = 20,
) -> None:
    """Trials and the Pareto set of a study as tables (or the studies in a storage)."""
    from studies.storage import Storage

    storage = _storage(storage)
    if name is None:
        busy = _OPTIONS["busy_timeout"]
        names = _guard(
            _noticing_waits,
            storage,
            lambda: Storage(storage, busy_timeout=busy, create=False).study_names(),
        )
        for n in names:
            out.print(n, highlight=False)
        if not names:
            console.print(f"no studies in {_shown(storage)}", highlight=False)
        return
    _print_status(_load(name, storage), last=last)


def _print_status(study: Study, last: int) -> None:
    from studies.tables import pareto_table, summary_line, trials_table

    trials = _guard(lambda: study.trials)  # a damaged stored row: one line, no traceback
    out.print(trials_table(study, trials, last))
    out.print(pareto_table(study, trials))
    out.print(summary_line(study, trials), highlight=False)


# ---------------------------------------------------------------------- export / plot
def _pick(
    weights: str | None, best: str | None, subject_to: list[str] | None, trial: int | None
) -> PickRule:
    from studies.pareto import Constrained, Weighted

    given = [x is not None for x in (weights, best, trial)]
    if sum(given) > 1:
        raise _fail("Use at most one of --weights, --best and --trial.")
    if subject_to and best is None:
        raise _fail("--subject-to goes with --best OBJECTIVE.")
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
            raise _fail(f"--weights must read 'name=weight,name=weight', got {weights!r}.")
    return Weighted(parsed)


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


def plot_command(priors_of: PriorsOf | None = None) -> Callable[..., None]:
    """The ``tuner plot`` command, drawing the priors ``priors_of`` reads (`studies.plots.PriorsOf`;
    None: a Simplex parameter). The generic one is registered here; an application whose
    priors are derived otherwise registers its own under the name ``plot`` instead."""

    def plot(
        name: Annotated[str, typer.Argument(help="Study name.")],
        storage: StorageOpt = None,
        out_dir: Annotated[
            Path, typer.Option("--out-dir", "-o", help="Folder for the PNGs.")
        ] = Path("."),
        weights: WeightsOpt = None,
        best: BestOpt = None,
        subject_to: SubjectOpt = None,
        trial: TrialOpt = None,
        simplex: SimplexOpt = None,
    ) -> None:
        """PNGs: Pareto front, hypervolume over trials, rule priors of the chosen trial."""
        from studies.plots import plot_study

        rule = _pick(weights, best, subject_to, trial)
        study = _load(name, _storage(storage))
        paths = _guard(plot_study, study, out_dir, pick=rule, simplex=simplex, priors_of=priors_of)
        for path in paths:
            out.print(f"wrote {path}", highlight=False)

    return plot


_command(name="plot")(plot_command())


# ---------------------------------------------------------------------- dashboard / report
def dashboard_command(hooks: Hooks | None = None) -> Callable[..., None]:
    """The ``tuner dashboard`` command, with the application's additions ``hooks``
    (`studies.dashboard.Hooks`). The generic one is registered here; an application registers
    its own under the name ``dashboard`` instead (as for ``plot``)."""

    def dashboard(
        name: Annotated[
            str | None, typer.Argument(help="Study name (omit to see every study of the storage).")
        ] = None,
        storage: StorageOpt = None,
        port: Annotated[
            int, typer.Option("--port", "-p", min=0, max=65535, help="Port (0: any free one).")
        ] = 8080,
        host: Annotated[
            str, typer.Option(help="Interface to listen on (0.0.0.0: every one, e.g. a cluster).")
        ] = "127.0.0.1",
    ) -> None:
        """Watch a study live in the browser (read-only): history and hypervolume, Pareto front,
        parallel coordinates, rule priors, structure and surrogate, running trials, failures,
        time split; optuna-dashboard on the same server. Refreshes while drivers write."""
        from studies.dashboard.server import Dashboard, serve

        dash = _guard(Dashboard, _storage(storage), name, hooks)
        waiting = _guard(dash.waiting)  # refuses what waiting cannot fix (a newer database...)
        if waiting is not None:
            console.print(f"waiting: {waiting}", highlight=False, soft_wrap=True)

        def ready(address: str) -> None:
            what = f"study {name!r}" if name is not None else "every study"
            where = f"{what} of {dash.storage.url} at {address}"
            out.print(f"serving {where} (read-only; Ctrl-C stops)", highlight=False, soft_wrap=True)

        try:
            _guard(serve, dash, host, port, on_ready=ready)
        except KeyboardInterrupt:
            out.print("stopped", highlight=False)

    return dashboard


def report_command(hooks: Hooks | None = None) -> Callable[..., None]:
    """The ``tuner report`` command, with the application's additions ``hooks`` (as
    `dashboard_command`)."""

    def report(
        name: Annotated[str, typer.Argument(help="Study name.")],
        storage: StorageOpt = None,
        out_path: Annotated[
            Path | None,
            typer.Option("--out", "-o", help="HTML file to write (default NAME-report.html)."),
        ] = None,
        structure: Annotated[
            bool, typer.Option(help="Learn the structure for it (minutes, as `tuner structure`).")
        ] = True,
    ) -> None:
        """Write one self-contained HTML file with the dashboard's views of a study (it opens
        offline: plotly.js and every trial's view are inside). Read-only."""
        from studies.dashboard.report import describe, write_report
        from studies.plots import file_stem

        url = _storage(storage)
        path = out_path if out_path is not None else Path(f"{file_stem(name)}-report.html")
        path, snap = _guard_write(path, write_report, url, name, path, hooks, structure=structure)
        for line in describe(path, snap):
            out.print(line, highlight=False)

    return report


_command(
    name="dashboard",
    short_help="Watch a study live in the browser (read-only), with optuna-dashboard beside it.",
)(dashboard_command())
_command(
    name="report",
    short_help="Write a study's dashboard as one self-contained HTML file (opens offline).",
)(report_command())


# ---------------------------------------------------------------------- structure
@_command(
    short_help="Learn and draw the structure behind a study's trials; say which surrogate is "
    "in use and why."
)
def structure(
    name: Annotated[str, typer.Argument(help="Study name.")],
    storage: StorageOpt = None,
    out_path: Annotated[Path | None, typer.Option("--out", "-o", help="DAG PNG to write.")] = None,
) -> None:
    """Learn the structure behind a study's trials (parameters -> metrics -> objectives), draw the
    DAG with its edge strengths, and say which surrogate is in use and why."""
    from structure import explain
    from studies.plots import file_stem
    from studies.study import structure_report

    study = _load(name, _storage(storage))
    png = out_path if out_path is not None else Path(f"{file_stem(name)}-structure.png")
    done = sum(t.state == "COMPLETE" for t in _guard(lambda: study.trials))
    console.print(
        f"learning the structure of {name!r} from its {done} completed trials (the structured "
        "surrogate's fit: a minute or two on a laptop for a few dozen trials)",
        highlight=False,
    )
    start = time.monotonic()
    with console.status("fitting the structured surrogate"):
        desc = _guard_write(png, structure_report, study, png)
    console.print(f"done in {time.monotonic() - start:.0f} s", highlight=False)
    out.print(explain(desc), highlight=False)
    if "png" in desc:
        out.print(f"wrote the structure drawing to {Path(desc['png']).resolve()}", highlight=False)
    else:
        out.print(
            f"no drawing: no structure was learned, so {png} was not written", highlight=False
        )


@_command(short_help="Sample, encode and decode a small space with a rule-prior simplex.")
def space(
    n: int = typer.Option(8, min=0, help="Number of configurations to sample."),
    seed: int = typer.Option(0, help="Sobol scrambling seed."),
) -> None:
    """Build a search space with a rule-prior simplex; sample, encode and decode it (a quick look at
    what the tuner searches)."""
    from rich.console import Console
    from rich.table import Table

    from spaces import Bool, Choice, Float, Int, Simplex, Space

    space = Space(
        {
            "population": Int(8, 256, log=True, default=32),
            "tau": Float(0.01, 10.0, log=True),
            "mutations": Int(1, 8),
            "selection": Choice(("softmax", "tournament")),
            "restart": Bool(),
            "priors": Simplex(("fuse", "merge", "shard", "algebra")),
        }
    )
    configs = space.sample(n, seed=seed)
    X = space.to_unit(configs)
    decoded = space.from_unit(X)
    console = Console()
    table = Table(title=f"{n} Sobol configurations (seed {seed}), d = {space.dim} GP columns")
    for name in space.names:
        table.add_column(name, justify="right")
    table.add_column("round trip", justify="center")
    for config, back in zip(configs, decoded):
        cells = []
        for name in space.names:
            v = config[name]
            if isinstance(v, dict):
                cells.append(" ".join(f"{k}={w:.2f}" for k, w in v.items()))
            elif isinstance(v, float):
                cells.append(f"{v:.4g}")
            else:
                cells.append(str(v))
        same = space.to_unit([back]).allclose(space.to_unit([config]), atol=1e-12)
        cells.append("ok" if same else "MISMATCH")
        table.add_row(*cells)
    console.print(table)
    console.print(f"columns: {space.columns}")
    console.print(f"simplex constraint: columns {space.simplex_dims['priors']} sum to 1")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
