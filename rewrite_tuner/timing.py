"""How long the main job (`tuner demo`) takes: an estimate before it runs, the split after.

The estimate counts the default searches each phase runs (`DemoShape`) and prices them at a pace
per search: before anything runs, the pace `REFERENCE` measured on a 2-core machine (scaled by
the step budget); once the study is calibrated, the calibration's own pace; on a resumed study,
the stored trials' pace. A proposal is priced at `PROPOSAL_SEARCHES` default searches (a model fit
and an acquisition take about that many searches' CPU time on the machines measured), so a slow or
loaded machine slows the estimate of both alike. It is an estimate: evaluations stop early on
configurations the defaults dominate, proposals get slower as trials accumulate, and other
processes on the machine take their share of the cores.

The split (`split_lines`) is measured, in wall-clock seconds that add up to the run's total:
calibration, proposals (the driving process fitting and acquiring, `studies.driver.RunStats`),
evaluations (the rest of the tuning, which the driving process spends waiting on its workers and
storing their results) and validation. The workers evaluate while the driving process proposes,
so the evaluations' wall time is what the proposals leave uncovered; their worker seconds are
printed beside it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Mapping

    from studies.driver import RunStats

__all__ = [
    "PHASES",
    "PROPOSAL_SEARCHES",
    "REFERENCE",
    "DemoShape",
    "estimate",
    "estimate_line",
    "split_lines",
    "split_seconds",
    "trial_timeout",
]

#: The phases of the main job, in order.
PHASES = ("calibration", "proposals", "evaluations", "validation")

#: Seconds one default search of 150 steps takes on an average training workload (gpt2, bert,
#: resnet, t5): the calibration of `tuner demo` on a 2-core machine (AMD EPYC, 2 vCPUs, shared:
#: load average ~5 from other processes), 20 default searches in 10 s.
REFERENCE = 0.5
#: A proposal by the model (fit and acquisition in the driving process, on one CPU thread,
#: `tuner.threads.one_thread`; design points cost nothing) costs about this many default searches
#: of 150 steps: `tuner demo` on an idle 2-core machine (2026-11-27), 28 proposals in 65 s (p50
#: 1.4 s, max 9.1 s) at the calibration's pace of 0.7 s per search; they get slower as trials
#: accumulate. (Before proposals ran on one thread: 30, p50 13 s on a loaded machine.)
PROPOSAL_SEARCHES = 4.0
#: Validation in default-search equivalents per training workload and per held-out model (the
#: defaults and 3 candidates on 8 fresh seeds; held out, the defaults and the pick on 5 seeds):
#: fitted to the same run (40 s for 4 + 2 workloads: tuned searches finish sooner).
_VALIDATION_RUNS = 16
_HELD_OUT_RUNS = 8
#: A trial of a built-in study is stopped (FAILED) after this many times its expected duration
#: (its searches at the measured pace)...
TIMEOUT_FACTOR = 20.0
#: ...and never before this many seconds (a loaded machine, a slow first import).
TIMEOUT_FLOOR = 300.0


@dataclass(frozen=True)
class DemoShape:
    """What the main job will run.

    Attributes:
        workloads: Training workloads.
        held_out: Held-out models of the validation.
        trials: Trials still to run.
        proposals: Of them, configurations the model proposes (the rest are queued or design
            points, which cost no fit).
        seeds: Search seeds per trial and workload.
        calibration_seeds: Default searches per workload of the calibration (0: calibrated).
        steps: Search steps per run.
        workers: Trials evaluated at once.
    """

    workloads: int
    held_out: int
    trials: int
    proposals: int
    seeds: int
    calibration_seeds: int
    steps: int
    workers: int


def estimate(shape: DemoShape, per_search: float) -> dict[str, float]:
    """Seconds per phase (`PHASES`; no calibration for a calibrated study) for ``shape`` at
    ``per_search`` seconds per default search of ``shape.steps`` steps on one workload."""
    proposals = shape.proposals * PROPOSAL_SEARCHES * per_search * 150 / shape.steps
    worker = shape.trials * shape.seeds * shape.workloads * per_search  # worker seconds
    phases = {
        "calibration": shape.calibration_seeds * shape.workloads * per_search,
        "proposals": proposals,
        # the workers evaluate while the driving process proposes: the wall clock shows only
        # what the proposals do not cover (at least one trial's evaluation)
        "evaluations": max(worker / shape.workers - proposals, worker / max(shape.trials, 1)),
        "validation": (_VALIDATION_RUNS * shape.workloads + _HELD_OUT_RUNS * shape.held_out)
        * per_search,
    }
    if not shape.calibration_seeds:
        del phases["calibration"]
    return phases


def trial_timeout(searches: int, per_search: float) -> float:
    """Seconds a trial of ``searches`` default-search equivalents (seeds x workloads) may run
    before it is stopped: `TIMEOUT_FACTOR` times its expected duration at ``per_search``
    seconds each, at least `TIMEOUT_FLOOR` (a hung evaluate must not hold its worker forever)."""
    return max(TIMEOUT_FLOOR, TIMEOUT_FACTOR * searches * per_search)


def reference_pace(steps: int) -> float:
    """Seconds per default search of ``steps`` steps at the `REFERENCE` machine's pace."""
    return REFERENCE * steps / 150


def estimate_line(phases: Mapping[str, float], basis: str, what: str = "estimate") -> str:
    """``"estimate: about 4 min (calibration ~40 s, ...), from <basis>."`` (``what`` first) plus
    a note when the machine is busy (load average above its cores)."""
    total = sum(phases.values())
    parts = ", ".join(f"{k} ~{_duration(v)}" for k, v in phases.items())
    line = f"{what}: about {_duration(total)} ({parts}), from {basis}"
    load, cores = _load()
    if load is not None and cores and load > cores:
        line += f"; other processes share the machine (load average {load:.1f} on {cores} cores)"
    return line + "."


def split_seconds(calibration: float, stats: RunStats, validation: float) -> dict[str, float]:
    """Wall-clock seconds of the main job's phases, adding up to its total: the calibration,
    the driving process's proposals, the rest of the tuning (evaluations) and the validation."""
    return {
        "calibration": calibration,
        "proposals": stats.proposing,
        "evaluations": stats.waiting,
        "validation": validation,
    }


def split_lines(calibration: float, stats: RunStats, validation: float) -> list[str]:
    """Where the main job's time went: wall-clock seconds per phase that add up to the total,
    then what the proposals and the evaluations were."""
    phases = split_seconds(calibration, stats, validation)
    rounded = {k: round(v) for k, v in phases.items()}
    total = sum(rounded.values())
    head = " + ".join(f"{k} {v} s" for k, v in rounded.items())
    return [
        f"time split (wall clock): {head} = {total} s",
        f"  proposals: {stats.proposal_summary()}, in the driving process",
        f"  evaluations: {stats.finished} trials, {stats.evaluating:.0f} s of worker time on "
        f"{stats.n_workers} workers, partly while the driving process proposed (the wall time "
        "above is the tuning time it did not spend proposing)",
    ]


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def _load() -> tuple[float | None, int | None]:
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    return load, os.cpu_count()
