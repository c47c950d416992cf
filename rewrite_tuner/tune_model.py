"""Tune the rewrite search for a user's own model in a handful of trials (``tuner tune-model``).

`tune_model` runs a short rewrite study on one model (a reference such as
``"model.py:build(int64[1,128])"``, `rewrite_tuner.user_model`):

1. **Calibrate** the default search on the model (`rewrite_tuner.study`).
2. **Start from given priors** (a priors file, e.g. the main job's ``demo-priors.json``): the
   study's prior family is centred on them (`rewrite_tuner.prior_family.PriorFamily.centred_on`); the
   first trials are the defaults and the configuration that reproduces the given priors
   (weight 1, equal family weights, the file's knobs), queued with `studies.Study.enqueue`.
3. **Tune** for the given number of trials.
4. **Validate on fresh seeds** the best-ranked trials against the defaults
   (`rewrite_tuner.transfer.validate`), and the one shown against the given priors.
5. **Export** its priors, with both comparisons in the provenance, when it beats the defaults
   and the given priors; otherwise write nothing and say which was as good.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies.errors import StudyError

if TYPE_CHECKING:
    from rewrite.optimize import PriorsFile
    from rewrite_tuner.compare import Comparison
    from rewrite_tuner.pipeline import Job, Steps
    from rewrite_tuner.spec import RewriteStudySpec
    from rewrite_tuner.transfer import TunedReport
    from rewrite_tuner.user_model import ModelRef
    from studies.study import Study

__all__ = ["ModelTuning", "tune_model"]

#: Fresh seeds of the validation (the trials use the calibration seeds 0, 1, ...).
VALIDATION_SEEDS = tuple(range(100, 106))


@dataclass
class ModelTuning:
    """What `tune_model` did.

    Attributes:
        model: The model reference tuned on.
        study: The study's name.
        validation: The best trials against the defaults on fresh seeds.
        against_given: The trial shown against the given priors on the same seeds (None without
            given priors).
        exported: The priors file written, or None.
        verdict: One line: what was exported, or why nothing was.
        seconds: Wall seconds of each phase (calibration, tuning, validation).
    """

    model: str
    study: str
    validation: TunedReport
    against_given: Comparison | None
    exported: PriorsFile | None
    verdict: str
    seconds: dict[str, float] = field(default_factory=dict)


def tune_model(
    model: str,
    inputs: Sequence[str] | None = None,
    *,
    priors: str | Path | None = None,
    trials: int = 10,
    budget: int = 150,
    seeds: int = 3,
    calibration_seeds: int = 5,
    n_workers: int = 2,
    storage: str = "sqlite:///tune-model.db",
    name: str | None = None,
    seed: int = 0,
    out: str | Path = "model-priors.json",
    force: bool = False,
    validation_seeds: Sequence[int] = VALIDATION_SEEDS,
    device: str = "h100",
    warm_start: Sequence[Any] = (),
    on_progress: Callable[[str], None] | None = None,
) -> ModelTuning:
    """Tune the rewrite search for one model and export its priors (module docstring).

    ``budget``, ``seeds``, ``calibration_seeds`` and ``device`` are the study's
    `rewrite_tuner.spec.RewriteStudySpec` (its workload: the model; its centre: the given
    priors); the job runs `rewrite_tuner.pipeline.run_job`.

    Args:
        model: ``"path/to/file.py:Name"`` (with ``inputs``) or ``"...:Name(int64[1,128])"``.
        inputs: Example inputs when ``model`` does not name them: ``dtype[d0,d1,...]`` per
            positional argument, then ``name=value`` per keyword one (a tensor or a literal,
            e.g. ``use_cache=False``; `rewrite_tuner.user_model`).
        priors: A priors file to start from; None starts from the defaults alone. Its search
            knobs are checked as `rewrite.search` checks them, before anything runs.
        trials: The study's trial budget (the defaults and the given priors included).
        n_workers: Trials evaluated at once.
        storage: The study's database; a study of that name there is resumed.
        name: The study's name (default ``tune-<file>:<Name>``).
        seed: The tuner's seed.
        out: Where to write the tuned priors.
        force: Replace an ``out`` that is not a priors file (see `export_priors`).
        validation_seeds: Fresh search seeds of the validation (at least 2).
        warm_start: Finished studies (names in ``storage``, or ``{"study": name, "storage":
            url}``, e.g. the main job's ``rewrite-demo`` in ``demo-study.db``) whose trials
            inform this study's model as related tasks (`StudySettings.warm_start`); their two
            best configurations each are queued after the defaults and the given priors.
        on_progress: Called with a line before each phase (for the console).

    Raises:
        StudyError: For a bad model reference or inputs, a model `rewrite` cannot import, an
            unreadable priors file, or invalid counts.
    """
    from rewrite_tuner.pipeline import Job, run_job
    from rewrite_tuner.problem import workload_graphs
    from rewrite_tuner.spec import RewriteStudySpec
    from rewrite_tuner.user_model import user_graph
    from studies.settings import StudySettings

    tell = on_progress or (lambda line: None)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 2:
        raise StudyError(f"trials must be an int >= 2 (the defaults and one more), got {trials!r}.")
    ref, nodes = _imported(model, inputs, tell)
    given = _given_priors(priors) if priors is not None else None
    spec = RewriteStudySpec(
        workloads=(str(ref),),
        budget=budget,
        device=device,
        seeds=seeds,
        calibration_seeds=calibration_seeds,
        centre=given.priors if given is not None else None,
    )
    # the related studies' best are queued after the defaults and the given priors (`_prepare`),
    # not proposed later by the rank rule: the user named them for this model
    settings = StudySettings(
        n_initial=max(3, trials // 2),
        warm_start=list(warm_start),
        warm_start_queue=0,
        warm_start_suggest=0,
    )
    job = Job(name or f"tune-{ref.name}", storage, trials, n_workers, seed, settings)
    steps = _ModelJob(spec, job, tell, given, priors, out, force, validation_seeds, ref.name, nodes)
    try:
        run = run_job(spec, job, steps.steps())
    finally:
        workload_graphs.cache_clear()  # a later call may name an edited file
        user_graph.cache_clear()
    (report, against), (exported, verdict) = run.validation, run.exported
    return ModelTuning(str(ref), run.study.name, report, against, exported, verdict, run.seconds)


@dataclass(frozen=True)
class _ModelJob:
    """`tune_model`'s steps of the pipeline (`rewrite_tuner.pipeline.Steps`)."""

    spec: RewriteStudySpec
    job: Job
    tell: Callable[[str], None]
    given: PriorsFile | None
    priors: str | Path | None
    out: str | Path
    force: bool
    validation_seeds: Sequence[int]
    model: str
    nodes: int

    def steps(self) -> Steps:
        from rewrite_tuner.pipeline import Steps

        return Steps(
            prepare=self._prepare,
            tune=lambda study, trials, timeout: study.optimize(
                trials, n_workers=self.job.workers, timeout=timeout, progress=False
            ),
            validate=self._validate,
            export=self._export,
            on_calibrate=lambda: self.tell(
                f"calibrating the default search on {self.model} ({self.nodes} nodes, "
                f"{self.spec.calibration_seeds} seeds x {self.spec.budget} steps)"
            ),
        )

    def _prepare(self, study: Study, calibration: float | None) -> float:
        """Queue the defaults and the given priors, then the related studies' best; say how
        the study is tuned; return the trial timeout."""
        from rewrite_tuner.pipeline import study_pace, trial_bound
        from rewrite_tuner.timing import reference_pace

        if self.given is not None and not study.trials:
            # the defaults first (an enqueued trial takes the initial design's position 0,
            # where the defaults would be), then the given priors
            study.enqueue(study.space.default())
            study.enqueue(_centre_config(study, self.given))
        warm = self.job.settings is not None and bool(self.job.settings.warm_start)
        if warm and all(t.state == "WAITING" for t in study.trials):  # nothing ran yet
            from studies.warmstart import seed_from_related

            queued = seed_from_related(study, per_study=2)  # skips what the study holds
            self.tell(f"warm start: {len(queued)} configurations of the related studies queued")
        pace = study_pace(self.spec, study, calibration) or reference_pace(self.spec.budget)
        timeout = trial_bound(self.spec, pace)
        self.tell(
            f"tuning: {self.job.trials} trials on {self.job.workers} workers (each stopped "
            f"after {timeout:.0f} s)"
        )
        return timeout

    def _validate(self, study: Study) -> tuple[TunedReport, Comparison | None]:
        """The best trials against the defaults on fresh seeds, and the one shown against the
        given priors on the same seeds."""
        from rewrite_tuner.transfer import validate

        report = validate(
            study,
            held_out=(),
            validation_seeds=self.validation_seeds,
            n_candidates=3,
            on_progress=self.tell,
            workers=self.job.workers,
        )
        against = None
        given = self.given
        centre = _centre_trial(study, given) if given is not None else None
        if given is not None and report.shown is not None and report.shown != centre:
            self.tell(f"checking trial {report.shown} against the given priors on the same seeds")
            against = _against_given(study, report, given, self.validation_seeds, self.spec.device)
        return report, against

    def _export(
        self, study: Study, validation: tuple[TunedReport, Comparison | None]
    ) -> tuple[PriorsFile | None, str]:
        """Export the chosen trial's priors when it beats the defaults and the given priors;
        returns the file written (None) and the verdict."""
        from rewrite_tuner.transfer import export_tuned

        report, against = validation
        given = self.given
        centre = _centre_trial(study, given) if given is not None else None
        if report.chosen is not None and report.chosen == centre:
            return None, (
                f"the given priors were the best trial (trial {centre}) and beat the defaults on "
                f"fresh seeds: nothing new to export; use {self.priors} for this model"
            )
        if report.chosen is None:
            return None, "no trial beat the defaults on fresh seeds: nothing exported" + (
                "; use the given priors as they are" if given is not None else ""
            )
        if against is not None and not _first_better(against, study.objectives):
            return None, (
                f"trial {report.chosen} beat the defaults but not the given priors on fresh "
                "seeds: nothing exported; the given priors were already as good for this model"
            )
        extra: dict[str, Any] = {"model": self.spec.workloads[0]}
        if against is not None:
            extra["against_given_priors"] = {"file": str(self.priors), **against.to_dict()}
        exported = export_tuned(study, report, self.out, force=self.force, extra=extra)
        verdict = f"trial {report.chosen} beat the defaults" + (
            " and the given priors" if given is not None else ""
        )
        return exported, verdict + f" on fresh seeds: wrote {self.out}"


def _imported(
    model: str, inputs: Sequence[str] | None, tell: Callable[[str], None]
) -> tuple[ModelRef, int]:
    """The model's reference, and its graph's size: it is imported here, so that a model that
    cannot be imported fails with the import's message, not in a worker."""
    from rewrite_tuner.user_model import model_ref, user_graph

    ref = model_ref(model, list(inputs) if inputs is not None else None)
    tell(f"importing {ref.name}")
    return ref, len(user_graph(str(ref)))


def _given_priors(path: str | Path) -> PriorsFile:
    """The priors file to start from, its knobs checked as `rewrite.search(graph,
    priors=FILE)` checks them.

    Raises:
        StudyError: If the file cannot be read or holds an invalid knob.
    """
    from rewrite.errors import PriorsError, SearchConfigError
    from rewrite.optimize import read_priors_file
    from rewrite.optimize.api import coerce_config

    try:
        given = read_priors_file(path)
        coerce_config(None, given.search_config, source=str(path))
    except (PriorsError, SearchConfigError, OSError) as err:
        raise StudyError(f"Cannot use the priors file {str(path)!r}: {err}") from None
    return given


def _centre_config(study: Study, given: PriorsFile) -> dict[str, Any]:
    """The configuration of the study's space that reproduces ``given``: the centred family's
    informed member with the file's knobs (`rewrite_tuner.problem.informed_config`)."""
    from rewrite_tuner.problem import informed_config

    return informed_config(study.space, given.search_config)


def _centre_trial(study: Study, given: PriorsFile) -> int | None:
    """The number of the trial that ran the given priors (`_centre_config`), if one did."""
    centre = _centre_config(study, given)
    return next(
        (t.number for t in study.trials if all(t.config.get(k) == v for k, v in centre.items())),
        None,
    )


def _against_given(
    study: Study, report: TunedReport, given: PriorsFile, seeds: Sequence[int], device: str
) -> Comparison:
    """The trial `report` shows against the given priors (with their knobs, at the study's
    step budget) on ``seeds``."""
    from rewrite_tuner.compare import compare
    from rewrite_tuner.knobs import config_from_params
    from rewrite_tuner.problem import workload_graphs
    from rewrite_tuner.study import suite_of
    from rewrite_tuner.transfer import _split

    spec = suite_of(study)
    assert spec is not None
    trial = next(t for t in study.trials if t.number == report.shown)
    reference = config_from_params(_centre_config(study, given))
    graphs = workload_graphs(tuple(spec["workloads"]))
    return compare(graphs, _split(study, trial.config), reference, seeds, device)


def _first_better(comp: Comparison, objectives: dict[str, str]) -> bool:
    """Whether the candidate is better on the first objective (interval above 0) and not
    significantly worse on any other (`rewrite_tuner.transfer._beats`)."""
    from rewrite_tuner.transfer import _beats

    diffs = {k: comp.overall[k]["difference"] for k in objectives}
    return _beats(diffs, objectives)
