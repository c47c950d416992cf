"""``tuner demo``'s job (the main job) on the command line: its spec, checked before anything runs
(`demo_spec`), and its steps of the rewrite pipeline (`rewrite_tuner.pipeline.run_job`), each
saying what it does on the console: the time estimate, what is left and the trial timeout, the
tuning with its progress bar and status, the held-out validation (`validate_once`), the export
and how to use it, the time split and the run record beside the priors file
(`rewrite_tuner.run_record`). `toy_demo` runs the instant synthetic study instead.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies.console import console, fail, guard, guard_write, out, run_study

if TYPE_CHECKING:
    from rewrite_tuner.pipeline import Job, Steps
    from rewrite_tuner.spec import RewriteStudySpec
    from rewrite_tuner.timing import DemoShape
    from rewrite_tuner.transfer import TunedReport
    from studies.driver import RunStats
    from studies.study import Study

__all__ = ["check_out_path", "demo_spec", "run_demo", "toy_demo"]


def demo_spec(workloads: str, held_out: str, steps: int, seeds: int) -> RewriteStudySpec:
    """The demo's spec from its options (comma-separated zoo names), and its held-out models;
    a typo is refused (with the closest name) before anything runs."""
    from rewrite_tuner.spec import CALIBRATION_SEEDS, RewriteStudySpec

    names = [w.strip() for w in workloads.split(",") if w.strip()]
    held = [w.strip() for w in held_out.split(",") if w.strip()]
    _check_zoo_names("--workloads", names, required=True)
    _check_zoo_names("--held-out", held, required=False)
    spec = guard(
        RewriteStudySpec,
        workloads=tuple(names),
        budget=steps,
        seeds=seeds,
        calibration_seeds=max(CALIBRATION_SEEDS, seeds),
    )
    return spec  # type: ignore[no-any-return]


def run_demo(
    spec: RewriteStudySpec,
    held: list[str],
    job: Job,
    out_path: Path,
    options: dict[str, bool],
) -> None:
    """Run the main job (`rewrite_tuner.pipeline.run_job` with `_DemoJob`'s steps) and print
    where its time went; ``options``: ``force``, ``anyway`` (export even when no trial beats
    the defaults), ``progress``."""
    from rewrite_tuner.pipeline import run_job
    from rewrite_tuner.study import stored_study
    from rewrite_tuner.timing import estimate, estimate_line, reference_pace, split_lines

    guard_write(out_path, check_out_path, out_path)
    if guard(stored_study, job.name, job.storage) is None:  # a resumed one: `_print_rest`
        shape = _shape(spec, held, job.trials, 0, job.workers)
        basis = "a 2-core machine's pace; refined after the calibration"
        line = estimate_line(estimate(shape, reference_pace(spec.budget)), basis)
        console.print(line, highlight=False)
    steps = _DemoJob(spec, job, held, out_path, options)
    run = guard(_naming_a_fix, run_job, spec, job, steps.steps())
    seconds, stats = run.seconds, run.stats
    assert stats is not None  # `run_study` returns them
    out.print("", highlight=False)
    for line in split_lines(seconds["calibration"], stats, seconds["validation"]):
        out.print(line, highlight=False)
    steps.record_end(run.study, stats, run.validation, run.exported, seconds)


def toy_demo(job: Job, out_path: Path, force: bool, progress: bool) -> None:
    """``tuner demo --toy``: the instant synthetic study, tuned and exported."""
    from rewrite_tuner.export import export_priors
    from studies.examples import toy_study

    study = guard(_naming_a_fix, toy_study, job.name, job.storage)
    run_study(study, job.trials, job.workers, None, progress)
    doc = guard_write(out_path, export_priors, study, out_path, force=force)
    out.print(f"exported the priors of trial {doc.provenance['trial']} to {out_path}")


def _naming_a_fix(fn: Any, *args: Any) -> Any:
    """``fn(*args)``; a name clash with different settings says how to start a new study."""
    from studies.errors import StudyConflictError

    try:
        return fn(*args)
    except StudyConflictError as err:
        raise StudyConflictError(
            f"{err} For `tuner demo`: `--name NEW_NAME` starts a new study with these options."
        ) from None


@dataclass(frozen=True)
class _DemoJob:
    """The demo's steps of the pipeline (`rewrite_tuner.pipeline.Steps`), on the console."""

    spec: RewriteStudySpec
    job: Job
    held: list[str]
    out_path: Path
    options: dict[str, bool]

    def steps(self) -> Steps:
        from rewrite_tuner.pipeline import Steps

        return Steps(
            prepare=self._prepare,
            tune=lambda study, trials, timeout: run_study(
                study, trials, self.job.workers, timeout, self.options["progress"]
            ),
            validate=self._validate,
            export=self._export,
            on_calibrate=self._calibrating,
        )

    def _calibrating(self) -> None:
        console.print(
            f"calibrating: the default search on {', '.join(self.spec.workloads)}, "
            f"{self.spec.calibration_seeds} seeds of {self.spec.budget} steps each",
            highlight=False,
        )

    def _prepare(self, study: Study, calibration: float | None) -> float | None:
        """What is left and the trial timeout (`_announce`); a new study's calibration is
        recorded (a resumed run keeps the record of the first run's)."""
        timeout = _announce(study, self, calibration)
        if calibration is not None:
            _record(self.out_path, study, calibration=calibration)
        return timeout

    def _validate(self, study: Study) -> TunedReport:
        """`validate_once` on the demo's workers (stored for a finished study)."""
        from rewrite_tuner.transfer import validate_once

        report, stored = guard(
            validate_once,
            study,
            self.held,
            on_progress=lambda line: console.print(line),
            workers=self.job.workers,
        )
        if stored is not None:
            console.print(
                f"these {study.progress()['finished']} trials were validated on {stored}: the "
                "validation is not repeated (its report follows).",
                highlight=False,
            )
        return report  # type: ignore[no-any-return]

    def _export(self, study: Study, report: TunedReport) -> Any:
        """The export of the validated pick (None when nothing was written), and its report."""
        from rewrite_tuner.transfer import export_tuned

        force, anyway = self.options["force"], self.options["anyway"]
        path = self.out_path
        doc = guard_write(path, export_tuned, study, report, path, force=force, anyway=anyway)
        _print_tuned(report, path if doc is not None else None, study.name, self.job.storage)
        return doc

    def record_end(
        self,
        study: Study,
        stats: RunStats,
        report: TunedReport,
        doc: Any,
        seconds: dict[str, float],
    ) -> None:
        """The run record's validation, time split, report and export."""
        from rewrite_tuner.timing import split_seconds

        exported = None
        if doc is not None:
            exported = {
                "path": str(self.out_path),
                "trial": doc.provenance["trial"],
                "beats": report.chosen is not None,
            }
        _record(
            self.out_path,
            study,
            validation=seconds["validation"],
            split=split_seconds(seconds["calibration"], stats, seconds["validation"]),
            report=report.to_dict(),
            exported=exported,
        )


def _record(out_path: Path, study: Study, **fields: Any) -> dict[str, Any]:
    """Update the demo's run record beside ``out_path`` (`rewrite_tuner.run_record`: what
    ``tuner dashboard`` shows of the run that the storage does not hold)."""
    from rewrite_tuner.run_record import record_path, update_record

    path = record_path(out_path.parent, study.name)
    return guard_write(path, update_record, path, study.name, study.storage.url, **fields)  # type: ignore[no-any-return]


def _announce(study: Study, demo: _DemoJob, calibration: float | None) -> float | None:
    """Before the demo tunes: that a finished study is done, or what is left (`_print_rest`)
    and the trial timeout it sets (`rewrite_tuner.pipeline.trial_bound`), which it returns."""
    from rewrite_tuner.pipeline import trial_bound
    from rewrite_tuner.timing import reference_pace

    finished = study.progress()["finished"]
    n_trials = demo.job.trials
    if calibration is None and finished >= n_trials:
        console.print(
            f"{study.name} is done: {finished} of {n_trials} trials finished; nothing to tune "
            "(--n-trials N raises the budget, --name NEW starts a new study).",
            highlight=False,
        )
        return None
    pace = _print_rest(study, demo, calibration)
    timeout = trial_bound(demo.spec, pace or reference_pace(demo.spec.budget))
    console.print(
        f"each trial is stopped after {timeout:.0f} s (20x its expected time at this pace), so "
        "a hung search fails that trial alone",
        highlight=False,
    )
    return timeout


def _shape(
    spec: RewriteStudySpec,
    held: list[str],
    n_trials: int,
    done: int,
    workers: int,
    calibrated: bool = False,
) -> DemoShape:
    """The demo's `rewrite_tuner.timing.DemoShape` with ``done`` trials already in the study."""
    from rewrite_tuner.problem import LEAD_DESIGN
    from rewrite_tuner.timing import DemoShape

    return DemoShape(
        workloads=len(spec.workloads),
        held_out=len(held),
        trials=max(n_trials - done, 0),
        proposals=max(n_trials - max(done, LEAD_DESIGN), 0),
        seeds=spec.seeds,
        calibration_seeds=0 if calibrated else spec.calibration_seeds,
        steps=spec.budget,
        workers=workers,
    )


def _print_rest(study: Study, demo: _DemoJob, calibration: float | None) -> float | None:
    """The estimate of what is left once the study is open: at the calibration's pace when it
    was calibrated now (``calibration``, its seconds), at the stored trials' pace when it
    resumes (``calibration`` None). Returns that pace (seconds per default search; None
    without one), which also bounds every trial (`rewrite_tuner.pipeline.trial_bound`)."""
    from rewrite_tuner.pipeline import study_pace
    from rewrite_tuner.timing import estimate, estimate_line

    spec, job = demo.spec, demo.job
    shape = _shape(spec, demo.held, job.trials, len(study.trials), job.workers, True)
    pace = study_pace(spec, study, calibration)
    if pace is None:
        return None
    if calibration is not None:  # calibrated now
        basis = f"the calibration's pace here ({calibration:.0f} s)"
    else:
        basis = f"the pace of the {sum(1 for t in study.trials if t.seconds)} trials this study ran"
    console.print(estimate_line(estimate(shape, pace), basis, what="the rest"), highlight=False)
    return pace


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


def check_out_path(path: Path) -> None:
    """Refuse an --out path whose folder is missing, before the demo runs for minutes."""
    if not path.parent.is_dir():
        raise FileNotFoundError(2, "No such file or directory", str(path.parent))
    if path.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(path))


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
