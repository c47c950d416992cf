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

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from rewrite_tuner.dashboard import HOOKS, RULE_PRIORS
from studies.cli import Command, make_app
from studies.console import (
    BestOpt,
    SimplexOpt,
    StorageOpt,
    SubjectOpt,
    TrialOpt,
    WeightsOpt,
    console,
    guard,
    guard_write,
    load_study,
    out,
    pick,
    storage_url,
)

__all__ = ["app"]


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
    from rewrite_tuner.cli_demo import demo_spec, run_demo, toy_demo
    from rewrite_tuner.pipeline import Job

    study_name = name if name is not None else "demo" if toy else "rewrite-demo"
    job = Job(study_name, storage, n_trials, workers)
    if toy:
        toy_demo(job, out_path, force, progress)
        return
    spec = demo_spec(workloads, held_out, steps, seeds)  # before calibrating: a typo must not
    held = [w.strip() for w in held_out.split(",") if w.strip()]  # cost the whole run
    options = {"force": force, "anyway": export_anyway, "progress": progress}
    run_demo(spec, held, job, out_path, options)


ModelArg = Annotated[
    str,
    typer.Argument(
        help="path/to/file.py:Name: a torch.nn.Module, or a class or function called "
        "without arguments to make one."
    ),
]
InputsOpt = Annotated[
    list[str],
    typer.Option(
        "--inputs",
        "-i",
        help="An example input per positional argument, dtype\\[d0,...] (e.g. int64[1,128]; "
        "integers are drawn below the smallest embedding's vocabulary), then keyword ones as "
        "name=value (a tensor or a literal: attention_mask=int64[1,128], use_cache=False; "
        "use_cache=False is the default for a model that takes it). Repeat for several.",
    ),
]
WarmStartOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--warm-start",
        help="A finished study whose trials inform the model (e.g. rewrite-demo); repeat "
        "for several.",
    ),
]
WarmStartStorageOpt = Annotated[
    str | None,
    typer.Option(
        "--warm-start-storage",
        help="Where the --warm-start studies are (e.g. sqlite:///demo-study.db; default: "
        "--storage).",
    ),
]


def tune_model_command(
    model: ModelArg,
    inputs: InputsOpt,
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
    warm_start: WarmStartOpt = None,
    warm_start_storage: WarmStartStorageOpt = None,
    force: ForceOpt = False,
) -> None:
    """Tune the rewrite search for one model of your own and export priors for it.

    Imports the model, calibrates the default search on it, starts from --from's priors (the
    first trial, and the centre of the priors the study explores), runs --trials trials, then
    checks the best against the defaults and against --from's priors on fresh seeds. The priors
    are written only when they beat both with 95% confidence. With --warm-start, a finished
    study's trials (the main job's: rewrite-demo in sqlite:///demo-study.db) inform the model as a
    related task and its best configurations run early. Run it again and it resumes."""
    from rewrite_tuner.cli_demo import check_out_path
    from rewrite_tuner.spec import CALIBRATION_SEEDS
    from rewrite_tuner.tune_model import tune_model

    guard_write(out_path, check_out_path, out_path)
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
    _print_model_tuning(result, priors)


def _print_model_tuning(result: Any, priors: Path | None) -> None:
    """What `tune_model` found: the validation, the comparison with the given priors, the
    verdict and where the time went."""
    from rewrite_tuner.tables import transfer_lines

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
    weights_of=RULE_PRIORS,  # the priors of a Simplex or of an informed prior family
    hooks=HOOKS,  # its time split, the held-out validation table
    loggers=("rewrite_tuner",),
    verbose_loggers=("rewrite",),  # the search's INFO lines (one per search) only with -v
    help="Multi-objective tuning of the rewrite search: run, resume, inspect and export studies.",
)
"""The ``tuner`` console script: `studies.cli`'s commands and the rewrite application's."""

if __name__ == "__main__":  # pragma: no cover
    sys.exit(app())
