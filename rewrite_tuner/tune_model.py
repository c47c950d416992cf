"""Tune the rewrite search for a user's own model in a handful of trials (``tuner tune-model``).

`tune_model` runs a short rewrite study on one model (a reference such as
``"model.py:build(int64[1,128])"``, `rewrite_tuner.user_model`):

1. **Calibrate** the default search on the model (`rewrite_tuner.rewrite_study`).
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

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies.errors import StudyError

if TYPE_CHECKING:
    from rewrite.optimize import TunedSearch
    from rewrite_tuner.compare import Comparison
    from rewrite_tuner.transfer import TunedReport
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
    exported: TunedSearch | None
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

    Args:
        model: ``"path/to/file.py:Name"`` (with ``inputs``) or ``"...:Name(int64[1,128])"``.
        inputs: Example inputs when ``model`` does not name them: ``dtype[d0,d1,...]`` per
            positional argument, then ``name=value`` per keyword one (a tensor or a literal,
            e.g. ``use_cache=False``; `rewrite_tuner.user_model`).
        priors: A priors file to start from; None starts from the defaults alone. Its search
            knobs are checked as `rewrite.search` checks them, before anything runs.
        trials: The study's trial budget (the defaults and the given priors included).
        budget: Search steps per seed.
        seeds: Search seeds per trial.
        calibration_seeds: Seeds of the defaults' calibration (at least ``max(seeds, 2)``).
        n_workers: Trials evaluated at once.
        storage: The study's database; a study of that name there is resumed.
        name: The study's name (default ``tune-<file>:<Name>``).
        seed: The tuner's seed.
        out: Where to write the tuned priors.
        force: Replace an ``out`` that is not a priors file (see `export_priors`).
        validation_seeds: Fresh search seeds of the validation (at least 2).
        device: Cost-model device profile.
        warm_start: Finished studies (names in ``storage``, or ``{"study": name, "storage":
            url}``, e.g. the main job's ``rewrite-demo`` in ``demo-study.db``) whose trials
            inform this study's model as related tasks (`StudySettings.warm_start`); their two
            best configurations each are queued after the defaults and the given priors.
        on_progress: Called with a line before each phase (for the console).

    Raises:
        StudyError: For a bad model reference or inputs, a model `rewrite` cannot import, an
            unreadable priors file, or invalid counts.
    """
    from rewrite_tuner.rewrite_study import _graphs, rewrite_study
    from rewrite_tuner.timing import trial_timeout
    from rewrite_tuner.transfer import export_tuned, validate
    from rewrite_tuner.user_model import model_ref, user_graph
    from studies.settings import StudySettings

    tell = on_progress or (lambda line: None)
    if isinstance(trials, bool) or not isinstance(trials, int) or trials < 2:
        raise StudyError(f"trials must be an int >= 2 (the defaults and one more), got {trials!r}.")
    ref = model_ref(model, list(inputs) if inputs is not None else None)
    workload = str(ref)
    tell(f"importing {ref.name}")
    graph = user_graph(workload)  # fails here, with the import's message, not in a worker
    given = _given_priors(priors) if priors is not None else None
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    # the related studies' best are queued after the defaults and the given priors (below)
    settings = StudySettings(
        n_initial=max(3, trials // 2), warm_start=list(warm_start), warm_start_queue=0
    )
    study = rewrite_study(
        (workload,),
        budget=budget,
        name=name or f"tune-{ref.name}",
        storage=storage,
        seed=seed,
        seeds=seeds,
        calibration_seeds=calibration_seeds,
        settings=settings,
        device=device,
        centre=given.priors if given is not None else None,
        workers=n_workers,
        on_calibrate=lambda: tell(
            f"calibrating the default search on {ref.name} ({len(graph)} nodes, "
            f"{calibration_seeds} seeds x {budget} steps)"
        ),
    )
    seconds["calibration"] = time.perf_counter() - t0
    if given is not None and not study.trials:
        # the defaults first (an enqueued trial takes the initial design's position 0, where
        # the defaults would be), then the given priors
        study.enqueue(study.space.default())
        study.enqueue(_centre_config(study, given))
    if warm_start and all(t.state == "WAITING" for t in study.trials):  # nothing ran yet
        from studies.warmstart import seed_from_related

        queued = seed_from_related(study, per_study=2)  # skips what the study holds
        tell(f"warm start: {len(queued)} configurations of the related studies queued")
    per_search = seconds["calibration"] / calibration_seeds  # one workload
    timeout = trial_timeout(seeds, per_search)
    tell(f"tuning: {trials} trials on {n_workers} workers (each stopped after {timeout:.0f} s)")
    t0 = time.perf_counter()
    study.optimize(trials, n_workers=n_workers, timeout=timeout, progress=False)
    seconds["tuning"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    report = validate(
        study,
        held_out=(),
        validation_seeds=validation_seeds,
        n_candidates=3,
        on_progress=tell,
        workers=n_workers,
    )
    against = None
    centre = _centre_trial(study, given) if given is not None else None
    if given is not None and report.shown is not None and report.shown != centre:
        tell(f"checking trial {report.shown} against the given priors on the same seeds")
        against = _against_given(study, report, given, validation_seeds, device)
    seconds["validation"] = time.perf_counter() - t0
    beats_given = against is None or _first_better(against, study.objectives)
    exported = None
    if report.chosen is not None and report.chosen == centre:
        verdict = (
            f"the given priors were the best trial (trial {centre}) and beat the defaults on "
            f"fresh seeds: nothing new to export; use {priors} for this model"
        )
    elif report.chosen is None:
        verdict = "no trial beat the defaults on fresh seeds: nothing exported" + (
            "; use the given priors as they are" if given is not None else ""
        )
    elif not beats_given:
        verdict = (
            f"trial {report.chosen} beat the defaults but not the given priors on fresh seeds: "
            "nothing exported; the given priors were already as good for this model"
        )
    else:
        extra: dict[str, Any] = {"model": workload}
        if against is not None:
            extra["against_given_priors"] = {"file": str(priors), **against.to_dict()}
        exported = export_tuned(study, report, out, force=force, extra=extra)
        verdict = f"trial {report.chosen} beat the defaults" + (
            " and the given priors" if given is not None else ""
        )
        verdict += f" on fresh seeds: wrote {out}"
    _graphs.cache_clear()  # a later call may name an edited file
    user_graph.cache_clear()
    return ModelTuning(workload, study.name, report, against, exported, verdict, seconds)


def _given_priors(path: str | Path) -> TunedSearch:
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


def _centre_config(study: Study, given: TunedSearch) -> dict[str, Any]:
    """The configuration of the study's space that reproduces ``given``: the centred family's
    informed member with the file's knobs (`rewrite_tuner.problem.informed_config`)."""
    from rewrite_tuner.problem import informed_config

    return informed_config(study.space, given.search_config)


def _centre_trial(study: Study, given: TunedSearch) -> int | None:
    """The number of the trial that ran the given priors (`_centre_config`), if one did."""
    centre = _centre_config(study, given)
    return next(
        (t.number for t in study.trials if all(t.config.get(k) == v for k, v in centre.items())),
        None,
    )


def _against_given(
    study: Study, report: TunedReport, given: TunedSearch, seeds: Sequence[int], device: str
) -> Comparison:
    """The trial `report` shows against the given priors (with their knobs, at the study's
    step budget) on ``seeds``."""
    from rewrite_tuner.compare import compare
    from rewrite_tuner.knobs import config_from_params
    from rewrite_tuner.rewrite_study import _graphs, suite_of
    from rewrite_tuner.transfer import _split

    spec = suite_of(study)
    assert spec is not None
    trial = next(t for t in study.trials if t.number == report.shown)
    reference = config_from_params(_centre_config(study, given))
    graphs = _graphs(tuple(spec["workloads"]))
    return compare(graphs, _split(study, trial.config), reference, seeds, device)


def _first_better(comp: Comparison, objectives: dict[str, str]) -> bool:
    """Whether the candidate is better on the first objective (interval above 0) and not
    significantly worse on any other (`rewrite_tuner.transfer._beats`)."""
    from rewrite_tuner.transfer import _beats

    diffs = {k: comp.overall[k]["difference"] for k in objectives}
    return _beats(diffs, objectives)
