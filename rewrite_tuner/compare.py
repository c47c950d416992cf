"""Compare two search configurations on the same workloads and seeds, with intervals.

A tuning claim is a comparison against the defaults over several search seeds, on workloads
that were or were not tuned on; one seed proves nothing. `compare` runs both configurations on
every workload with the same seeds (common random numbers, so differences are paired by seed) and
reports, per workload and overall:

* ``reach``: the first step at which each run reaches the *reference* configuration's median
  final hypervolume (``budget + 1`` when it does not), its median over seeds with a bootstrap
  interval, and the ratio of the two medians (``< 1``: the candidate gets there sooner);
* ``anytime_hv`` and ``final_hv`` against that reference (`rewrite_tuner.scores.Baseline`);
* ``latency_reduction`` and ``peak_memory_reduction`` at the budget (``1 - best / input``);

each as a mean or median with a 95% interval, and the paired difference candidate - reference
with its interval. Intervals are percentile bootstraps over seeds with a fixed generator seed,
so a report repeats exactly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rewrite.errors import SearchError
from rewrite.ir import Graph
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.priors import RulePriors
from rewrite.optimize.suite import SuiteResult, search_suite
from rewrite.stats import Interval, interval
from rewrite_tuner.scores import Baseline, per_seed, run_scores

__all__ = ["Comparison", "Interval", "compare", "interval"]


@dataclass
class Comparison:
    """What `compare` measured.

    Attributes:
        seeds: The search seeds, shared by both configurations.
        budget: The step budget of every run.
        per_workload: Workload -> measure -> statistics (see `to_dict`).
        overall: Measure -> statistics over workloads (per-seed means over workloads).
        candidate: The candidate's suite result (None for one read back with `from_dict`).
        reference: The reference's suite result (None likewise).
    """

    seeds: tuple[int, ...]
    budget: int
    per_workload: dict[str, dict[str, dict[str, Any]]]
    overall: dict[str, dict[str, Any]]
    candidate: SuiteResult | None = field(default=None, repr=False)
    reference: SuiteResult | None = field(default=None, repr=False)

    def reach_ratio(self, workload: str | None = None) -> float:
        """Median steps for the candidate to reach the reference's final hypervolume over the
        reference's own (per workload, or the median of the workloads' ratios)."""
        if workload is not None:
            return float(self.per_workload[workload]["reach"]["ratio"])
        return float(np.median([w["reach"]["ratio"] for w in self.per_workload.values()]))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able form (no search results)."""
        return {
            "seeds": list(self.seeds),
            "budget": self.budget,
            "per_workload": self.per_workload,
            "overall": self.overall,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Comparison:
        """A comparison `to_dict` wrote (its figures; no search results)."""
        return cls(
            tuple(int(s) for s in d["seeds"]),
            int(d["budget"]),
            dict(d["per_workload"]),
            dict(d["overall"]),
        )


def _stats(cand: np.ndarray, ref: np.ndarray, seed: int, median: bool = False) -> dict[str, Any]:
    stat = np.median if median else np.mean
    return {
        "candidate": interval(cand, stat, seed).to_dict(),
        "reference": interval(ref, stat, seed + 1).to_dict(),
        "difference": interval(cand - ref, stat, seed + 2).to_dict(),
    }


def _reductions(suite: SuiteResult, workload: str) -> dict[str, np.ndarray]:
    out: dict[str, list[float]] = {}
    for r in suite.results[workload]:
        m = r.metrics()
        for name in ("latency", "peak_memory"):
            if f"best.{name}.ratio" in m:
                out.setdefault(f"{name}_reduction", []).append(1.0 - m[f"best.{name}.ratio"])
    return {k: np.array(v) for k, v in out.items()}


def compare(
    workloads: Mapping[str, Graph],
    candidate: tuple[SearchConfig, RulePriors | Mapping[str, float] | None],
    reference: tuple[SearchConfig, RulePriors | Mapping[str, float] | None],
    seeds: Sequence[int],
    device: Any = "h100",
    reference_result: SuiteResult | None = None,
    **kwargs: Any,
) -> Comparison:
    """Run both configurations on every workload and seed and compare them (module docstring).

    Args:
        workloads: Name -> graph.
        candidate: ``(config, priors)`` of the configuration under test.
        reference: ``(config, priors)`` to compare with (usually the defaults), with the same
            ``max_steps``.
        seeds: Search seeds, at least 2 for an interval.
        device: Cost-model device.
        reference_result: The reference's runs on these workloads and seeds, when already made
            (comparing several candidates with one reference).
        **kwargs: Passed to `rewrite.search` (``rules``, ``verify_cache``, ``executor``).

    Raises:
        SearchError: If the two step budgets differ, or no workload or seed is given.
    """
    (c_cfg, c_pri), (r_cfg, r_pri) = candidate, reference
    if c_cfg.max_steps != r_cfg.max_steps:
        raise SearchError(
            f"Both configurations need the same step budget, but got max_steps "
            f"{c_cfg.max_steps} and {r_cfg.max_steps}."
        )
    ref = reference_result or search_suite(workloads, r_cfg, r_pri, device, seeds, **kwargs)
    cand = search_suite(workloads, c_cfg, c_pri, device, seeds, **kwargs)
    baselines = {w: Baseline.of(runs) for w, runs in ref.results.items()}
    per = _per_workload(cand, ref, baselines)
    c_rows, r_rows = per_seed(cand, baselines), per_seed(ref, baselines)
    overall: dict[str, dict[str, Any]] = {
        name: _stats(
            np.array([row[name] for row in c_rows]),
            np.array([row[name] for row in r_rows]),
            7000 + 10 * k,
        )
        for k, name in enumerate(c_rows[0])
    }
    ratios = [row["reach"]["ratio"] for row in per.values()]
    overall["reach_ratio"] = {"median": float(np.median(ratios)), "max": float(np.max(ratios))}
    return Comparison(tuple(int(s) for s in seeds), ref.budget, per, overall, cand, ref)


def _per_workload(
    cand: SuiteResult, ref: SuiteResult, baselines: Mapping[str, Baseline]
) -> dict[str, dict[str, dict[str, Any]]]:
    """Per-workload statistics of `compare` (scores, reach with its ratio, reductions)."""
    c_scores, r_scores = run_scores(cand, baselines), run_scores(ref, baselines)
    per: dict[str, dict[str, dict[str, Any]]] = {}
    for j, w in enumerate(cand.results):
        row: dict[str, dict[str, Any]] = {}
        for k, name in enumerate(("anytime_hv", "final_hv", "reach")):
            c, r = c_scores[name][:, j], r_scores[name][:, j]
            row[name] = _stats(c, r, 100 * j + 10 * k, median=name == "reach")
        c_med, r_med = row["reach"]["candidate"]["value"], row["reach"]["reference"]["value"]
        row["reach"]["ratio"] = c_med / max(r_med, 1.0)
        row["reach"]["censored"] = int((c_scores["reach"][:, j] > cand.budget).sum())
        c_red, r_red = _reductions(cand, w), _reductions(ref, w)
        for k, name in enumerate(sorted(c_red)):
            row[name] = _stats(c_red[name], r_red[name], 100 * j + 50 + 10 * k)
        per[w] = row
    return per
