"""The rewrite study's objectives, and the calibration of the default search in them.

Every trial reports `OBJECTIVES` per seed (means over the workloads, `per_seed_objectives`);
`calibrate` runs the default search on the training suite first and keeps what the study needs
from it (`Calibration`): each workload's baseline, the rules' offline evidence, the defaults'
objective values per seed and their noise. `timing_threads` is the thread setting under which
graphs are timed (calibration and trials alike).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from studies.errors import StudyError

if TYPE_CHECKING:
    from rewrite.ir import Graph
    from rewrite.optimize import SuiteResult
    from rewrite_tuner.prior_family import RuleEvidence
    from rewrite_tuner.scores import Baseline

__all__ = [
    "COMPILED",
    "MEASURED",
    "OBJECTIVES",
    "Calibration",
    "calibrate",
    "per_seed_objectives",
    "timing_threads",
]

OBJECTIVES: dict[str, str] = {
    "anytime_hv": "maximize",
    "final_hv": "maximize",
    "effort": "minimize",
    "latency_reduction": "maximize",
    "peak_memory_reduction": "maximize",
    "reach": "minimize",
    "measured_latency_reduction": "maximize",
    "compiled_speedup": "maximize",
}
"""Every objective a trial reports (each with a ``.sem``), with its direction
(``measured_latency_reduction`` only in a study that measures: ``rewrite_study(measure=True)``;
``compiled_speedup`` only in one that measures compiled: ``rewrite_study(measure="compile")``)."""

MEASURED = "measured_latency_reduction"
COMPILED = "compiled_speedup"


@dataclass(frozen=True)
class Calibration:
    """What the default search does on the training suite (see the module docstring).

    Attributes:
        seeds: The calibration seeds.
        baselines: Workload -> `Baseline`.
        evidence: The rules' offline benchmark.
        default: Objective -> its value for the defaults on each seed (mean over workloads).
        noise: Objective -> standard deviation of those values over the seeds.
    """

    seeds: tuple[int, ...]
    baselines: dict[str, Baseline]
    evidence: RuleEvidence
    default: dict[str, list[float]]
    noise: dict[str, float]

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (stored in the study's space)."""
        return {
            "seeds": list(self.seeds),
            "baselines": {w: b.to_dict() for w, b in self.baselines.items()},
            "evidence": self.evidence.to_dict(),
            "default": {k: list(v) for k, v in self.default.items()},
            "noise": dict(self.noise),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Calibration:
        """Read `to_dict`'s form."""
        from rewrite_tuner.prior_family import RuleEvidence
        from rewrite_tuner.scores import Baseline

        return cls(
            tuple(int(s) for s in d["seeds"]),
            {w: Baseline.from_dict(b) for w, b in d["baselines"].items()},
            RuleEvidence.from_dict(d["evidence"]),
            {k: [float(x) for x in v] for k, v in d["default"].items()},
            {k: float(v) for k, v in d["noise"].items()},
        )


def per_seed_objectives(result: SuiteResult, baselines: Mapping[str, Baseline]) -> list[dict]:
    """`OBJECTIVES` of each seed of ``result`` (means over workloads; the measured one only when
    every run was measured)."""
    from rewrite_tuner.scores import per_seed

    return [{k: row[k] for k in OBJECTIVES if k in row} for row in per_seed(result, baselines)]


def calibrate(
    graphs: Mapping[str, Graph],
    max_steps: int,
    seeds: Sequence[int],
    device: str = "h100",
    devices: int = 1,
    measure: bool | str = False,
    workers: int = 1,
) -> Calibration:
    """Run the default search on every workload and seed; see `Calibration`.

    Args:
        graphs: The training suite.
        max_steps: The step budget of every trial.
        seeds: Calibration seeds (at least 2).
        device: Cost-model device profile.
        devices: Devices of the mesh (sharding rules only from 2 on).
        measure: Also time every run's input and Pareto graphs (True: CUDA when present, else
            the CPU; or a torch device name), so ``measured_latency_reduction`` is calibrated.
        workers: Searches run at once (`rewrite.optimize.suite.run_searches`; the same
            calibration, sooner; measured runs go one at a time).

    Raises:
        StudyError: With fewer than two seeds.
    """
    from rewrite.optimize import SearchConfig
    from rewrite_tuner.prior_family import benchmark_rules
    from rewrite_tuner.scores import Baseline

    if len(seeds) < 2:
        raise StudyError(f"Calibration needs at least 2 seeds to measure noise, got {list(seeds)}.")
    config = SearchConfig(max_steps=int(max_steps), devices=int(devices))
    with timing_threads(bool(measure)):
        evidence, runs = benchmark_rules(
            graphs, config, seeds, device, measure=measure, workers=workers
        )
    baselines = {w: Baseline.of(rs) for w, rs in runs.items()}
    from rewrite.optimize import SuiteResult

    suite = SuiteResult(runs, tuple(int(s) for s in seeds), int(max_steps))
    per_seed = per_seed_objectives(suite, baselines)
    default = {k: [row[k] for row in per_seed] for k in per_seed[0]}
    noise = {k: float(np.std(v, ddof=1)) for k, v in default.items()}
    return Calibration(tuple(int(s) for s in seeds), baselines, evidence, default, noise)


@contextlib.contextmanager
def timing_threads(on: bool = True) -> Iterator[None]:
    """One CPU thread inside the block (`tuner.threads.one_thread`), the caller's settings
    restored on exit (an exception included); with ``on`` False nothing changes.

    A study times graphs inside it, for two reasons: the CPU-time clock holds while other
    workers share the machine, and the driving process, which calibrates before its process
    pool forks its workers, never starts an OpenMP thread team (libgomp is not fork-safe: a
    worker forked after one hangs at its first parallel kernel).
    """
    from tuner.threads import one_thread

    with one_thread() if on else contextlib.nullcontext():
        yield
