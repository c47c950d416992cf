"""Run one search configuration over a suite of workloads and aggregate what a study needs.

`search_suite` is what a tuning trial calls: the same config and priors on every graph of the
suite; `SuiteResult.objectives()` gives aggregate objectives and `SuiteResult.metrics()` the run
metrics summed over workloads (for the structured surrogate), plus per-workload summaries.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rewrite.errors import SearchError
from rewrite.ir import Graph
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.priors import RulePriors
from rewrite.optimize.result import SearchResult

__all__ = ["SuiteResult", "search_suite"]

_SUMMED = ("time.", "cache.", "dropped.", "rule.")


def _gmean(xs: list[float]) -> float:
    xs = [max(x, 1e-300) for x in xs]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


@dataclass
class SuiteResult:
    """Per-workload `SearchResult`s of one configuration.

    Attributes:
        results: Workload name -> its search result, in suite order.
    """

    results: dict[str, SearchResult]

    def objectives(self) -> dict[str, float]:
        """Aggregate objectives over the suite.

        Returns:
            ``latency_reduction`` and ``peak_memory_reduction``: one minus the geometric mean over
            workloads of (best value / input value), when those are objectives of the search
            (higher is better); ``hypervolume``: mean normalized hypervolume (higher is better);
            ``search_time``: total wall seconds (lower is better).
        """
        rs = list(self.results.values())
        out: dict[str, float] = {}
        for name in ("latency", "peak_memory"):
            if all(name in r.objectives for r in rs):
                ratios = [r.metrics()[f"best.{name}.ratio"] for r in rs]
                out[f"{name}_reduction"] = 1.0 - _gmean(ratios)
        out["hypervolume"] = sum(r.hypervolume for r in rs) / len(rs)
        out["search_time"] = sum(r.wall_time for r in rs)
        return out

    def metrics(self) -> dict[str, float]:
        """Run metrics summed over workloads, rates recomputed, and per-workload summaries.

        Counters and times (``rule.*``, ``time.*``, ``cache.*.hits|misses``, ``dropped.*``,
        ``steps``) are summed; ``cache.*.hit_rate`` and ``steps_per_s`` are recomputed from the
        sums; sizes are averaged; ``<workload>.hypervolume`` and ``<workload>.best.<objective>.ratio``
        are kept per workload.
        """
        per = {w: r.metrics() for w, r in self.results.items()}
        out: dict[str, float] = {}
        for m in per.values():
            for k, v in m.items():
                if k.startswith(_SUMMED) and not k.endswith("hit_rate") or k == "steps":
                    out[k] = out.get(k, 0.0) + v
        for k in [k for k in out if k.endswith(".hits")]:
            base = k[: -len(".hits")]
            total = out[k] + out.get(f"{base}.misses", 0.0)
            out[f"{base}.hit_rate"] = out[k] / total if total else 0.0
        n = len(per)
        for k in ("population.size", "population.mean", "frontier.size", "frontier.mean"):
            out[k] = sum(m[k] for m in per.values()) / n
        out["steps_per_s"] = out["steps"] / max(out["time.total"], 1e-9)
        for w, m in per.items():
            out[f"{w}.hypervolume"] = m["hypervolume"]
            for k, v in m.items():
                if k.startswith("best."):
                    out[f"{w}.{k}"] = v
        return out


def search_suite(
    workloads: Mapping[str, Graph],
    config: SearchConfig | Mapping[str, Any] | None = None,
    priors: RulePriors | Mapping[str, float] | str | None = None,
    device: Any = "h100",
    **kwargs: Any,
) -> SuiteResult:
    """Run `rewrite.search` with the same config and priors on every workload.

    Args:
        workloads: Name -> graph (e.g. ``{"gpt2": rewrite.zoo.build("gpt2")}``).
        config: Search config (or dict of knobs), shared by all workloads.
        priors: Rule priors, shared by all workloads.
        device: Cost-model device.
        **kwargs: Passed to `rewrite.search` (``executor``, ``rules``, ``verify_cache``).

    Raises:
        SearchError: If ``workloads`` is empty.
    """
    from rewrite.optimize.api import search

    if not workloads:
        raise SearchError("search_suite needs at least one workload, but got none.")
    return SuiteResult(
        {name: search(g, config, priors, device, **kwargs) for name, g in workloads.items()}
    )
