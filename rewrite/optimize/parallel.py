"""Island parallelism through any `concurrent.futures.Executor`.

Each island is an `Engine` with its own population, credit and generator. The driver hands out
work items: "run island ``i`` for up to ``island_steps`` steps (or until the time budget ends),
starting from this state, after importing these frontier graphs". Whenever any item finishes,
the driver merges that island's frontier improvements into the global frontier (union plus a
non-dominated filter: commutative and idempotent, so arrival order does not matter) and
immediately submits the island's next item with the global improvements it has not seen. Work
is thus distributed dynamically to whichever worker is free, never split statically, and
islands exchange nothing but frontier improvements.

Nothing heavier than rewrite histories crosses process boundaries: a state holds each graph as
its rewrite sequence from the input. A worker keeps the input graph, the rules and a cache of
rebuilt graphs per run (per thread, so thread-based executors are safe), and rebuilds a graph it
has not seen by replaying the shortest missing suffix of its history. What is verified travels
as each entry's `Verification` record: a report carries its verified prefix (``verified_upto``,
the record's ``upto``), a
replay extends the cached prefix's record (so a graph rebuilt from an unverified ancestor keeps
that ancestor's pending checks), and a report that a prefix is verified advances the record of
the cached entry. Verification verdicts are shared through the on-disk
`rewrite.verify.VerdictCache` of the host.

Unlike an in-process run, a parallel run is not bit-for-bit repeatable: which island result
arrives first depends on the scheduler.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.reduction import ForkingPickler
from typing import Any

import numpy as np

from rewrite.costmodel import cost
from rewrite.errors import GraphError, SearchError
from rewrite.ir import Graph
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.engine import Context, Engine, Entry, StepStrategy, Stochastic
from rewrite.optimize.matching import inherit_sites
from rewrite.optimize.pareto import hypervolume, truncate_by_crowding
from rewrite.optimize.result import RunStats, SearchResult, Step
from rewrite.optimize.runner import (
    build_result,
    converged,
    loop_deadline,
    make_verifier,
    mesh_rules,
    rules_from_source,
)
from rewrite.optimize.state import Verification
from rewrite.rules.base import Rule

__all__ = ["EntrySpec", "IslandReport", "IslandTask", "run_island", "run_parallel"]

_CACHE_ENTRIES = 4096


@dataclass(frozen=True)
class EntrySpec:
    """A graph as its rewrite history: enough to rebuild it anywhere.

    Attributes:
        steps: Rewrites from the input graph.
        verified_upto: How many leading steps are verified (its entry's record's ``upto``).
        y: Raw objective values.
        feasible: Inside the constraint region.
    """

    steps: tuple[Step, ...]
    verified_upto: int
    y: tuple[float, ...]
    feasible: bool

    @property
    def verified(self) -> bool:
        """Whether every step is verified."""
        return self.verified_upto == len(self.steps)


@dataclass
class IslandState:
    """What an island carries between work items."""

    population: list[EntrySpec]
    frontier: list[EntrySpec]
    credit: np.ndarray
    rng_state: dict[str, Any]


@dataclass
class IslandTask:
    """One work item (see the module docstring)."""

    run_id: str
    graph_json: str
    rules: Any  # a picklable list of rules, or ("catalogue", max_fuse)
    prior: np.ndarray
    config: dict[str, Any]
    device: Any
    verify_cache: Any
    strategy: StepStrategy
    island: int
    seed: Any
    steps: int
    seconds: float | None
    state: IslandState | None
    imports: list[EntrySpec] = field(default_factory=list)


@dataclass
class IslandReport:
    """What a work item returns."""

    island: int
    state: IslandState
    improvements: list[EntrySpec]
    stats: RunStats
    steps: int
    exhausted: bool
    population: int


# ---------------------------------------------------------------------- worker side
def _spec(e: Entry) -> EntrySpec:
    """What an island reports of an entry: its history and its record's verified prefix."""
    return EntrySpec(e.steps, e.verified_upto, tuple(float(v) for v in e.y), e.feasible)


class _Runtime:
    """Per-thread worker state of one run: context, rebuilt graphs, seen hashes."""

    def __init__(self, task: IslandTask) -> None:
        from rewrite.serialize import from_json

        cfg = SearchConfig.from_dict(task.config)
        graph = from_json(task.graph_json)
        rules = mesh_rules(rules_from_source(task.rules), cfg.devices)
        verifier = make_verifier(cfg.seed, task.verify_cache)
        self.run_id = task.run_id
        self.ctx = Context(graph, rules, task.prior, cfg, task.device, verifier)
        self.by_name = {r.name: r for r in rules}
        self.entries: OrderedDict[tuple[Step, ...], Entry] = OrderedDict()
        self.seen: frozenset[bytes] = frozenset()
        self.root: Entry | None = None

    def remember(self, e: Entry) -> None:
        self.entries[e.steps] = e
        self.entries.move_to_end(e.steps)
        while len(self.entries) > _CACHE_ENTRIES:
            self.entries.popitem(last=False)

    def rebuild(self, spec: EntrySpec, engine: Engine) -> Entry | None:
        """The entry for ``spec``: cached, or replayed from its longest cached prefix.

        Its `Verification` record extends the prefix's record by the replayed steps' checks, and
        both records take the ``spec.verified_upto`` steps another island verified. ``engine``
        computes (and counts) the site table of the prefix it replays from.
        """
        hit = self.entries.get(spec.steps)
        if hit is not None:
            hit.record.advance(spec.verified_upto)  # another island's checks count here too
            return hit
        k = len(spec.steps)
        while k > 0 and spec.steps[:k] not in self.entries:
            k -= 1
        base = self.entries[spec.steps[:k]] if k else self.root
        assert base is not None
        base.record.advance(spec.verified_upto)
        graph, c, sites = base.graph, base.cost, engine.sites_of(base)
        checks = []
        for step in spec.steps[k:]:
            rule = self.by_name[step.rule]
            try:
                new = rule.apply(graph, step.site)
            except Exception:  # noqa: BLE001 - a history that no longer replays is dropped
                return None
            checks.append((rule, graph, step.site))
            c = cost(new, self.ctx.device, base=c)
            sites, _ = inherit_sites(self.ctx.rules, sites, new, self.ctx.radius)
            graph = new
        try:
            costs, y, ok = self.ctx.measure(graph, c, spec.steps)
        except GraphError:
            return None
        record = Verification.extend(base.record, checks)  # the cached prefix's checks too
        record.advance(spec.verified_upto)
        e = Entry(graph, c, y, spec.steps, ok, record, sites=sites, costs=costs)
        self.remember(e)
        return e


_LOCAL = threading.local()


def _runtime(task: IslandTask) -> _Runtime:
    rt = getattr(_LOCAL, "rt", None)
    if rt is None or rt.run_id != task.run_id:
        rt = _LOCAL.rt = _Runtime(task)
    return rt


def _restore(rt: _Runtime, task: IslandTask) -> Engine:
    """The island's engine: a fresh one, then its carried state and the imported graphs.

    The worker's root entry and seen digests are shared by every item it runs (so islands on one
    worker never re-evaluate each other's graphs).
    """
    engine = Engine(rt.ctx, task.seed, task.strategy)
    fresh = engine.state()
    if rt.root is None:
        rt.root = fresh.root
        rt.remember(fresh.root)
    root = rt.root
    st = task.state
    state = replace(fresh, root=root, seen=rt.seen | {root.graph.digest})
    if st is None:
        state = replace(state, population=(root,), frontier=(root,) if root.feasible else ())
    else:
        pop = [rt.rebuild(s, engine) for s in st.population]
        front = [rt.rebuild(s, engine) for s in st.frontier]
        state = replace(
            state,
            population=tuple(e for e in pop if e is not None) or (root,),
            frontier=tuple(e for e in front if e is not None),
            credit=tuple(float(c) for c in st.credit),
            rng_state=st.rng_state,
        )
    engine.restore(state)
    for spec in task.imports:
        e = rt.rebuild(spec, engine)
        if e is not None and e.verified:
            engine.import_entry(e)  # an imported entry is never reported back as an improvement
    return engine


def run_island(task: IslandTask) -> IslandReport:
    """Run one work item (module-level so executors can pickle it)."""
    rt = _runtime(task)
    engine = _restore(rt, task)
    t0 = time.perf_counter()
    done = 0
    while done < task.steps and not engine.exhausted:
        if task.seconds is not None and time.perf_counter() - t0 >= task.seconds:
            break
        engine.step()
        done += 1
    end = engine.state()
    rt.seen = end.seen
    for e in end.population:
        rt.remember(e)
    state = IslandState(
        [_spec(e) for e in end.population],
        [_spec(e) for e in end.frontier],
        np.array(end.credit, dtype=np.float64),
        dict(end.rng_state),
    )
    improvements = [_spec(e) for e in end.improvements if e in end.frontier]
    return IslandReport(
        task.island,
        state,
        improvements,
        engine.stats,
        done,
        end.exhausted,
        len(end.population),
    )


# ---------------------------------------------------------------------- driver side
class _Global:
    """The driver's merged frontier, hypervolume trace and counters."""

    def __init__(self, ctx: Context, t0: float) -> None:
        self.ctx, self.t0 = ctx, t0
        _, y, root_ok = ctx.measure(ctx.graph, ctx.input_cost, ())
        root = EntrySpec((), 0, tuple(float(v) for v in y), root_ok)
        self.frontier: list[EntrySpec] = [root] if root_ok else []
        self.origin: dict[tuple[Step, ...], int] = {(): -1}
        self.steps = 0
        self.hv = self._hv()
        self.trace: list[tuple[int, float, float]] = [(0, 0.0, self.hv)]
        self.stats = RunStats()

    def _norm(self, specs: Sequence[EntrySpec]) -> np.ndarray:
        k = len(self.ctx.objectives)
        if not specs:
            return np.zeros((0, k))
        return np.array([s.y for s in specs]) / self.ctx.scale

    def _hv(self) -> float:
        return hypervolume(self._norm(self.frontier), self.ctx.ref)

    def merge(self, island: int, specs: Sequence[EntrySpec]) -> None:
        """Union plus non-dominated filter (then crowding truncation to the archive size)."""
        changed = False
        for s in specs:
            y = np.array(s.y)
            if any(np.all(np.array(f.y) <= y) for f in self.frontier):
                continue
            self.frontier = [f for f in self.frontier if not np.all(y <= np.array(f.y))]
            self.frontier.append(s)
            self.origin.setdefault(s.steps, island)
            changed = True
        cap = self.ctx.config.archive_size
        if len(self.frontier) > cap:
            idx = truncate_by_crowding(self._norm(self.frontier), cap)
            self.frontier = [self.frontier[i] for i in idx]
        if changed:
            self.hv = self._hv()
            self.trace.append((self.steps, time.perf_counter() - self.t0, self.hv))


def _make_executor(cfg: SearchConfig) -> cf.Executor:
    """The default island pool: ``cfg.workers`` processes (at most `pool_size`) started with
    ``fork`` where the platform has it (else its default, ``spawn``), chosen for this pool only
    (never `multiprocessing`'s global start method).

    ``fork`` because a worker then starts with the engine, torch and the rules already imported
    (a spawned one re-imports them). A process that has run an OpenMP
    parallel region must not fork (libgomp is not fork-safe: the child hangs at its first
    parallel kernel). For another start method pass ``rewrite.search(...,
    executor=ProcessPoolExecutor(mp_context=multiprocessing.get_context("spawn")))``.
    """
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    ctx = multiprocessing.get_context(method)
    return cf.ProcessPoolExecutor(max_workers=pool_size(cfg.workers), mp_context=ctx)


#: The island pool runs at most this many processes per CPU (more islands share them).
PROCESSES_PER_CPU = 4


def pool_size(islands: int) -> int:
    """Processes of the default island pool: one per island, at most `PROCESSES_PER_CPU` per CPU
    of the machine (a process per island of ``workers=4096`` would exhaust its memory; the
    islands' work items queue on the processes there are)."""
    return max(1, min(islands, PROCESSES_PER_CPU * (os.cpu_count() or 1)))


class _Driver:
    """Hands out work items and merges their reports (see the module docstring)."""

    def __init__(self, ctx: Context, pool: cf.Executor, base: dict[str, Any], t0: float) -> None:

        cfg = ctx.config
        self.cfg, self.pool, self.base, self.t0 = cfg, pool, base, t0
        self.end = loop_deadline(cfg, t0)
        self.glob = _Global(ctx, t0)
        self.seeds = np.random.SeedSequence(cfg.seed).spawn(cfg.workers)
        self.sent: dict[int, set[tuple[Step, ...]]] = {i: set() for i in range(cfg.workers)}
        self.pops: dict[int, int] = {}
        self.exhausted: set[int] = set()
        self.assigned = 0
        self.reason = "steps"

    def submit(self, i: int, state: IslandState | None) -> cf.Future:
        """Send island ``i`` its next work item with the improvements it has not seen."""
        cfg, glob = self.cfg, self.glob
        n = min(cfg.island_steps, cfg.max_steps - self.assigned)
        self.assigned += n
        left = None
        if self.end is not None:
            left = max(self.end - time.perf_counter(), 0.0)
        imports = [
            s
            for s in glob.frontier
            if s.steps and s.steps not in self.sent[i] and glob.origin.get(s.steps) != i
        ]
        self.sent[i].update(s.steps for s in imports)
        task = IslandTask(
            island=i,
            seed=self.seeds[i],
            steps=n,
            seconds=left,
            state=state,
            imports=imports,
            **self.base,
        )
        return self.pool.submit(run_island, task)

    def handle(self, i: int, rep: IslandReport) -> bool:
        """Merge a report; returns whether island ``i`` gets another work item."""

        glob, cfg = self.glob, self.cfg
        glob.steps += rep.steps
        glob.stats.merge(rep.stats)
        glob.merge(i, rep.improvements)
        self.pops[i] = rep.population
        if rep.exhausted:
            self.exhausted.add(i)
        stop = None
        if self.end is not None and time.perf_counter() >= self.end:
            stop = "time"
        elif len(self.exhausted) == cfg.workers:
            stop = "exhausted"
        elif converged(glob.trace, glob.steps, cfg.window, cfg.epsilon):
            stop = "converged"
        elif self.assigned >= cfg.max_steps:
            stop = "steps"
        if stop is not None and stop != "steps":
            self.reason = stop
        return stop is None

    def run(self) -> None:
        """Keep every island busy until a stop rule fires, then wait for the last items."""
        futures = {self.submit(i, None): i for i in range(self.cfg.workers)}
        while futures:
            done, _ = cf.wait(futures, return_when=cf.FIRST_COMPLETED)
            for fut in done:
                i = futures.pop(fut)
                try:
                    rep: IslandReport = fut.result()
                except Exception as err:
                    raise SearchError(f"island {i} failed in its worker: {err!r}") from err
                if self.handle(i, rep):
                    futures[self.submit(i, rep.state)] = i


def run_parallel(
    graph: Graph,
    cfg: SearchConfig,
    rules: list[Rule],
    prior: np.ndarray,
    device: Any,
    executor: cf.Executor | None,
    verify_cache: Any,
    rule_source: Any,
    t0: float | None = None,
    strategy: StepStrategy | None = None,
) -> SearchResult:
    """Run ``cfg.workers`` islands through ``executor`` (a local process pool when None).

    ``t0`` is when the call started (`time.perf_counter`; default now): the time budget runs
    from it. ``strategy`` is the `StepStrategy` every island steps (picklable for worker
    processes; None: `Stochastic`).

    Raises:
        SearchError: If a work item fails in a worker.
    """
    from rewrite.serialize import to_json

    t0 = time.perf_counter() if t0 is None else t0
    ctx = Context(graph, rules, prior, cfg, device, make_verifier(cfg.seed, verify_cache))
    pool = _make_executor(cfg) if executor is None else executor
    base = {
        "run_id": f"{os.getpid()}-{time.time_ns()}",
        "graph_json": to_json(graph),
        "rules": rule_source,
        "prior": prior,
        "config": cfg.to_dict(),
        "device": device,
        "verify_cache": verify_cache,
        "strategy": Stochastic() if strategy is None else strategy,
    }
    driver = _Driver(ctx, pool, base, t0)
    try:
        driver.run()
    finally:
        if executor is None:
            pool.shutdown(wait=True, cancel_futures=True)
    glob = driver.glob
    frontier = [_rebuild_final(ctx, s) for s in glob.frontier]
    return build_result(
        ctx,
        frontier,
        glob.trace,
        glob.stats,
        driver.reason,
        t0,
        cfg.workers,
        sum(driver.pops.values()),
    )


def _rebuild_final(ctx: Context, spec: EntrySpec) -> Entry:
    """Replay a frontier history in the driver (its graph, full cost).

    Raises:
        SearchError: If an island reported an entry with unverified steps to the frontier.
    """
    if not spec.verified:
        raise SearchError(
            f"an island reported a frontier graph with {spec.verified_upto} of "
            f"{len(spec.steps)} rewrites verified; this is a bug in the island search, please "
            "report it (workers=1 runs without islands)."
        )
    by_name = {r.name: r for r in ctx.rules}
    graph = ctx.graph
    for step in spec.steps:
        graph = by_name[step.rule].apply(graph, step.site)
    c = cost(graph, ctx.device)
    costs, y, ok = ctx.measure(graph, c, spec.steps)
    return Entry(graph, c, y, spec.steps, ok, Verification.done(len(spec.steps)), costs=costs)


def check_picklable(rules: Sequence[Rule]) -> None:
    """Raise `SearchError` unless ``rules`` can be sent to worker processes."""
    try:
        ForkingPickler.dumps(list(rules))
    except Exception as err:  # noqa: BLE001
        raise SearchError(
            f"custom rules must be picklable to run on worker processes ({err!r}); define their "
            "callables at module level, or run with workers=1."
        ) from err
