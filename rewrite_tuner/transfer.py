"""Is the tuned configuration better than the defaults? The last step of the rewrite study.

A study's best trials were measured on the seeds they were tuned on, and picked because they
scored well there: their scores are optimistic. `validate` therefore measures afresh:

1. **Training suite, fresh seeds.** The top Pareto trials (`studies.pareto.rank_pareto`, the
   default configuration excluded) and the defaults run on the training workloads with seeds no
   trial used. A candidate *beats the defaults* when the paired difference (candidate - default,
   per seed, mean over workloads) of the study's first objective has a 95% interval above zero,
   and no objective's interval lies entirely on the worse side. The chosen configuration is the
   candidate that beats them by the most, or none.
2. **Held-out workloads.** The chosen configuration (or, if none beats the defaults, the best
   candidate, to show what tuning did) and the defaults run on zoo models of other families
   that the study never saw: steps to reach the defaults' final hypervolume, final hypervolume,
   latency and memory reduction, each with an interval (`rewrite_tuner.compare`).

`export_tuned` writes the chosen configuration's priors file with these measurements in its
provenance, and writes nothing when no candidate beat the defaults (unless asked to).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from studies.errors import StudyError

if TYPE_CHECKING:
    from rewrite_tuner.compare import Comparison
    from rewrite_tuner.export import PriorsFile
    from studies.study import Study

__all__ = [
    "HELD_OUT_SEEDS",
    "VALIDATION_SEEDS",
    "TunedReport",
    "export_tuned",
    "stored_validation",
    "validate",
    "validate_once",
]

logger = logging.getLogger(__name__)

VALIDATION_SEEDS = tuple(range(1000, 1008))
"""Fresh search seeds of the training-suite check (trials use the calibration seeds 0, 1, ...)."""

HELD_OUT_SEEDS = tuple(range(2000, 2005))
"""Search seeds of the held-out check."""


@dataclass
class TunedReport:
    """What `validate` measured.

    Attributes:
        objectives: The study's objectives (name -> direction); the first is the primary one.
        workloads: The training suite.
        held_out_workloads: The held-out workloads.
        budget: The step budget of every search.
        candidates: One dict per candidate, best-ranked first: ``trial``, ``values`` (as
            tuned), ``training`` (objective -> paired difference interval on fresh seeds) and
            ``beats`` (whether it beats the defaults).
        chosen: The trial number of the configuration that beats the defaults, or None.
        training: The chosen (else the best-ranked) candidate against the defaults on the
            training suite with fresh seeds.
        held_out: The same two configurations on the held-out workloads.
    """

    objectives: dict[str, str]
    workloads: list[str]
    held_out_workloads: list[str]
    budget: int
    candidates: list[dict[str, Any]] = field(default_factory=list)
    chosen: int | None = None
    training: Comparison | None = None
    held_out: Comparison | None = None

    @property
    def shown(self) -> int | None:
        """The trial the comparisons are about: the chosen one, else the best-ranked."""
        if self.chosen is not None:
            return self.chosen
        return self.candidates[0]["trial"] if self.candidates else None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able summary (the export's provenance)."""
        return {
            "objectives": dict(self.objectives),
            "tuned_on": list(self.workloads),
            "held_out": list(self.held_out_workloads),
            "budget": self.budget,
            "candidates": self.candidates,
            "chosen": self.chosen,
            "training": self.training.to_dict() if self.training else None,
            "held_out_comparison": self.held_out.to_dict() if self.held_out else None,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> TunedReport:
        """A report `to_dict` wrote (its figures; no search results)."""
        from rewrite_tuner.compare import Comparison

        training, held = d.get("training"), d.get("held_out_comparison")
        return cls(
            dict(d["objectives"]),
            list(d["tuned_on"]),
            list(d["held_out"]),
            int(d["budget"]),
            list(d["candidates"]),
            d["chosen"],
            Comparison.from_dict(training) if training else None,
            Comparison.from_dict(held) if held else None,
        )

    def held_out_caveat(self) -> str | None:
        """A warning when the trial shown did worse than the defaults on a held-out workload
        (its final hypervolume's interval, or its steps to the defaults' final hypervolume, on
        the worse side): priors that win on the training suite need not transfer."""
        if self.held_out is None:
            return None
        worse = []
        for w, row in self.held_out.per_workload.items():
            hv = row["final_hv"]
            if hv["difference"]["high"] < 0 or row["reach"]["ratio"] > 1.0:
                worse.append(
                    f"{w} (final HV {hv['candidate']['value']:.3f} against "
                    f"{hv['reference']['value']:.3f}, {row['reach']['ratio']:.2f}x the steps)"
                )
        if not worse:
            return None
        return (
            f"caveat: on held-out {', '.join(worse)} trial {self.shown} did worse than the "
            "defaults: these priors may not transfer to models unlike the training suite (more "
            "trials, steps or workloads help; keep the defaults for such models)."
        )


def _split(study: Study, config: dict[str, Any]) -> tuple[Any, Any]:
    """``(SearchConfig, priors)`` of a rewrite-study configuration (without the ``"suite"`` entry
    of a study written before studies had contexts)."""
    from rewrite_tuner.knobs import config_from_params
    from rewrite_tuner.spec import search_params

    return config_from_params(search_params(config))


def _beats(diffs: dict[str, dict[str, float]], objectives: dict[str, str]) -> bool:
    """Whether paired differences (candidate - default) show a better first objective and no
    significantly worse one."""
    first = True
    for name, direction in objectives.items():
        d = diffs[name]
        lo, hi = (d["low"], d["high"]) if direction == "maximize" else (-d["high"], -d["low"])
        if first and not lo > 0:
            return False
        if hi < 0:
            return False
        first = False
    return True


def validate(
    study: Study,
    held_out: Sequence[str] | None = None,
    *,
    n_candidates: int = 3,
    validation_seeds: Sequence[int] = VALIDATION_SEEDS,
    held_out_seeds: Sequence[int] = HELD_OUT_SEEDS,
    on_progress: Callable[[str], None] | None = None,
    workers: int = 1,
) -> TunedReport:
    """Check a rewrite study's best trials against the defaults (module docstring).

    Args:
        study: A study made by `rewrite_tuner.study.rewrite_study`.
        held_out: Zoo workloads for the held-out check (default
            `rewrite_tuner.study.HELD_OUT_WORKLOADS`); empty to skip it.
        n_candidates: How many top Pareto trials to check.
        validation_seeds: Fresh seeds of the training-suite check (at least 2).
        held_out_seeds: Seeds of the held-out check (at least 2).
        on_progress: Called with a line before each step (for the console).
        workers: Searches run at once (the same report, sooner).

    Raises:
        StudyError: If the study is not a rewrite study, or has no completed trial besides the
            defaults.
    """
    from rewrite.optimize import search_suite
    from rewrite_tuner.compare import compare
    from rewrite_tuner.problem import workload_graphs
    from rewrite_tuner.study import HELD_OUT_WORKLOADS, suite_of
    from studies.pareto import rank_pareto

    spec = suite_of(study)
    if spec is None:
        raise StudyError(
            f"Study {study.name!r} is not a rewrite study (it has no calibrated suite): "
            "validate studies made by rewrite_tuner.study."
        )
    tell = on_progress or (lambda line: None)
    default_cfg = dict(study.space.default())
    default = _split(study, default_cfg)
    ranked = [
        t
        for t in rank_pareto(study.trials, study.objectives, study.constraints)
        if study.space.to_unit([t.config]).tolist() != study.space.to_unit([default_cfg]).tolist()
    ][:n_candidates]
    held = list(HELD_OUT_WORKLOADS if held_out is None else held_out)
    report = TunedReport(
        dict(study.objectives), list(spec["workloads"]), held, int(default[0].max_steps)
    )
    if not ranked:
        tell("no trial besides the defaults is on the Pareto front: nothing to check")
        return report
    graphs = workload_graphs(tuple(spec["workloads"]))
    device = spec["device"]
    tell(f"checking the defaults on {len(validation_seeds)} fresh seeds")
    ref = search_suite(graphs, default[0], default[1], device, validation_seeds, workers=workers)
    comparisons: dict[int, Comparison] = {}
    for t in ranked:
        tell(f"checking trial {t.number} on the same seeds")
        comp = compare(
            graphs,
            _split(study, t.config),
            default,
            validation_seeds,
            device,
            reference_result=ref,
            workers=workers,
        )
        comparisons[t.number] = comp
        diffs = {k: comp.overall[k]["difference"] for k in study.objectives}
        report.candidates.append(
            {
                "trial": t.number,
                "values": dict(t.values or {}),
                "training": diffs,
                "beats": _beats(diffs, study.objectives),
            }
        )
    primary, sign = next(iter(study.objectives.items()))
    winners = [c for c in report.candidates if c["beats"]]
    if winners:
        s = 1.0 if sign == "maximize" else -1.0
        report.chosen = max(winners, key=lambda c: s * c["training"][primary]["value"])["trial"]
    shown = report.shown
    assert shown is not None
    report.training = comparisons[shown]
    if held:
        tell(f"measuring trial {shown} against the defaults on held-out {', '.join(held)}")
        trial = next(t for t in ranked if t.number == shown)
        report.held_out = compare(
            workload_graphs(tuple(held)),
            _split(study, trial.config),
            default,
            held_out_seeds,
            device,
            workers=workers,
        )
    return report


def _record_path(study: Study) -> Path:
    """Where `validate_once` keeps a study's last validation: one file per storage (a SQLite
    file by its absolute path) and study under the cache folder
    (`rewrite.verify.default_cache_dir`)."""
    import hashlib
    import os

    from rewrite.verify.cache import default_cache_dir
    from studies.plots import file_stem

    storage = study.storage
    database = storage.engine.url.database if storage.is_sqlite else None
    place = os.path.abspath(database) if database not in (None, "", ":memory:") else storage.url
    where = hashlib.sha256(f"{place}|{study.name}".encode()).hexdigest()[:16]
    return default_cache_dir() / "validation" / f"{file_stem(study.name)}-{where}.json"


def _record_key(study: Study, held: Sequence[str], **settings: Any) -> dict[str, Any]:
    """What a validation depends on: the completed trials and how they are checked. A trial's
    creation time is part of it: a study deleted and run again at the same path gives the same
    seeded trials, but the code that validates them may have changed since (a fresh clone's
    ``make run`` once reused a validation three hours old)."""
    import hashlib
    import json

    from studies import __version__

    rows = [
        [t.number, t.config, t.values, t.created] for t in study.trials if t.state == "COMPLETE"
    ]
    digest = hashlib.sha256(json.dumps(rows, sort_keys=True, default=str).encode()).hexdigest()
    return {"trials": digest, "held_out": list(held), **settings, "version": __version__}


def stored_validation(study: Study, current: bool = False) -> dict[str, Any] | None:
    """The study's last stored validation record (`validate_once`): ``{"key", "date",
    "report"}``, or None; with ``current``, only if it covers the study's trials as they are."""
    import json

    path = _record_path(study)
    try:
        rec = json.loads(path.read_text())
        TunedReport.from_dict(rec["report"])
        trials = rec["key"]["trials"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if current and trials != _record_key(study, [])["trials"]:
        return None
    return rec if isinstance(rec, dict) else None


def validate_once(
    study: Study,
    held_out: Sequence[str] | None = None,
    *,
    n_candidates: int = 3,
    validation_seeds: Sequence[int] = VALIDATION_SEEDS,
    held_out_seeds: Sequence[int] = HELD_OUT_SEEDS,
    on_progress: Callable[[str], None] | None = None,
    workers: int = 1,
) -> tuple[TunedReport, str | None]:
    """`validate`, or the stored report of the same validation of the same trials: a finished
    study checked again (a second ``make run``) does not repeat it.

    Returns:
        ``(report, date)``: the report, and the date of the stored one it reuses (None when it
        ran now; it is then stored).
    """
    import datetime
    import json

    from rewrite.serialize import write_text_atomic
    from rewrite_tuner.study import HELD_OUT_WORKLOADS

    held = list(HELD_OUT_WORKLOADS if held_out is None else held_out)
    key = _record_key(
        study,
        held,
        n_candidates=n_candidates,
        validation_seeds=list(validation_seeds),
        held_out_seeds=list(held_out_seeds),
    )
    rec = stored_validation(study)
    if rec is not None and rec.get("key") == key:
        return TunedReport.from_dict(rec["report"]), str(rec.get("date"))
    report = validate(
        study,
        held,
        n_candidates=n_candidates,
        validation_seeds=validation_seeds,
        held_out_seeds=held_out_seeds,
        on_progress=on_progress,
        workers=workers,
    )
    date = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    path = _record_path(study)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps({"key": key, "date": date, "report": report.to_dict()}))
    except OSError as err:  # a cache: the report stands without it
        logger.warning("could not store the validation in %s: %s", path, err)
    return report, None


def export_tuned(
    study: Study,
    report: TunedReport,
    path: str | Path,
    *,
    force: bool = False,
    anyway: bool = False,
    extra: Mapping[str, Any] | None = None,
) -> PriorsFile | None:
    """Write the chosen configuration's priors file, with the report in its provenance.

    Args:
        study: The study `report` is about.
        report: From `validate`.
        path: The priors file (see `rewrite_tuner.export.export_priors` for what may be replaced).
        force: Replace an existing file that is not a priors file.
        anyway: Export the best-ranked candidate even though it did not beat the defaults (its
            provenance says so).
        extra: More provenance entries.

    Returns:
        What was written, or None when nothing beat the defaults and ``anyway`` is false.
    """
    trial = report.chosen if report.chosen is not None else (report.shown if anyway else None)
    if trial is None:
        return None
    extra = {
        "beats_defaults": report.chosen is not None,
        "validation": report.to_dict(),
        **({"caveat": report.held_out_caveat()} if report.held_out_caveat() else {}),
        **dict(extra or {}),
    }
    from rewrite_tuner.export import export_priors

    return export_priors(study, path, pick=trial, force=force, extra=extra)
