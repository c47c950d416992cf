"""Scores of a suite of searches against a `Baseline`: the tuning side's objectives.

A tuning trial runs one configuration over a suite of workloads and search seeds
(`rewrite.optimize.suite.search_suite`); these functions turn its `SuiteResult` into the
objectives a tuner reads. `suite_objectives` gives aggregate objectives, `per_seed` and `per_run`
the same per seed and per run.

Scores against a `Baseline` (what the default configuration achieves on a workload) measure what
a configuration changes, in deterministic units:

* ``anytime_hv``: the normalized area under the hypervolume-vs-steps curve,
  ``mean_{t=1..B} (hv(t) - hv_input) / (hv_base - hv_input)`` for a step budget ``B``: 1 means
  the default's final hypervolume from the first step on; the default itself scores below 1;
* ``final_hv``: the same ratio at the budget;
* ``effort``: rewrites applied plus verifier checks, over the default's (1 = as much work);
* ``reach``: the first step at which the hypervolume reaches the default's final value
  (``B + 1`` when it does not within the budget).

Each is averaged over the workloads for every seed, then over seeds, with the standard error of
that mean over seeds (``<name>.sem``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rewrite.errors import SearchError
from rewrite.optimize.result import SearchResult
from rewrite.optimize.suite import SuiteResult

__all__ = [
    "REACH_RTOL",
    "SCORES",
    "Baseline",
    "effort",
    "per_run",
    "per_seed",
    "run_scores",
    "suite_objectives",
]

SCORES = ("anytime_hv", "final_hv", "effort", "reach")
"""Scores against a `Baseline`, per run (see the module docstring)."""

#: Relative tolerance of "reached the baseline's final hypervolume" (float sums differ in order).
REACH_RTOL = 1e-9


@dataclass(frozen=True)
class Baseline:
    """What the default configuration achieves on one workload at one step budget.

    Attributes:
        hv_input: Hypervolume of the input graph alone.
        hv_final: Median final hypervolume of the default configuration over its seeds.
        effort: Median effort (rewrites applied plus verifier checks) of those runs.
    """

    hv_input: float
    hv_final: float
    effort: float

    def to_dict(self) -> dict[str, float]:
        """JSON-able form."""
        return {"hv_input": self.hv_input, "hv_final": self.hv_final, "effort": self.effort}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Baseline:
        """Read `to_dict`'s form.

        Raises:
            SearchError: On missing or non-finite numbers.
        """
        try:
            b = cls(float(d["hv_input"]), float(d["hv_final"]), float(d["effort"]))
        except (KeyError, TypeError, ValueError) as err:
            raise SearchError(f"A baseline needs hv_input, hv_final and effort: {err!r}.") from None
        if not all(math.isfinite(v) for v in (b.hv_input, b.hv_final, b.effort)):
            raise SearchError(f"A baseline's numbers must be finite, but got {b}.")
        return b

    @classmethod
    def of(cls, runs: Sequence[SearchResult]) -> Baseline:
        """The baseline measured by ``runs`` of the default configuration (one per seed)."""
        if not runs:
            raise SearchError("A baseline needs at least one run, but got none.")
        return cls(
            float(runs[0].hv_trace[0][2]),
            float(np.median([r.hypervolume for r in runs])),
            float(np.median([effort(r) for r in runs])),
        )

    def score(self, result: SearchResult, budget: int) -> dict[str, float]:
        """`SCORES` of one run at a step budget of ``budget``."""
        curve = result.hv_curve(budget)
        gain = max(self.hv_final - self.hv_input, 1e-12)
        u = (curve - self.hv_input) / gain
        hit = np.flatnonzero(curve >= self.hv_final * (1.0 - REACH_RTOL))
        return {
            "anytime_hv": float(u[1:].mean()) if budget > 0 else float(u[-1]),
            "final_hv": float(u[-1]),
            "effort": effort(result) / max(self.effort, 1.0),
            "reach": float(hit[0]) if hit.size else float(budget + 1),
        }


def effort(result: SearchResult) -> float:
    """Work units of a run: rewrites applied plus verifier checks (deterministic, unlike
    seconds)."""
    m = result.metrics()
    return m["work.rewrites"] + m["work.checks"]


def _gmean(xs: Sequence[float]) -> float:
    xs = [max(x, 1e-300) for x in xs]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def _mean_sem(values: Sequence[float]) -> tuple[float, float]:
    """Mean and standard error of the mean (NaN with fewer than two values)."""
    a = np.asarray(values, dtype=np.float64)
    sem = float(a.std(ddof=1) / math.sqrt(a.size)) if a.size > 1 else float("nan")
    return float(a.mean()), sem


def run_scores(suite: SuiteResult, baselines: Mapping[str, Baseline]) -> dict[str, np.ndarray]:
    """`SCORES` of every run of ``suite``: name -> ``k x w`` array (seeds x workloads, suite order)."""
    missing = sorted(set(suite.results) - set(baselines))
    if missing:
        raise SearchError(f"No baseline for workloads {missing}; baselines: {sorted(baselines)}.")
    k, names = len(suite.seeds), list(suite.results)
    out = {s: np.zeros((k, len(names))) for s in SCORES}
    for j, w in enumerate(names):
        for i, r in enumerate(suite.results[w]):
            for s, v in baselines[w].score(r, suite.budget).items():
                out[s][i, j] = v
    return out


def suite_objectives(
    suite: SuiteResult, baselines: Mapping[str, Baseline] | None = None
) -> dict[str, float]:
    """Aggregate objectives, each averaged over seeds.

    Returns:
        ``latency_reduction`` and ``peak_memory_reduction``: one minus the geometric mean over
        workloads of (best value / input value), when those are objectives of the search;
        ``measured_latency_reduction``: the same from measured latencies, when every run
        was measured (``measure=True``; `SearchResult.measured_ratio`), or
        ``compiled_speedup``, the input's latency over the best graph's, both compiled by
        ``torch.compile``, when every run was measured so (``measure="compile"``);
        ``hypervolume``:
        mean normalized hypervolume; ``search_time``: wall seconds per seed (all workloads).
        With ``baselines``, also ``anytime_hv``, ``final_hv``, ``effort`` and ``reach`` (see
        the module docstring), and ``<name>.sem`` for each objective.
    """
    rows = per_seed(suite, baselines)
    out: dict[str, float] = {}
    for key in rows[0]:
        mean, sem = _mean_sem([row[key] for row in rows])
        out[key] = mean
        if len(rows) > 1:
            out[f"{key}.sem"] = sem
    return out


def per_seed(
    suite: SuiteResult, baselines: Mapping[str, Baseline] | None = None
) -> list[dict[str, float]]:
    """The objectives of `suite_objectives`, one dict per seed (each a mean over workloads)."""
    rows: list[dict[str, float]] = []
    for i in range(len(suite.seeds)):
        rs = [runs[i] for runs in suite.results.values()]
        row: dict[str, float] = {}
        for name in ("latency", "peak_memory"):
            if all(name in r.objectives for r in rs):
                ratios = [r.metrics()[f"best.{name}.ratio"] for r in rs]
                row[f"{name}_reduction"] = 1.0 - _gmean(ratios)
        measured = [r.measured_ratio() for r in rs]
        if all(m is not None for m in measured):
            ratio = _gmean(measured)  # type: ignore[arg-type]
            if all(r.measured_compiled for r in rs):
                row["compiled_speedup"] = 1.0 / ratio
            else:
                row["measured_latency_reduction"] = 1.0 - ratio
        row["hypervolume"] = sum(r.hypervolume for r in rs) / len(rs)
        row["search_time"] = sum(r.wall_time for r in rs)
        rows.append(row)
    if baselines is not None:
        for s, arr in run_scores(suite, baselines).items():
            for i, row in enumerate(rows):
                row[s] = float(arr[i].mean())
    return rows


def per_run(
    suite: SuiteResult, baselines: Mapping[str, Baseline] | None = None
) -> dict[str, list[dict[str, float]]]:
    """The objectives of `per_seed` for each run alone: workload -> one dict per seed (in
    `seeds` order) with the run's own values (``latency_reduction``: one minus its best
    latency ratio; ``hypervolume``, ``search_time`` and, with ``baselines``, its `SCORES`),
    whose means over the workloads are `per_seed`'s."""
    scores = run_scores(suite, baselines) if baselines is not None else {}
    out: dict[str, list[dict[str, float]]] = {}
    for j, (w, runs) in enumerate(suite.results.items()):
        rows = []
        for i, r in enumerate(runs):
            m = r.metrics()
            row = {
                f"{name}_reduction": 1.0 - m[f"best.{name}.ratio"]
                for name in ("latency", "peak_memory")
                if name in r.objectives
            }
            measured = r.measured_ratio()
            if measured is not None:
                key = "compiled_speedup" if r.measured_compiled else "measured_latency_reduction"
                row[key] = 1.0 / measured if r.measured_compiled else 1.0 - measured
            row["hypervolume"] = float(r.hypervolume)
            row["search_time"] = float(r.wall_time)
            row.update({s: float(arr[i, j]) for s, arr in scores.items()})
            rows.append(row)
        out[w] = rows
    return out
