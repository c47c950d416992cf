"""The rewrite study's job, from a spec to a priors file: calibrate -> tune -> validate -> export.

``tuner demo`` (the main job, `rewrite_tuner.cli`) and `rewrite_tuner.tune_model.tune_model`
(``tuner tune-model``) run this one pipeline (`run_job`) on a `rewrite_tuner.spec.RewriteStudySpec`
and a `Job` (where the study lives, how many trials, on how many workers):

1. **calibrate**: open the study the spec asks for, or create it and calibrate the default search
   (`rewrite_tuner.study.open_rewrite_study`);
2. **prepare**: what the entry point does before tuning (queue first trials, say what is left)
   and the trial timeout it returns (`trial_bound`: a hung search fails its trial alone);
3. **tune**: run the study to its budget;
4. **validate**: check the best trials against the defaults on fresh seeds
   (`rewrite_tuner.transfer`);
5. **export**: write the chosen trial's priors when they win.

Each entry point says how it does steps 2-5 (`Steps`); the pipeline times each phase.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rewrite_tuner.spec import RewriteStudySpec
    from studies.driver import RunStats
    from studies.settings import StudySettings
    from studies.study import Study

__all__ = ["Job", "JobRun", "Steps", "calibration_pace", "run_job", "study_pace", "trial_bound"]


@dataclass(frozen=True)
class Job:
    """How a rewrite study's job runs, beside its spec.

    Attributes:
        name: The study's name; a study of that name in ``storage`` is resumed.
        storage: The study's database (SQLAlchemy URL).
        trials: The study's trial budget.
        workers: Trials evaluated at once (and the calibration's searches run at once).
        seed: The tuner's seed.
        settings: The study's settings (defaults when None).
    """

    name: str
    storage: str
    trials: int
    workers: int = 1
    seed: int = 0
    settings: StudySettings | None = None


@dataclass(frozen=True)
class Steps:
    """What an entry point does at the pipeline's steps (module docstring).

    Attributes:
        prepare: Called with the study and the seconds its calibration took (None when the
            study resumed and nothing was calibrated); returns the trial timeout (None: none).
        tune: Runs the study to the budget (with the timeout); returns its `RunStats` or None.
        validate: Checks the study's best trials; returns what ``export`` reads.
        export: Writes the chosen priors (or says why not); returns what it wrote.
        on_calibrate: Called before a new study's calibration starts.
    """

    prepare: Callable[[Study, float | None], float | None]
    tune: Callable[[Study, int, float | None], RunStats | None]
    validate: Callable[[Study], Any]
    export: Callable[[Study, Any], Any]
    on_calibrate: Callable[[], None] | None = None


@dataclass
class JobRun:
    """What `run_job` did: the study, the tuning's `RunStats`, the validation and the export
    (what `Steps` returned), and the wall seconds of each phase (calibration, tuning,
    validation; a resumed study's calibration is 0: opening it is not counted)."""

    study: Study
    stats: RunStats | None
    validation: Any
    exported: Any
    seconds: dict[str, float] = field(default_factory=dict)


def run_job(spec: RewriteStudySpec, job: Job, steps: Steps) -> JobRun:
    """Calibrate (or open), prepare, tune, validate and export the rewrite study ``spec`` asks
    for (module docstring).

    Raises:
        StudyError: As `open_rewrite_study` and the steps raise it.
        StudyConflictError: If the storage holds a study of that name asked for differently.
    """
    from rewrite_tuner.study import open_rewrite_study

    seconds: dict[str, float] = {}
    started: list[float] = []  # when a new study's calibration started (none: it resumed)

    def calibrating() -> None:
        started.append(time.perf_counter())
        if steps.on_calibrate is not None:
            steps.on_calibrate()

    study = open_rewrite_study(
        spec,
        name=job.name,
        storage=job.storage,
        seed=job.seed,
        settings=job.settings,
        on_calibrate=calibrating,
        workers=job.workers,
    )
    calibration = time.perf_counter() - started[0] if started else None
    seconds["calibration"] = calibration or 0.0
    timeout = steps.prepare(study, calibration)
    t0 = time.perf_counter()
    stats = steps.tune(study, job.trials, timeout)
    seconds["tuning"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    validation = steps.validate(study)
    seconds["validation"] = time.perf_counter() - t0
    exported = steps.export(study, validation)
    return JobRun(study, stats, validation, exported, seconds)


def calibration_pace(spec: RewriteStudySpec, seconds: float) -> float:
    """Seconds per default search of a calibration of the spec that took ``seconds``."""
    return seconds / (spec.calibration_seeds * len(spec.workloads))


def study_pace(spec: RewriteStudySpec, study: Study, calibration: float | None) -> float | None:
    """Seconds per default search here: at the pace of the calibration that just took
    ``calibration`` seconds, else (a resumed study) the median pace of the trials it stored;
    None without either."""
    if calibration is not None:
        return calibration_pace(spec, calibration)
    timed = sorted(t.seconds for t in study.trials if t.seconds)
    return timed[len(timed) // 2] / (spec.seeds * len(spec.workloads)) if timed else None


def trial_bound(spec: RewriteStudySpec, pace: float) -> float:
    """The timeout of a trial of the spec (its seeds on every workload) at ``pace`` seconds per
    default search (`rewrite_tuner.timing.trial_timeout`)."""
    from rewrite_tuner.timing import trial_timeout

    return trial_timeout(spec.seeds * len(spec.workloads), pace)
