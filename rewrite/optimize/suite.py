"""Run one search configuration over a suite of workloads and search seeds, and score it.

`search_suite` is what a tuning trial calls: the same config and priors on every graph of the
suite, once per search seed (the same seeds for every configuration: common random numbers, so
two configurations are compared on the same draws). `SuiteResult.objectives()` gives aggregate
objectives and `SuiteResult.metrics()` the run metrics (for the structured surrogate).

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
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rewrite.errors import SearchError
from rewrite.ir import Graph
from rewrite.optimize.api import coerce_config, search
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.informed import RuleEvidence
from rewrite.optimize.priors import RulePriors
from rewrite.optimize.result import SearchResult
from rewrite.rules.base import Rule

__all__ = [
    "SCORES",
    "Baseline",
    "SearchJob",
    "SuiteResult",
    "benchmark_rules",
    "run_searches",
    "search_suite",
]

_SUMMED = ("time.", "cache.", "dropped.", "rule.", "work.")

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


@dataclass
class SuiteResult:
    """Per-workload, per-seed `SearchResult`s of one configuration.

    Attributes:
        results: Workload name -> one result per seed (in `seeds` order), in suite order.
        seeds: The search seeds.
        budget: The step budget (``max_steps``) the runs had.
    """

    results: dict[str, list[SearchResult]]
    seeds: tuple[int, ...]
    budget: int

    def extend(self, other: SuiteResult) -> SuiteResult:
        """This result with ``other``'s seeds appended (same workloads and budget).

        Raises:
            SearchError: If the workloads or budgets differ.
        """
        if list(other.results) != list(self.results) or other.budget != self.budget:
            raise SearchError(
                f"Only results of the same workloads and budget extend each other, but got "
                f"{list(self.results)} at {self.budget} steps and {list(other.results)} at "
                f"{other.budget}."
            )
        merged = {w: [*rs, *other.results[w]] for w, rs in self.results.items()}
        return SuiteResult(merged, self.seeds + other.seeds, self.budget)

    def runs(self) -> list[SearchResult]:
        """Every run, workload-major."""
        return [r for rs in self.results.values() for r in rs]

    def scores(self, baselines: Mapping[str, Baseline]) -> dict[str, np.ndarray]:
        """`SCORES` per run: name -> ``k x w`` array (seeds x workloads, suite order)."""
        missing = sorted(set(self.results) - set(baselines))
        if missing:
            raise SearchError(
                f"No baseline for workloads {missing}; baselines: {sorted(baselines)}."
            )
        k, names = len(self.seeds), list(self.results)
        out = {s: np.zeros((k, len(names))) for s in SCORES}
        for j, w in enumerate(names):
            for i, r in enumerate(self.results[w]):
                for s, v in baselines[w].score(r, self.budget).items():
                    out[s][i, j] = v
        return out

    def objectives(self, baselines: Mapping[str, Baseline] | None = None) -> dict[str, float]:
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
        per_seed = self.per_seed(baselines)
        out: dict[str, float] = {}
        for key in per_seed[0]:
            mean, sem = _mean_sem([row[key] for row in per_seed])
            out[key] = mean
            if len(per_seed) > 1:
                out[f"{key}.sem"] = sem
        return out

    def per_seed(self, baselines: Mapping[str, Baseline] | None = None) -> list[dict[str, float]]:
        """The objectives of `objectives`, one dict per seed (each a mean over workloads)."""
        per_seed: list[dict[str, float]] = []
        for i in range(len(self.seeds)):
            rs = [runs[i] for runs in self.results.values()]
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
            per_seed.append(row)
        if baselines is not None:
            for s, arr in self.scores(baselines).items():
                for i, row in enumerate(per_seed):
                    row[s] = float(arr[i].mean())
        return per_seed

    def per_run(
        self, baselines: Mapping[str, Baseline] | None = None
    ) -> dict[str, list[dict[str, float]]]:
        """The objectives of `per_seed` for each run alone: workload -> one dict per seed (in
        `seeds` order) with the run's own values (``latency_reduction``: one minus its best
        latency ratio; ``hypervolume``, ``search_time`` and, with ``baselines``, its `SCORES`),
        whose means over the workloads are `per_seed`'s."""
        scores = self.scores(baselines) if baselines is not None else {}
        out: dict[str, list[dict[str, float]]] = {}
        for j, (w, runs) in enumerate(self.results.items()):
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
                    key = (
                        "compiled_speedup" if r.measured_compiled else "measured_latency_reduction"
                    )
                    row[key] = 1.0 / measured if r.measured_compiled else 1.0 - measured
                row["hypervolume"] = float(r.hypervolume)
                row["search_time"] = float(r.wall_time)
                row.update({s: float(arr[i, j]) for s, arr in scores.items()})
                rows.append(row)
            out[w] = rows
        return out

    def metrics(self) -> dict[str, float]:
        """Run metrics summed over workloads and averaged over seeds, rates recomputed, plus
        per-workload summaries.

        Counters and times (``rule.*``, ``time.*``, ``cache.*.hits|misses``, ``dropped.*``,
        ``work.*``, ``steps``) are summed over workloads; ``cache.*.hit_rate`` and
        ``steps_per_s`` are recomputed from the sums; sizes are averaged;
        ``<workload>.hypervolume`` and ``<workload>.best.<objective>.ratio`` are kept per
        workload. Every figure is then averaged over the seeds, so trials run on different
        numbers of seeds report comparable numbers.
        """
        k = len(self.seeds)
        out: dict[str, float] = {}
        for i in range(k):
            for key, v in self._seed_metrics(i).items():
                out[key] = out.get(key, 0.0) + v / k
        return out

    def _seed_metrics(self, i: int) -> dict[str, float]:
        per = {w: rs[i].metrics() for w, rs in self.results.items()}
        out: dict[str, float] = {}
        for m in per.values():
            for key, v in m.items():
                if key.startswith(_SUMMED) and not key.endswith("hit_rate") or key == "steps":
                    out[key] = out.get(key, 0.0) + v
        for key in [key for key in out if key.endswith(".hits")]:
            base = key[: -len(".hits")]
            total = out[key] + out.get(f"{base}.misses", 0.0)
            out[f"{base}.hit_rate"] = out[key] / total if total else 0.0
        n = len(per)
        for key in ("population.size", "population.mean", "frontier.size", "frontier.mean"):
            out[key] = sum(m[key] for m in per.values()) / n
        out["steps_per_s"] = out["steps"] / max(out["time.total"], 1e-9)
        for w, m in per.items():
            out[f"{w}.hypervolume"] = m["hypervolume"]
            for key, v in m.items():
                if key.startswith("best."):
                    out[f"{w}.{key}"] = v
        return out


def search_suite(
    workloads: Mapping[str, Graph],
    config: SearchConfig | Mapping[str, Any] | None = None,
    priors: RulePriors | Mapping[str, float] | str | None = None,
    device: Any = "h100",
    seeds: Sequence[int] | None = None,
    workers: int = 1,
    **kwargs: Any,
) -> SuiteResult:
    """Run `rewrite.search` with the same config and priors on every workload and seed.

    Args:
        workloads: Name -> graph (e.g. ``{"gpt2": rewrite.zoo.build("gpt2")}``).
        config: Search config (or dict of knobs), shared by all workloads.
        priors: Rule priors, shared by all workloads.
        device: Cost-model device.
        seeds: Search seeds (replacing ``config.seed``); default ``(config.seed,)``.
        workers: Run the searches on this many processes at once (`run_searches`; the results
            are the same as one after the other).
        **kwargs: Passed to `rewrite.search` (``executor``, ``rules``, ``verify_cache``,
            ``measure``: re-time every result's Pareto graphs, see `SearchResult.measure`).

    Raises:
        SearchError: If ``workloads`` or ``seeds`` is empty.
    """
    if not workloads:
        raise SearchError("search_suite needs at least one workload, but got none.")
    source = str(priors) if isinstance(priors, str | os.PathLike) else None
    priors = RulePriors.coerce(priors)
    config = coerce_config(config, priors, source)
    priors = priors.without_search_config()  # merged into config once, here
    seeds = tuple(int(s) for s in (seeds if seeds is not None else (config.seed,)))
    if not seeds:
        raise SearchError("search_suite needs at least one seed, but got none.")
    jobs = [
        (g, config.replace(seed=s), priors, device, kwargs)
        for g in workloads.values()
        for s in seeds
    ]
    results = iter(run_searches(jobs, workers))
    return SuiteResult(
        {name: [next(results) for _ in seeds] for name in workloads}, seeds, config.max_steps
    )


SearchJob = tuple[Graph, SearchConfig, Any, Any, Mapping[str, Any]]
"""``(graph, config, priors, device, search keyword arguments)`` of one `rewrite.search`."""


def _run_job(job: SearchJob) -> SearchResult:
    graph, config, priors, device, kwargs = job
    return search(graph, config, priors, device, **kwargs)


_FORKED: list[SearchJob] = []  # the jobs a forked pool's workers read (inherited, not sent)


def _run_forked(i: int) -> SearchResult:
    return _run_job(_FORKED[i])


def run_searches(jobs: Sequence[SearchJob], workers: int = 1) -> list[SearchResult]:
    """The results of ``jobs``, in order: one after the other, or on up to ``workers``
    processes at once (each search is seeded, so the results are the same). Searches that run
    islands themselves (an ``executor``, ``workers > 1`` in their config) run one after the other.

    With ``fork`` the workers inherit the jobs (graphs are not copied through a pipe, and their
    cost and match caches come warm), and each takes a contiguous share, so one graph's seeds
    run in one process and reuse what its first search computed.

    Raises:
        SearchError: If a search fails (in a worker process too).
    """
    import concurrent.futures as cf
    import multiprocessing

    parallel = workers > 1 and len(jobs) > 1
    parallel &= all("executor" not in j[4] and j[1].workers == 1 for j in jobs)
    if not parallel:
        return [_run_job(j) for j in jobs]
    if not any("rules" in j[4] for j in jobs):
        from rewrite.optimize.runner import default_rules

        default_rules()  # verified once here, inherited by the forked workers
    n = min(workers, len(jobs))
    chunk = -(-len(jobs) // n)
    if "fork" not in multiprocessing.get_all_start_methods():
        with cf.ProcessPoolExecutor(max_workers=n) as pool:
            return list(pool.map(_run_job, jobs, chunksize=chunk))
    _FORKED[:] = list(jobs)
    try:
        ctx = multiprocessing.get_context("fork")
        with cf.ProcessPoolExecutor(max_workers=n, mp_context=ctx) as pool:
            return list(pool.map(_run_forked, range(len(jobs)), chunksize=chunk))
    finally:
        _FORKED.clear()


def benchmark_rules(
    workloads: Mapping[str, Graph],
    config: SearchConfig,
    seeds: Sequence[int],
    device: Any = "h100",
    rules: Sequence[Rule] | None = None,
    measure: bool | str = False,
    workers: int = 1,
) -> tuple[RuleEvidence, dict[str, list[SearchResult]]]:
    """Offline benchmarking of rules: search every workload with every seed, count the evidence.

    Args:
        workloads: Name -> graph of the training suite.
        config: The search config (its ``seed`` is replaced by each of ``seeds``); uniform priors.
        seeds: Search seeds.
        device: Cost-model device.
        rules: The rules (default: the verified catalogue).
        measure: Re-time every result's Pareto graphs (`rewrite.search`'s ``measure``).
        workers: Searches run at once (`run_searches`).

    Returns:
        The evidence, and the results by workload (one per seed, in ``seeds`` order).
    """
    kwargs: dict[str, Any] = {"measure": measure, **({"rules": rules} if rules is not None else {})}
    jobs = [
        (g, config.replace(seed=int(s)), None, device, kwargs)
        for g in workloads.values()
        for s in seeds
    ]
    done = iter(run_searches(jobs, 1 if measure else workers))  # timings want the CPU alone
    results = {w: [next(done) for _ in seeds] for w in workloads}
    return RuleEvidence.from_results(r for rs in results.values() for r in rs), results
