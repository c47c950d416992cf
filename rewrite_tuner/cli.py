"""The ``tuner`` command line of the rewrite application: `studies.cli.make_app` builds it from the
generic commands (run, resume, status, plot, dashboard, report, structure) and this module's:
``space`` (a look at a space with a rule-prior simplex), ``export`` (a trial's rule priors as a
priors file), ``demo`` (the main job: tune the rewrite search on zoo models, validate and export
the priors) and ``tune-model`` (the same for a user's own model, starting from a priors file:
`rewrite_tuner.tune_model`). ``plot``, ``dashboard`` and ``report`` get the application's priors
reader and views (`rewrite_tuner.dashboard`), so they show the rule priors of an informed prior
family too, and the demo's time split and held-out validation; the engine's errors are reported as
one line. This module's `app` is the ``tuner`` console script.
"""

from __future__ import annotations

import shlex
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rewrite_tuner.dashboard import HOOKS
from studies.cli import Command, make_app
from studies.console import (
    BestOpt,
    SimplexOpt,
    StorageOpt,
    SubjectOpt,
    TrialOpt,
    WeightsOpt,
    console,
    fail,
    guard,
    guard_write,
    load_study,
    out,
    pick,
    run_study,
    storage_url,
)

if TYPE_CHECKING:
    from rewrite_tuner.timing import DemoShape
    from rewrite_tuner.transfer import TunedReport
    from studies.study import Study

__all__ = ["app"]


def _priors_to_plot(space: Any, trial: Any, simplex: str | None) -> Any:
    """`rewrite_tuner.export.priors_to_plot`, imported when a plot is drawn (``tuner --help``
    stays free of the engine and torch)."""
    from rewrite_tuner.export import priors_to_plot

    return priors_to_plot(space, trial, simplex)


ForceOpt = Annotated[
    bool,
    typer.Option(
        "--force",
        help="Also replace an existing empty --out file, or a priors file of another kind or "
        'version (JSON with a "priors" entry); never a database or any other file.',
    ),
]


def export(
    name: Annotated[str, typer.Argument(help="Study name.")],
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Priors JSON to write.")] = Path(
        "priors.json"
    ),
    storage: StorageOpt = None,
    weights: WeightsOpt = None,
    best: BestOpt = None,
    subject_to: SubjectOpt = None,
    trial: TrialOpt = None,
    simplex: SimplexOpt = None,
    force: ForceOpt = False,
) -> None:
    """Write the chosen trial's rule priors and search config (versioned JSON).

    Default pick: the trial `tuner demo` validated against the defaults, when a validation of
    the study's current trials is stored; else equal weights over objectives normalized on the
    Pareto set. An existing --out file is replaced only if it is a previous export, or with
    --force.
    """
    from rewrite_tuner.export import export_priors
    from rewrite_tuner.transfer import stored_validation

    rule = pick(weights, best, subject_to, trial)
    study = load_study(name, storage_url(storage))
    validated = stored_validation(study, current=True) if rule is None else None
    if validated is not None and validated["report"]["chosen"] is not None:
        rule = validated["report"]["chosen"]
        console.print(
            f"picking trial {rule}, which beat the defaults when these trials were validated on "
            f"{validated['date']} (what `tuner demo` exported); --weights picks by weights "
            "instead.",
            highlight=False,
        )
    elif validated is not None:
        console.print(
            "note: no trial beat the defaults when these trials were validated on "
            f"{validated['date']}; picking by equal weights all the same.",
            highlight=False,
        )
    doc = guard_write(
        out_path, export_priors, study, out_path, pick=rule, simplex=simplex, force=force
    )
    prov = doc.provenance
    out.print(
        f"wrote {out_path} (trial {prov['trial']}, values {prov['values']}; {prov['pick']})",
        highlight=False,
    )


def demo(
    storage: Annotated[
        str, typer.Option("--storage", "-s", help="SQLAlchemy URL of the study database.")
    ] = "sqlite:///demo-study.db",
    n_trials: Annotated[int, typer.Option("--n-trials", "-n", min=1, help="Trial budget.")] = 30,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Parallel trials.")] = 2,
    workloads: Annotated[
        str, typer.Option(help="Comma-separated rewrite.zoo models to tune on.")
    ] = "gpt2,bert,resnet,t5",
    held_out: Annotated[
        str,
        typer.Option(help="Comma-separated zoo models never tuned on, to judge the result."),
    ] = "llama,vit",
    steps: Annotated[int, typer.Option(min=1, help="Search steps per workload and seed.")] = 150,
    seeds: Annotated[int, typer.Option(min=1, help="Search seeds per trial.")] = 3,
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Priors JSON to write.")] = Path(
        "demo-priors.json"
    ),
    export_anyway: Annotated[
        bool,
        typer.Option(
            "--export-anyway",
            help="Export the best trial even when it does not beat the defaults.",
        ),
    ] = False,
    toy: Annotated[
        bool, typer.Option("--toy", help="Run the instant synthetic study instead.")
    ] = False,
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="Study name (default 'rewrite-demo', with --toy 'demo'); a new name starts a new "
            "study in the same storage, e.g. after changing --steps or --workloads.",
        ),
    ] = None,
    force: ForceOpt = False,
    progress: Annotated[bool, typer.Option(help="Show the progress bar.")] = True,
) -> None:
    """Tune the rewrite search on small zoo models (the main job), check the result against the
    defaults on fresh seeds and on held-out models, and export the tuned priors if they win.

    The study is calibrated first (the default search on every workload), then tuned; the best
    trials are checked afresh, and the priors file is written only for a configuration that beats
    the defaults with 95% confidence (or with --export-anyway). Run it again and it resumes."""
    study_name = name if name is not None else "demo" if toy else "rewrite-demo"
    names = [w.strip() for w in workloads.split(",") if w.strip()]
    held = [w.strip() for w in held_out.split(",") if w.strip()]
    if not toy:  # before calibrating: a typo must not cost the whole run
        _check_zoo_names("--workloads", names, required=True)
        _check_zoo_names("--held-out", held, required=False)
        guard_write(out_path, _check_out_path, out_path)
    new = not toy and _stored(study_name, storage) is None  # a resumed study: `_print_rest`
    if new:
        from rewrite_tuner.timing import estimate, estimate_line, reference_pace

        shape = _shape(names, held, n_trials, 0, steps, seeds, workers)
        basis = "a 2-core machine's pace; refined after the calibration"
        console.print(estimate_line(estimate(shape, reference_pace(steps)), basis), highlight=False)
    t0 = time.perf_counter()
    study = guard(_demo_study, toy, study_name, storage, names, steps, seeds, workers)
    calibration = time.perf_counter() - t0
    timeout = None
    if not toy:
        cal = calibration if new else None
        timeout = _announce(study, names, held, n_trials, cal, steps, seeds, workers)
        if new:  # a resumed run keeps the record of the first run's calibration
            _record(out_path, study, calibration=calibration)
    stats = run_study(study, n_trials, workers, timeout, progress)
    if toy:
        from rewrite_tuner.export import export_priors

        doc = guard_write(out_path, export_priors, study, out_path, force=force)
        out.print(f"exported the priors of trial {doc.provenance['trial']} to {out_path}")
        return
    validation, report, doc = _validate_and_export(
        study, held, out_path, force, export_anyway, storage, workers
    )
    from rewrite_tuner.timing import split_lines, split_seconds

    out.print("", highlight=False)
    for line in split_lines(calibration, stats, validation):
        out.print(line, highlight=False)
    exported = None
    if doc is not None:
        exported = {
            "path": str(out_path),
            "trial": doc.provenance["trial"],
            "beats": report.chosen is not None,
        }
    _record(
        out_path,
        study,
        validation=validation,
        split=split_seconds(calibration, stats, validation),
        report=report.to_dict(),
        exported=exported,
    )


def _record(out_path: Path, study: Study, **fields: Any) -> dict[str, Any]:
    """Update the demo's run record beside ``out_path`` (`rewrite_tuner.run_record`: what
    ``tuner dashboard`` shows of the run that the storage does not hold)."""
    from rewrite_tuner.run_record import record_path, update_record

    path = record_path(out_path.parent, study.name)
    return guard_write(path, update_record, path, study.name, study.storage.url, **fields)  # type: ignore[no-any-return]


def _announce(
    study: Study,
    names: list[str],
    held: list[str],
    n_trials: int,
    calibration: float | None,
    steps: int,
    seeds: int,
    workers: int,
) -> float | None:
    """Before the demo tunes: that a finished study is done, or what is left (`_print_rest`)
    and the trial timeout it sets (`rewrite_tuner.timing.trial_timeout`), which it returns."""
    from rewrite_tuner.timing import reference_pace, trial_timeout

    finished = study.progress()["finished"]
    if calibration is None and finished >= n_trials:
        console.print(
            f"{study.name} is done: {finished} of {n_trials} trials finished; nothing to tune "
            "(--n-trials N raises the budget, --name NEW starts a new study).",
            highlight=False,
        )
        return None
    pace = _print_rest(study, names, held, n_trials, calibration, steps, seeds, workers)
    timeout = trial_timeout(seeds * len(names), pace or reference_pace(steps))
    console.print(
        f"each trial is stopped after {timeout:.0f} s (20x its expected time at this pace), so "
        "a hung search fails that trial alone",
        highlight=False,
    )
    return timeout


def _validate_and_export(
    study: Study,
    held: list[str],
    out_path: Path,
    force: bool,
    anyway: bool,
    storage: str,
    workers: int,
) -> tuple[float, TunedReport, Any]:
    """The demo's validation (stored for a finished study: `validate_once`), its export and
    its report; returns the seconds it took, the report and the exported document (None when
    nothing was written)."""
    from rewrite_tuner.transfer import export_tuned, validate_once

    t0 = time.perf_counter()
    report, stored = guard(
        validate_once, study, held, on_progress=lambda line: console.print(line), workers=workers
    )
    seconds = time.perf_counter() - t0
    if stored is not None:
        console.print(
            f"these {study.progress()['finished']} trials were validated on {stored}: the "
            "validation is not repeated (its report follows).",
            highlight=False,
        )
    doc = guard_write(out_path, export_tuned, study, report, out_path, force=force, anyway=anyway)
    _print_tuned(report, out_path if doc is not None else None, study.name, storage)
    return seconds, report, doc


def _shape(
    names: list[str],
    held: list[str],
    n_trials: int,
    done: int,
    steps: int,
    seeds: int,
    workers: int,
    calibrated: bool = False,
) -> DemoShape:
    """The demo's `rewrite_tuner.timing.DemoShape` with ``done`` trials already in the study."""
    from rewrite_tuner.rewrite_study import CALIBRATION_SEEDS, LEAD_DESIGN
    from rewrite_tuner.timing import DemoShape

    return DemoShape(
        workloads=len(names),
        held_out=len(held),
        trials=max(n_trials - done, 0),
        proposals=max(n_trials - max(done, LEAD_DESIGN), 0),
        seeds=seeds,
        calibration_seeds=0 if calibrated else max(CALIBRATION_SEEDS, seeds),
        steps=steps,
        workers=workers,
    )


def _print_rest(
    study: Study,
    names: list[str],
    held: list[str],
    n_trials: int,
    calibration: float | None,
    steps: int,
    seeds: int,
    workers: int,
) -> float | None:
    """The estimate of what is left once the study is open: at the calibration's pace when it
    was calibrated now (``calibration``, its seconds), at the stored trials' pace when it
    resumes (``calibration`` None). Returns that pace (seconds per default search; None
    without one), which also bounds every trial (`rewrite_tuner.timing.trial_timeout`)."""
    from rewrite_tuner.rewrite_study import CALIBRATION_SEEDS
    from rewrite_tuner.timing import estimate, estimate_line

    shape = _shape(names, held, n_trials, len(study.trials), steps, seeds, workers, True)
    timed = [t.seconds for t in study.trials if t.seconds]
    if calibration is not None:  # calibrated now
        pace = calibration / (max(CALIBRATION_SEEDS, seeds) * len(names))
        basis = f"the calibration's pace here ({calibration:.0f} s)"
    elif timed:
        pace = sorted(timed)[len(timed) // 2] / (seeds * len(names))
        basis = f"the pace of the {len(timed)} trials this study ran"
    else:
        return None
    console.print(estimate_line(estimate(shape, pace), basis, what="the rest"), highlight=False)
    return pace


def tune_model_command(
    model: Annotated[
        str,
        typer.Argument(
            help="path/to/file.py:Name: a torch.nn.Module, or a class or function called "
            "without arguments to make one."
        ),
    ],
    inputs: Annotated[
        list[str],
        typer.Option(
            "--inputs",
            "-i",
            help="An example input per positional argument, dtype\\[d0,...] (e.g. int64[1,128]; "
            "integers are drawn below the smallest embedding's vocabulary), then keyword ones as "
            "name=value (a tensor or a literal: attention_mask=int64[1,128], use_cache=False; "
            "use_cache=False is the default for a model that takes it). Repeat for several.",
        ),
    ],
    priors: Annotated[
        Path | None,
        typer.Option("--from", help="Priors file to start from (e.g. demo-priors.json)."),
    ] = None,
    n_trials: Annotated[int, typer.Option("--trials", "-n", min=2, help="Trial budget.")] = 10,
    workers: Annotated[int, typer.Option("--workers", "-w", min=1, help="Parallel trials.")] = 2,
    steps: Annotated[int, typer.Option(min=1, help="Search steps per seed.")] = 150,
    seeds: Annotated[int, typer.Option(min=1, help="Search seeds per trial.")] = 3,
    storage: Annotated[
        str, typer.Option("--storage", "-s", help="SQLAlchemy URL of the study database.")
    ] = "sqlite:///tune-model.db",
    name: Annotated[
        str | None, typer.Option("--name", help="Study name (default tune-<file>:<Name>).")
    ] = None,
    out_path: Annotated[Path, typer.Option("--out", "-o", help="Priors JSON to write.")] = Path(
        "model-priors.json"
    ),
    warm_start: Annotated[
        list[str] | None,
        typer.Option(
            "--warm-start",
            help="A finished study whose trials inform the model (e.g. rewrite-demo); repeat "
            "for several.",
        ),
    ] = None,
    warm_start_storage: Annotated[
        str | None,
        typer.Option(
            "--warm-start-storage",
            help="Where the --warm-start studies are (e.g. sqlite:///demo-study.db; default: "
            "--storage).",
        ),
    ] = None,
    force: ForceOpt = False,
) -> None:
    """Tune the rewrite search for one model of your own and export priors for it.

    Imports the model, calibrates the default search on it, starts from --from's priors (the
    first trial, and the centre of the priors the study explores), runs --trials trials, then
    checks the best against the defaults and against --from's priors on fresh seeds. The priors
    are written only when they beat both with 95% confidence. With --warm-start, a finished
    study's trials (the main job's: rewrite-demo in sqlite:///demo-study.db) inform the model as a
    related task and its best configurations run early. Run it again and it resumes."""
    from rewrite_tuner.rewrite_study import CALIBRATION_SEEDS
    from rewrite_tuner.tables import transfer_lines
    from rewrite_tuner.tune_model import tune_model

    guard_write(out_path, _check_out_path, out_path)
    result = guard(
        tune_model,
        model,
        inputs,
        priors=priors,
        trials=n_trials,
        budget=steps,
        seeds=seeds,
        calibration_seeds=max(CALIBRATION_SEEDS, seeds),
        n_workers=workers,
        storage=storage,
        name=name,
        out=out_path,
        force=force,
        warm_start=[{"study": w, "storage": warm_start_storage} for w in warm_start or []],
        on_progress=lambda line: console.print(line, highlight=False),
    )
    for line in transfer_lines(result.validation):
        out.print(line, highlight=False)
    if result.against_given is not None:
        first = next(iter(result.validation.objectives))
        diff = result.against_given.overall[first]["difference"]
        out.print(
            f"against {priors}: {first} {diff['value']:+.3f} [{diff['low']:+.3f}, "
            f"{diff['high']:+.3f}] (paired, {len(result.against_given.seeds)} fresh seeds)",
            highlight=False,
        )
    secs = ", ".join(f"{k} {v:.0f} s" for k, v in result.seconds.items())
    out.print(f"{result.verdict} ({secs})", highlight=False)


def _check_zoo_names(option: str, names: list[str], required: bool) -> None:
    """Refuse an unknown zoo model (with the closest name) before anything runs."""
    from rewrite import zoo
    from rewrite.errors import RewriteError

    if required and not names:
        raise fail(f"{option} names no model; pick from {zoo.names()}, e.g. {option} gpt2,bert.")
    for n in names:
        try:
            zoo.input_kind(n)
        except RewriteError as err:
            raise fail(f"{option}: {err}") from None


def _check_out_path(path: Path) -> None:
    """Refuse an --out path whose folder is missing, before the demo runs for minutes."""
    if not path.parent.is_dir():
        raise FileNotFoundError(2, "No such file or directory", str(path.parent))
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))


def _stored(name: str, storage: str) -> Study | None:
    """`rewrite_tuner.rewrite_study._stored`: the study if the storage holds it (a resume)."""
    from rewrite_tuner.rewrite_study import _stored as stored

    return guard(stored, name, storage)


def _demo_study(
    toy: bool, name: str, storage: str, workloads: list[str], steps: int, seeds: int, workers: int
) -> Study:
    """The demo's study; a name clash with different settings says how to start a new one."""
    from studies.errors import StudyConflictError

    try:
        if toy:
            from studies.examples import toy_study

            return toy_study(name, storage)
        from rewrite_tuner.rewrite_study import CALIBRATION_SEEDS, rewrite_study

        cal = max(CALIBRATION_SEEDS, seeds)

        def announce() -> None:
            console.print(
                f"calibrating: the default search on {', '.join(workloads)}, {cal} seeds of "
                f"{steps} steps each",
                highlight=False,
            )

        return rewrite_study(
            workloads,
            budget=steps,
            name=name,
            storage=storage,
            seeds=seeds,
            calibration_seeds=cal,
            on_calibrate=announce,
            workers=workers,
        )
    except StudyConflictError as err:
        raise StudyConflictError(
            f"{err} For `tuner demo`: `--name NEW_NAME` starts a new study with these options."
        ) from None


def _print_tuned(report: Any, written: Path | None, name: str, storage: str) -> None:
    """What tuning gained over the defaults, where the file is, how to use and draw it."""
    from rewrite_tuner.tables import transfer_lines

    for line in transfer_lines(report):
        out.print(line, highlight=False)
    caveat = report.held_out_caveat()
    if caveat is not None:
        out.print(caveat, highlight=False)
    if written is not None:
        out.print(f"\nwrote {written}; use it with:", highlight=False)
        out.print(f'  rewrite.search(graph, priors="{written}")', highlight=False)
        # The export is the validated pick (`report.shown`), which `tuner plot`'s default pick
        # (equal weights over the objectives) need not be.
        out.print("draw the study and these priors with:", highlight=False)
        out.print(
            f"  tuner plot {shlex.quote(name)} --storage {shlex.quote(storage)} "
            f"--trial {report.shown}",
            highlight=False,
        )
    elif report.shown is not None:
        out.print(
            "\nnothing exported: no trial beat the defaults with 95% confidence on fresh seeds "
            "(more trials or seeds may help; --export-anyway writes the best trial regardless).",
            highlight=False,
        )


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


app = make_app(
    [
        Command(
            space, short_help="Sample, encode and decode a small space with a rule-prior simplex."
        ),
        Command(export),
        Command(
            demo,
            short_help="The main job: tune the rewrite search on small zoo models, check it "
            "against the defaults on held-out models, export the tuned priors if they win.",
        ),
        Command(
            tune_model_command,
            name="tune-model",
            short_help="Tune the rewrite search for your own model in a few trials, starting "
            "from a priors file; export priors for it if they beat the defaults and that file.",
        ),
    ],
    ["rewrite.errors:RewriteError"],  # the engine's (a zoo model, a priors file...)
    priors_of=_priors_to_plot,  # the priors of a Simplex or of an informed prior family
    hooks=HOOKS,  # its time split, the held-out validation table
    loggers=("rewrite_tuner",),
    verbose_loggers=("rewrite",),  # the search's INFO lines (one per search) only with -v
    help="Multi-objective tuning of the rewrite search: run, resume, inspect and export studies.",
)
"""The ``tuner`` console script: `studies.cli`'s commands and the rewrite application's."""

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
