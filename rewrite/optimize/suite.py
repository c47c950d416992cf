"""Run one search configuration over a suite of workloads and search seeds.

`search_suite` runs the same config and priors on every graph of the suite, once per search seed
(the same seeds for every configuration: common random numbers, so two configurations are
compared on the same draws), on one process or several (`run_searches`). `SuiteResult.metrics()`
gives the run metrics summed over workloads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewrite.errors import SearchError
from rewrite.ir import Graph
from rewrite.optimize.api import search, search_inputs
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.priors import PriorsLike
from rewrite.optimize.result import SearchResult

__all__ = ["SearchJob", "SuiteResult", "run_searches", "search_suite"]

_SUMMED = ("time.", "cache.", "dropped.", "rule.", "work.")


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
    priors: PriorsLike = None,
    device: Any = "h100",
    seeds: Sequence[int] | None = None,
    workers: int = 1,
    **kwargs: Any,
) -> SuiteResult:
    """Run `rewrite.search` with the same config and priors on every workload and seed.

    Args:
        workloads: Name -> graph (e.g. ``{"gpt2": rewrite.zoo.build("gpt2")}``).
        config: Search config (or dict of knobs), shared by all workloads.
        priors: Rule priors, shared by all workloads (as `rewrite.search` takes them; a tuned
            search's knobs merge into ``config`` once, here).
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
    config, rule_priors = search_inputs(config, priors)  # a priors file's knobs merge here, once
    seeds = tuple(int(s) for s in (seeds if seeds is not None else (config.seed,)))
    if not seeds:
        raise SearchError("search_suite needs at least one seed, but got none.")
    jobs = [
        (g, config.replace(seed=s), rule_priors, device, kwargs)
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
