"""The ``tuner`` command line: `make_app` builds it from the generic commands (run, resume,
status, plot, dashboard, report, structure) and what an application adds.

An application passes its own commands (`Command`, built from `studies.console`'s parts), the
error types its commands report as one line, the reader of a trial's weights and their words for
``tuner plot`` (`studies.weights.WeightsOf`) and its views for ``tuner dashboard`` and ``tuner report``
(`studies.dashboard.Hooks`); the ``tuner`` console script is such an application's app. This
module's `app` holds the generic commands alone (``python -m studies.cli``).

Heavy modules (torch, botorch, SQLAlchemy, pandas, matplotlib) are imported inside the commands so
``tuner --help`` stays fast. The app's callback is the one place that installs logging handlers.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup

from studies.console import (
    BestOpt,
    ErrorType,
    SimplexOpt,
    StorageOpt,
    SubjectOpt,
    TrialOpt,
    WeightsOpt,
    configure,
    console,
    fail,
    guard,
    guard_write,
    load_study,
    out,
    password_note,
    pick,
    print_status,
    resume_hint,
    run_study,
    shown,
    storage_url,
    study_names,
)

if TYPE_CHECKING:
    from studies.dashboard.hooks import Hooks
    from studies.weights import WeightsOf

__all__ = ["Command", "app", "dashboard_command", "make_app", "plot_command", "report_command"]


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


@dataclass(frozen=True)
class Command:
    """A command an application adds to the app (`make_app`).

    Attributes:
        function: The command: a function whose parameters are `typer` arguments and options
            (its docstring is its ``--help``).
        name: The command's name (default: the function's, ``_`` as ``-``).
        short_help: Its line in ``tuner --help`` (default: the docstring's first sentence).
    """

    function: Callable[..., Any]
    name: str | None = None
    short_help: str | None = None


def make_app(
    commands: Sequence[Command] = (),
    error_types: Sequence[ErrorType] = (),
    *,
    weights_of: WeightsOf | None = None,
    hooks: Hooks | None = None,
    loggers: Sequence[str] = (),
    verbose_loggers: Sequence[str] = (),
    help: str = "Multi-objective tuning: run, resume, inspect and export studies.",
) -> typer.Typer:
    """The ``tuner`` app: the generic commands, then ``commands``.

    Args:
        commands: The application's commands, listed after the generic ones.
        error_types: The application's error types that every command reports as one
            ``error:`` line and exit code 1 (`studies.console.guard`), besides `StudyError`,
            `TunerError` and file-system errors; ``"module:Class"`` for a type whose module is
            imported only when used (`studies.console.ErrorType`).
        weights_of: What ``tuner plot`` draws as a trial's weights and in which words
            (`studies.weights.WeightsOf`; None: a Simplex parameter's, in generic words).
        hooks: The application's additions to ``tuner dashboard`` and ``tuner report``.
        loggers: The application's loggers, set to the level of ``-v``/``-q`` as the
            framework's are.
        verbose_loggers: Loggers whose INFO lines show only with ``-v`` (WARNING otherwise).
        help: The app's ``--help`` text.

    Returns:
        A new `typer.Typer` (building it changes nothing else).
    """
    app = typer.Typer(
        name="tuner",
        help=help,
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        cls=_Group,
    )
    command = functools.partial(app.command, cls=_Command)
    app.callback()(_main_callback(tuple(error_types), tuple(loggers), tuple(verbose_loggers)))
    for fn in (run, resume, status):
        command()(fn)
    command(name="plot")(plot_command(weights_of))
    command(name="dashboard", short_help=_DASHBOARD_HELP)(dashboard_command(hooks))
    command(name="report", short_help=_REPORT_HELP)(report_command(hooks))
    command(short_help=_STRUCTURE_HELP)(structure)
    for extra in commands:
        command(name=extra.name, short_help=extra.short_help)(extra.function)
    return app


def _version(value: bool) -> None:
    if value:
        from studies import __version__

        out.print(f"rewrite-tuner {__version__}")
        raise typer.Exit()


def _main_callback(
    error_types: tuple[ErrorType, ...], loggers: tuple[str, ...], verbose_loggers: tuple[str, ...]
) -> Callable[..., None]:
    """The app's callback: its options, then `configure` and the logging of this call."""

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
        configure(busy_timeout, error_types)
        _install_logging(verbose, quiet, loggers, verbose_loggers)

    return main


def _install_logging(
    verbose: bool, quiet: bool, loggers: tuple[str, ...], verbose_loggers: tuple[str, ...]
) -> None:
    """The command line's log handler (passwords masked) and levels; warnings become log lines."""
    from rich.logging import RichHandler

    # a GPyTorch internal notice, not actionable by users of the command line
    warnings.filterwarnings("ignore", message="Sparse invariant checks", category=UserWarning)
    level = logging.DEBUG if verbose else logging.WARNING if quiet else logging.INFO
    handler = RichHandler(console=console, show_path=False, markup=False)
    handler.addFilter(_mask_log_record)
    logging.basicConfig(level=logging.WARNING, handlers=[handler], format="%(message)s")
    for name in ("studies", "tuner", "structure", *loggers):
        logging.getLogger(name).setLevel(level)
    for name in verbose_loggers:  # e.g. one INFO line per search, many per trial
        logging.getLogger(name).setLevel(logging.DEBUG if verbose else logging.WARNING)
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


# ---------------------------------------------------------------------- run / resume / status
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

    module = guard(load_study_file, study_file)
    if callable(getattr(module, "main", None)):
        guard(module.main)
        return
    study = module.study
    budget = n_trials if n_trials is not None else getattr(module, "n_trials", None)
    run_study(study, budget, workers, timeout, progress)


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

    study = load_study(name, storage_url(storage))
    ref = evaluate or study.evaluate_ref
    if ref is None:
        raise fail(
            f"Study {name!r} has no stored evaluate function (it was defined in __main__ or as a "
            "lambda); pass --evaluate module:function."
        )
    console.print(f"resuming {name!r} with evaluate from {ref}", highlight=False)
    try:
        study.evaluate = resolve_evaluate(ref)
    except StudyFileError as err:
        how = "Fix --evaluate" if evaluate else "Pass --evaluate"
        raise fail(
            f"{err} {how} module:function or path/to/file.py:function (run from the folder the "
            "study file is in, or give its path), e.g. "
            f"`{resume_hint(study)} --evaluate my_study.py:evaluate`{password_note(study)}."
        ) from None
    run_study(study, n_trials, workers, timeout, progress)


def status(
    name: Annotated[str | None, typer.Argument(help="Study name (omit to list studies).")] = None,
    storage: StorageOpt = None,
    last: Annotated[int, typer.Option(min=0, help="Show the last N trials (0: all).")] = 20,
) -> None:
    """Trials and the Pareto set of a study as tables (or the studies in a storage)."""
    storage = storage_url(storage)
    if name is None:
        names = study_names(storage)
        for n in names:
            out.print(n, highlight=False)
        if not names:
            console.print(f"no studies in {shown(storage)}", highlight=False)
        return
    print_status(load_study(name, storage), last=last)


# ---------------------------------------------------------------------- plot / dashboard / report
def plot_command(weights_of: WeightsOf | None = None) -> Callable[..., None]:
    """The ``tuner plot`` command, drawing the weights ``weights_of`` reads, in its words
    (`studies.weights.WeightsOf`; None: a Simplex parameter's); `make_app` registers it with the
    application's ``weights_of``."""

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
        from studies.plots import plot_study

        rule = pick(weights, best, subject_to, trial)
        study = load_study(name, storage_url(storage))
        paths = guard(plot_study, study, out_dir, pick=rule, simplex=simplex, weights_of=weights_of)
        for path in paths:
            out.print(f"wrote {path}", highlight=False)

    what = weights_of.heading.lower() if weights_of is not None else "Simplex weights"
    plot.__doc__ = f"PNGs: Pareto front, hypervolume over trials, {what} of the chosen trial."
    return plot


def dashboard_command(hooks: Hooks | None = None) -> Callable[..., None]:
    """The ``tuner dashboard`` command, with the application's additions ``hooks``
    (`studies.dashboard.Hooks`); `make_app` registers it with the application's ``hooks``."""

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
        parallel coordinates, weights, structure and surrogate, running trials, failures,
        time split; optuna-dashboard on the same server. Refreshes while drivers write."""
        from studies.dashboard.server import Dashboard, serve

        dash = guard(Dashboard, storage_url(storage), name, hooks)
        waiting = guard(dash.waiting)  # refuses what waiting cannot fix (a newer database...)
        if waiting is not None:
            console.print(f"waiting: {waiting}", highlight=False, soft_wrap=True)

        def ready(address: str) -> None:
            what = f"study {name!r}" if name is not None else "every study"
            where = f"{what} of {dash.storage.url} at {address}"
            out.print(f"serving {where} (read-only; Ctrl-C stops)", highlight=False, soft_wrap=True)

        try:
            guard(serve, dash, host, port, on_ready=ready)
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

        url = storage_url(storage)
        path = out_path if out_path is not None else Path(f"{file_stem(name)}-report.html")
        path, snap = guard_write(path, write_report, url, name, path, hooks, structure=structure)
        for line in describe(path, snap):
            out.print(line, highlight=False)

    return report


_DASHBOARD_HELP = "Watch a study live in the browser (read-only), with optuna-dashboard beside it."
_REPORT_HELP = "Write a study's dashboard as one self-contained HTML file (opens offline)."
_STRUCTURE_HELP = (
    "Learn and draw the structure behind a study's trials; say which surrogate is in use and why."
)


# ---------------------------------------------------------------------- structure
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

    study = load_study(name, storage_url(storage))
    png = out_path if out_path is not None else Path(f"{file_stem(name)}-structure.png")
    done = sum(t.state == "COMPLETE" for t in guard(lambda: study.trials))
    console.print(
        f"learning the structure of {name!r} from its {done} completed trials (the structured "
        "surrogate's fit: a minute or two on a laptop for a few dozen trials)",
        highlight=False,
    )
    start = time.monotonic()
    with console.status("fitting the structured surrogate"):
        desc = guard_write(png, structure_report, study, png)
    console.print(f"done in {time.monotonic() - start:.0f} s", highlight=False)
    out.print(explain(desc), highlight=False)
    if "png" in desc:
        out.print(f"wrote the structure drawing to {Path(desc['png']).resolve()}", highlight=False)
    else:
        out.print(
            f"no drawing: no structure was learned, so {png} was not written", highlight=False
        )


app = make_app()
"""The generic commands alone (``python -m studies.cli``)."""

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
