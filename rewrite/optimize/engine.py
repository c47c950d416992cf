"""The search engine: population, Pareto archive, children, verification, credit.

One `Engine` is one island: its own population, archive, online credit and random generator.
`Engine.step()` makes and evaluates one child with its `StepStrategy` (the scheduler of the
search: the engine offers the building blocks, matching, rewriting, costing, verification and the
archive, and the strategy decides which child to make next; it knows the engine, the engine
knows only the protocol):

* `Stochastic` (``stochastic``, Tapestry-style Pareto search, the engine's own): a parent is the input graph with probability
  ``restart_prob``, otherwise a population member drawn with probability proportional to
  ``exp(-rank / tau)`` (``rank`` from non-dominated sorting; 0 is the frontier; graphs outside the
  constraint region rank one lower). The child applies ``m`` rewrites; each draws a rule among
  those with a site, with probability proportional to ``prior ** beta * credit ** (1 - beta)``,
  then a site uniformly. See `_evaluate` for what happens to the child.
* ``greedy`` and ``best_first``: the baselines in `rewrite.optimize.baselines`, given to the
  engine as ``Engine(ctx, seed, strategy)`` (`rewrite.optimize.strategies.step_strategy` finds
  one by name).

A child is costed incrementally (one `rewrite.cost` update per rewrite), deduplicated by graph
hash, dropped when over the size cap or when some frontier point times ``alpha`` is at most its
cost everywhere, verified by a region check of each of its rewrites with probability
``verify_rate`` (always before it may enter the frontier), and joins the population; if it is
inside the constraint region and no frontier point weakly dominates it, it enters the frontier.
Credit is an exponentially weighted average (rate ``eta``) of frontier improvements: a child that
improves the frontier rewards every rule in its history from the input; one that does not gives
its own rules a zero reward.

State is explicit: every random choice comes from the engine's `numpy.random.Generator`, so a
seeded run repeats exactly, and `Engine.state` returns the whole search state as an `EngineState`
(root, population, frontier, seen digests, credit, generator state, ...), from which
`Engine.from_state` or `Engine.restore` continue the search exactly where it was (the optax
pattern: ``state = engine.state()``, later ``Engine.from_state(ctx, state)``). Derived fields (the
frontier's hypervolume) are recomputed on restore, never carried.
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np

from rewrite.costmodel import CostVector, cost
from rewrite.errors import GraphError, MatchError, RuleError, SearchError, VerificationError
from rewrite.ir import Graph
from rewrite.mesh_cost import shard_cost
from rewrite.ops.collective import SHARD_OPS
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.matching import SiteTable, all_sites, inherit_sites, match_radius, revalidate
from rewrite.optimize.pareto import (
    alpha_dominated,
    hypervolume,
    non_dominated_rank,
    truncate_by_crowding,
)
from rewrite.optimize.result import RunStats, Step, normalizer
from rewrite.optimize.state import EngineState, Entry, StrategyState, Verification
from rewrite.rules.base import Rule, Site

__all__ = ["Context", "Engine", "EngineState", "Entry", "StepStrategy", "Stochastic"]

_CREDIT0 = 0.5
_CREDIT_FLOOR = 1e-3


class Context:
    """What every island of one search shares (read-only after construction).

    Args:
        graph: The input graph.
        rules: The rules, with distinct names.
        prior: ``n``-dim firing prior aligned with ``rules`` (sums to 1).
        config: The search config.
        device: Cost-model device.
        verifier: A `rewrite.verify.Verifier` (owned by this process).
    """

    def __init__(
        self,
        graph: Graph,
        rules: Sequence[Rule],
        prior: np.ndarray,
        config: SearchConfig,
        device: Any,
        verifier: Any,
    ) -> None:
        self.graph, self.rules, self.config = graph, list(rules), config
        self.names = [r.name for r in self.rules]
        self.index = {n: i for i, n in enumerate(self.names)}
        self.prior = np.asarray(prior, dtype=np.float64)
        self.device, self.verifier = device, verifier
        self.sharding_rules = {r.name for r in self.rules if r.family == "sharding"}
        self.root_sharded = any(op in SHARD_OPS for op in graph.op_counts())
        self.objectives = config.objectives
        self.input_cost = cost(graph, device)
        self.input_costs = self.measure(graph, self.input_cost, ())[0]
        self.scale = normalizer(self.input_costs, self.objectives)
        self.ref = np.full(len(self.objectives), 1.1)
        self.max_nodes = int(math.floor(config.max_size_ratio * len(graph)))
        self.radius = match_radius(self.rules)

    def measure(
        self, graph: Graph, c: CostVector, steps: Sequence[Step]
    ) -> tuple[dict[str, float], np.ndarray, bool]:
        """Named costs, objective vector and feasibility of a graph.

        A graph made by a sharding rule (or a sharded input) is costed per device with
        `rewrite.mesh_cost.shard_cost`: ``latency`` is the slowest device plus communication,
        ``peak_memory`` the largest per-device peak (what the memory cap constrains), and
        ``communication`` the collective time; the other entries are totals over devices.
        Objective values are rounded to 12 significant digits: incremental costing sums floats
        in another order than a full pass, and rounding noise must not create Pareto points.

        Raises:
            GraphError: If a sharded graph has an inconsistent placement.
        """
        costs = c.as_dict()
        if self.root_sharded or any(s.rule in self.sharding_rules for s in steps):
            sc = shard_cost(graph, self.device)
            costs["latency"] = float(sc.latency)
            costs["peak_memory"] = float(max(sc.peak_memory))
            costs["communication"] = float(sc.communication)
        y = np.array([float(f"{costs[o]:.12g}") for o in self.objectives])
        cap = self.config.memory_cap
        return costs, y, cap is None or costs["peak_memory"] <= cap


def _normed(ctx: Context, entries: Sequence[Entry]) -> np.ndarray:
    """``n x k`` objective values of ``entries`` normalized by the input's cost."""
    if not entries:
        return np.zeros((0, len(ctx.objectives)))
    return np.stack([e.y for e in entries]) / ctx.scale


def _generator(rng_state: Mapping[str, Any]) -> np.random.Generator:
    """A generator whose bit generator is in ``rng_state`` (a ``bit_generator.state``)."""
    bit_generator = getattr(np.random, str(rng_state["bit_generator"]))()
    bit_generator.state = copy.deepcopy(dict(rng_state))
    return np.random.Generator(bit_generator)


class StepStrategy(Protocol):
    """How an `Engine` makes its next child: one step of a search strategy.

    `Engine.step` calls `step` once per step, after counting the step, with the strategy state
    the previous call returned (None at the first step, and always for a strategy that keeps no
    state of its own). The strategy changes the search only through the engine's building
    blocks (`Engine.sites_of`, `Engine.rewrite`, `Engine.entry`, `Engine.evaluate`,
    `Engine.verify`) and its generator ``engine.rng``; its own state goes into the returned
    `rewrite.optimize.state.StrategyState`, which `Engine.state` snapshots by its ``copy``.
    Strategy objects hold no search state, so one object serves every island (and is pickled to
    worker processes).

    Attributes:
        name: The strategy's name (``SearchConfig.strategy``).
    """

    name: ClassVar[str]

    def step(
        self, engine: Engine, state: StrategyState | None
    ) -> tuple[StrategyState | None, bool, bool]:
        """One step: ``(state, improved, exhausted)``, the strategy state for the next step,
        whether the frontier improved, and whether the strategy has nothing left to do."""
        ...


@dataclass(frozen=True)
class Stochastic:
    """The Pareto search's step (see the module docstring): a rank-weighted parent, a child of
    ``m`` rewrites drawn by prior and credit, evaluated. It keeps no state of its own."""

    name: ClassVar[str] = "stochastic"

    def step(self, engine: Engine, state: StrategyState | None) -> tuple[None, bool, bool]:
        """One child of a sampled parent (see `StepStrategy.step`)."""
        parent = engine.sample_parent()
        child = engine.make_child(parent, engine.config.m)
        if child is None:
            spent = not any(any(engine.sites_of(e).values()) for e in engine.population)
            return None, False, spent
        return None, engine.evaluate(child)[1], False


def _own_strategy(config: SearchConfig) -> StepStrategy:
    """The engine's own step strategy, for an engine not given one."""
    if config.strategy != Stochastic.name:
        raise SearchError(
            f"An Engine steps the strategy it is given, and steps its own 'stochastic' only "
            f"when config.strategy names it, but config.strategy is {config.strategy!r}: pass "
            f"Engine(ctx, seed, rewrite.optimize.strategies.step_strategy("
            f"{config.strategy!r})) ('saturate' does not step an Engine: it runs whole in "
            f"rewrite.search)."
        )
    return Stochastic()


class Engine:
    """One island of the search (see the module docstring).

    The attributes (``root``, ``population``, ``frontier``, ``credit``, ``hv``, ...) are for
    reading; the search state changes only through `step`, `import_entry` and `restore`.

    Args:
        ctx: Shared context.
        seed: Seed of this island's generator (a `numpy.random.SeedSequence` or int).
        strategy: The `StepStrategy` it steps; None: `Stochastic`, which ``ctx.config.strategy``
            must then name.

    Raises:
        SearchError: If ``strategy`` is None and the config names another strategy.
    """

    def __init__(self, ctx: Context, seed: Any, strategy: StepStrategy | None = None) -> None:
        self._attach(ctx, strategy)
        self.restore(self.initial_state(ctx, seed))

    def _attach(self, ctx: Context, strategy: StepStrategy | None) -> None:
        self.ctx = ctx
        self.config = ctx.config
        self.strategy = _own_strategy(ctx.config) if strategy is None else strategy
        self.stats = RunStats()
        self.t0 = time.perf_counter()

    @staticmethod
    def initial_state(ctx: Context, seed: Any) -> EngineState:
        """The state of a new search of ``ctx`` seeded with ``seed`` (only the input graph)."""
        costs, y, ok = ctx.measure(ctx.graph, ctx.input_cost, ())
        root = Entry(ctx.graph, ctx.input_cost, y, (), ok, Verification.done(0), costs=costs)
        frontier = (root,) if root.feasible else ()
        hv = hypervolume(_normed(ctx, frontier), ctx.ref)
        return EngineState(
            root=root,
            population=(root,),
            frontier=frontier,
            seen=frozenset({ctx.graph.digest}),
            credit=(_CREDIT0,) * len(ctx.rules),
            rng_state=np.random.default_rng(seed).bit_generator.state,
            hv_trace=((0, 0.0, hv),),
        )

    @classmethod
    def from_state(
        cls, ctx: Context, state: EngineState, strategy: StepStrategy | None = None
    ) -> Engine:
        """An engine on ``ctx`` that continues the search held in ``state`` with ``strategy``
        (as in the constructor: the one that made ``state``).

        Its counters (`stats`) start at zero and its clock (``hv_trace`` seconds) at now.

        Raises:
            SearchError: If ``state`` does not fit ``ctx`` (see `restore`), or as the
                constructor.
        """
        engine = cls.__new__(cls)
        engine._attach(ctx, strategy)
        engine.restore(state)
        return engine

    def state(self) -> EngineState:
        """A snapshot of the whole search state (see `EngineState`)."""
        return EngineState(
            root=self.root,
            population=tuple(self.population),
            frontier=tuple(self.frontier),
            seen=frozenset(self.seen),
            credit=tuple(float(c) for c in self.credit),
            rng_state=copy.deepcopy(self.rng.bit_generator.state),
            steps=self.steps,
            hv_trace=tuple(self.hv_trace),
            improvements=tuple(self.improvements),
            exhausted=self.exhausted,
            strategy=None if self._strategy_state is None else self._strategy_state.copy(),
        )

    def restore(self, state: EngineState) -> None:
        """Continue from ``state``: replace the search state, recompute the hypervolume.

        The context, the counters (`stats`) and the clock are kept.

        Raises:
            SearchError: If ``state.credit`` does not have one entry per rule of the context.
        """
        if len(state.credit) != len(self.ctx.rules):
            raise SearchError(
                f"An EngineState's credit must have one entry per rule, but it has "
                f"{len(state.credit)} for {len(self.ctx.rules)} rules; restore a state taken "
                f"from an engine on the same rules."
            )
        self.root = state.root
        self.population: list[Entry] = list(state.population)
        self.frontier: list[Entry] = list(state.frontier)
        self.seen: set[bytes] = set(state.seen)
        self.credit = np.array(state.credit, dtype=np.float64)
        self.rng = _generator(state.rng_state)
        self.steps = state.steps
        self.hv_trace: list[tuple[int, float, float]] = list(state.hv_trace)
        self.improvements: list[Entry] = list(state.improvements)
        self.exhausted = state.exhausted
        self._strategy_state = None if state.strategy is None else state.strategy.copy()
        self.hv = self._hv()

    # ------------------------------------------------------------------ archive
    def _norm(self, entries: Sequence[Entry]) -> np.ndarray:
        return _normed(self.ctx, entries)

    def _hv(self) -> float:
        return hypervolume(self._norm(self.frontier), self.ctx.ref)

    def frontier_costs(self) -> np.ndarray:
        """``n x k`` raw objective values of the frontier."""
        return np.stack([e.y for e in self.frontier]) if self.frontier else np.zeros((0, 0))

    def dominated_by_frontier(self, y: np.ndarray) -> bool:
        """Whether some frontier point weakly dominates ``y``."""
        return alpha_dominated(y, self.frontier_costs(), 1.0)

    def offer_frontier(self, entry: Entry) -> bool:
        """Insert a verified, feasible entry into the frontier if no point weakly dominates it.

        Returns:
            Whether the frontier changed.
        """
        if not entry.feasible or not entry.verified or self.dominated_by_frontier(entry.y):
            return False
        keep = [e for e in self.frontier if not np.all(entry.y <= e.y)]
        keep.append(entry)
        if len(keep) > self.config.archive_size:
            idx = truncate_by_crowding(self._norm(keep), self.config.archive_size)
            keep = [keep[i] for i in idx]
        self.frontier = keep
        if entry in keep:
            self.improvements.append(entry)
        self.hv = self._hv()
        self.hv_trace.append((self.steps, time.perf_counter() - self.t0, self.hv))
        return entry in keep

    def add_population(self, entry: Entry) -> None:
        """Add an entry; beyond the population size drop the worst-ranked, most crowded one."""
        self.population.append(entry)
        cap = self.config.population
        if len(self.population) <= cap:
            return
        ranks = self.ranks()
        on_front = {id(e) for e in self.frontier}
        free = [
            i for i, e in enumerate(self.population) if id(e) not in on_front and e is not self.root
        ]
        if not free:
            return
        worst = max(ranks[i] for i in free)
        cands = [i for i in free if ranks[i] == worst]
        if len(cands) > 1:
            sub = self._norm([self.population[i] for i in cands])
            keep = truncate_by_crowding(sub, len(cands) - 1)
            drop = next(c for j, c in enumerate(cands) if j not in set(keep.tolist()))
        else:
            drop = cands[0]
        del self.population[drop]

    def ranks(self) -> np.ndarray:
        """Non-dominated rank of each population member (+1 outside the constraint region)."""
        r = non_dominated_rank(self._norm(self.population))
        return r + np.array([0 if e.feasible else 1 for e in self.population])

    # ------------------------------------------------------------------ verification
    def verify(self, entry: Entry) -> bool:
        """Verify every unverified rewrite from the input to ``entry`` (oldest first), through
        its `Verification` record (what passes is recorded there, and in the records of the
        ancestors it shares those steps with).

        Returns:
            Whether all passed; an entry that fails never enters the frontier.
        """
        return entry.record.verify(self.check_site)

    def check_site(self, rule: Rule, graph: Graph, site: Site) -> bool:
        """Region check of one rewrite; counts ``verified``/``rejected`` for its rule."""
        t0 = time.perf_counter()
        try:
            res = self.ctx.verifier.check_site(rule, graph, site)
            ok, cached = bool(res.ok), bool(res.cached)
        except (VerificationError, MatchError):
            ok, cached = False, False
        self.stats.times["verify"] += time.perf_counter() - t0
        self.stats.hit("verify", cached)
        self.stats.count(rule.name, "verified" if ok else "rejected")
        return ok

    # ------------------------------------------------------------------ children
    def sites_of(self, entry: Entry) -> SiteTable:
        """The site table of an entry (a full match pass the first time)."""
        if entry.sites is None:
            t0 = time.perf_counter()
            entry.sites = all_sites(self.ctx.rules, entry.graph)
            self.stats.times["match"] += time.perf_counter() - t0
            self.stats.hit("match", False)
        return entry.sites

    def choose_rule(self, sites: SiteTable) -> int | None:
        """Draw a rule index among rules with a site (prior^beta * credit^(1-beta))."""
        ctx = self.ctx
        ok = np.array([bool(sites.get(n)) for n in ctx.names])
        if not ok.any():
            return None
        for i in np.flatnonzero(ok):
            self.stats.count(ctx.names[i], "applicable")
        beta = self.config.beta
        credit = np.maximum(self.credit, _CREDIT_FLOOR)
        w = np.where(ok, ctx.prior**beta * credit ** (1.0 - beta), 0.0)
        if not w.sum() > 0:
            w = ok.astype(float)
        return int(self.rng.choice(len(w), p=w / w.sum()))

    def rewrite(
        self, graph: Graph, c: CostVector, sites: SiteTable, ri: int, si: int
    ) -> tuple[Graph, CostVector, SiteTable, Site] | None:
        """Apply site ``si`` of rule ``ri``; returns the new graph, its cost and site table."""
        rule = self.ctx.rules[ri]
        site = sites[rule.name][si]
        stats = self.stats
        t0 = time.perf_counter()
        try:
            if not revalidate(rule, graph, site):
                sites[rule.name] = [s for s in sites[rule.name] if s != site]
                return None
            new = rule.apply(graph, site)
        except (MatchError, RuleError, VerificationError):
            stats.dropped["error"] += 1
            return None
        t1 = time.perf_counter()
        stats.times["apply"] += t1 - t0
        new_cost = cost(new, self.ctx.device, base=c)
        t2 = time.perf_counter()
        stats.times["cost"] += t2 - t1
        table, _ = inherit_sites(self.ctx.rules, sites, new, self.ctx.radius)
        stats.times["match"] += time.perf_counter() - t2
        stats.hit("match", True)
        stats.count(rule.name, "fired")
        return new, new_cost, table, site

    def make_child(self, parent: Entry, m: int) -> Entry | None:
        """Apply up to ``m`` rewrites to ``parent`` (rules drawn by `choose_rule`)."""
        graph, c, sites = parent.graph, parent.cost, self.sites_of(parent)
        steps: list[Step] = []
        pending: list[tuple[Rule, Graph, Site]] = []
        for _ in range(m):
            ri = self.choose_rule(sites)
            if ri is None:
                break
            name = self.ctx.names[ri]
            si = int(self.rng.integers(len(sites[name])))
            out = self.rewrite(graph, c, sites, ri, si)
            if out is None:
                continue
            new, c, sites, site = out
            steps.append(Step(name, site))
            pending.append((self.ctx.rules[ri], graph, site))
            graph = new
        if not steps:
            return None
        return self.entry(parent, graph, c, sites, steps, pending)

    def entry(
        self,
        parent: Entry,
        graph: Graph,
        c: CostVector,
        sites: SiteTable,
        steps: Sequence[Step],
        pending: Sequence[tuple[Rule, Graph, Site]],
    ) -> Entry | None:
        """An unverified entry for a child of ``parent`` (None if it cannot be costed)."""
        t0 = time.perf_counter()
        all_steps = parent.steps + tuple(steps)
        try:
            costs, y, ok = self.ctx.measure(graph, c, all_steps)  # may compute peak memory
        except GraphError:
            self.stats.dropped["error"] += 1
            return None
        finally:
            self.stats.times["cost"] += time.perf_counter() - t0
        record = Verification.extend(parent.record, pending)
        return Entry(graph, c, y, all_steps, ok, record, sites=sites, costs=costs)

    def evaluate(self, child: Entry) -> tuple[bool, bool]:
        """Dedupe, size and alpha filters, sampled verification, population and frontier.

        Returns:
            ``(accepted, improved)``: whether the child joined the population, and whether it
            entered the frontier.
        """
        own = child.record.checks  # a new child's record holds its own rewrites' checks
        stats, names = self.stats, {rule.name for rule, _, _ in own}
        digest = child.graph.digest
        if digest in self.seen:
            stats.hit("dedupe", True)
            stats.dropped["duplicate"] += 1
            return False, False
        stats.hit("dedupe", False)
        self.seen.add(digest)
        if len(child.graph) > self.ctx.max_nodes:
            stats.dropped["size"] += 1
            return False, False
        if alpha_dominated(child.y, self.frontier_costs(), self.config.alpha):
            stats.dropped["alpha"] += 1
            self._credit(names, 0.0)
            return False, False
        if self.rng.random() < self.config.verify_rate and not self.verify(child):
            stats.dropped["rejected"] += 1
            return False, False
        improved = False
        if child.feasible and not self.dominated_by_frontier(child.y):
            if not self.verify(child):
                stats.dropped["rejected"] += 1
                return False, False
            improved = self.offer_frontier(child)
        for n in names:
            stats.count(n, "accepted")
        self.add_population(child)
        if improved:
            for n in names:
                stats.count(n, "improved")
            self._credit({s.rule for s in child.steps}, 1.0)
        else:
            self._credit(names, 0.0)
        return True, improved

    def _credit(self, names: set[str], reward: float) -> None:
        eta = self.config.eta
        for n in names:
            i = self.ctx.index[n]
            self.credit[i] = (1.0 - eta) * self.credit[i] + eta * reward

    def sample_parent(self) -> Entry:
        """The input graph with probability ``restart_prob``, else a rank-weighted member."""
        if self.rng.random() < self.config.restart_prob or len(self.population) == 1:
            return self.root
        ranks = self.ranks().astype(float)
        w = np.exp(-(ranks - ranks.min()) / self.config.tau)
        return self.population[int(self.rng.choice(len(w), p=w / w.sum()))]

    # ------------------------------------------------------------------ driving
    def step(self) -> bool:
        """Make and evaluate one child with the engine's `StepStrategy`.

        Returns:
            Whether the frontier improved.
        """
        self.steps += 1
        self.stats.steps += 1
        self._strategy_state, improved, exhausted = self.strategy.step(self, self._strategy_state)
        self.exhausted = self.exhausted or exhausted
        self.stats.pop_sum += len(self.population)
        self.stats.front_sum += len(self.frontier)
        return improved

    def import_entry(self, entry: Entry) -> bool:
        """Take a verified frontier entry found by another island; returns whether it entered."""
        digest = entry.graph.digest
        if any(e.graph.digest == digest for e in self.frontier):
            return False
        self.seen.add(digest)
        if self.offer_frontier(entry):
            self.improvements.remove(entry)  # came from outside: nothing to report back
            self.add_population(entry)
            return True
        return False
