"""Problem families of `bench_families.py`: seeded generators and the design/test split.

A default chosen and reported on the same problems says nothing about a user's problem. So the
benchmark draws its problems from families, each member a seed of a generator, and splits the
members once, here, before anything was measured (`SPLIT`): defaults of ``auto`` and of warm
start may be chosen on the design split only; the test split only reports.

Families (every member a `benchmarks._structure_problems.Problem`):

* ``search``: search-shaped problems (`search_spec`, `search_member`): the knobs of a stochastic
  rewrite search and a `Simplex` of rule priors (`_structure_problems._search`), plus extra knobs
  feeding hidden phase metrics. A generated member varies the width (6 to 60 columns: 4 search
  knobs, 0-10 extra knobs, the rest rule priors), the rules' gain and verification cost (1-4
  rules carry the gain), the depth (1-3 layers of phase metrics) and fan-in (1-4 parents) of the
  hidden DAG parameters -> phase metrics -> objectives, pairwise interactions, the noise (2-20%,
  multiplicative) and unread columns (extra knobs no metric reads), and whether a trial is the
  mean of 4 reported runs. ``search8`` and ``search40`` are the members without extra knobs.
* ``network``: function networks (`network_spec`, `network_member`) of four shapes (chain, tree,
  diamond, wide) on ``[0, 1]^d``, ``d`` 2-10 of which up to a third unread; each node a smooth
  nonlinear function of a few inputs and its parents; objectives: the sink node (maximized) and
  ``-mean((x - c)^2)`` over the read inputs (node ``g``); optional additive noise. The four
  networks of Astudillo & Frazier (``alpine2``, ``ackley6``, ``dropwave``, ``rosenbrock5``) are
  members too.
* ``rewrite``: the rewrite study's own spaces (``family``, one prior per ``rules``) on workload
  sets of the zoo (``rewrite@gpt2+bert+resnet+t5`` is the main job's training suite).
* ``warm``: warm-start pairs whose relation is known (`warm_pair`): a target (a generated network
  or a narrow search member, objectives only: no metrics) and a source on the same space that is
  ``identical`` (another noise draw), ``shifted`` (each objective ``a y + b``, ``a`` in [1.5, 3]:
  the same optimum on another scale), ``moved`` (the target read through a warp of the unit cube,
  ``u^gamma`` per column with ``gamma`` in [0.5, 2]: the optimum moves), ``unrelated`` (smooth
  random functions with the target's ranges) or ``misleading`` (``c - y`` per objective: the
  source's best region is the target's worst).
* ``main``: the main job (`bench_peers`), by tuner seed.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from benchmarks._families_networks import NetworkSpec, _rng, network_member, network_spec
from benchmarks._structure_problems import (
    PROBLEMS,
    RULES,
    Problem,
    RuleTable,
    _search,
    _search_edges,
    _search_hand_edges,
    _search_knowledge,
    rule_table,
)
from spaces import Float, Simplex, Space
from tuner.trial import run_metric

__all__ = [
    "RELATIONS",
    "SPLIT",
    "NetworkSpec",
    "SearchSpec",
    "member",
    "members",
    "network_spec",
    "search_spec",
    "warm_pair",
]

RELATIONS = ("identical", "shifted", "moved", "unrelated", "misleading")
"""The warm-start pairs' relations, in the order `warm_pair` builds them."""

# --- The split. Fixed on 2026-11-27 before any run of bench_families (commit message says so).
# Rule: a default of `auto` or of warm start may be chosen on "design" members only; "test"
# members are run only to report, after the defaults are committed, and are never re-run to
# choose again. Generated members are named "<family>/<seed>": design seeds 0-99, test seeds
# 100 and up. Members used before this split to choose defaults (search8, search40, the BOFN
# networks, the main job's training suite, the synthetic warm-start pair, tuner seeds 0-4 of the
# main job) are design members.
# The design split may grow within seeds 0-99 (the warm targets went from 0-1 to 0-15 on
# 2026-11-29, before any of the new ones ran); the test split never changes.
SPLIT: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "search": {
        "design": ("search8", "search40", *(f"search/{s}" for s in range(8))),
        "test": tuple(f"search/{s}" for s in range(100, 112)),
    },
    "network": {
        "design": (
            "alpine2", "ackley6", "dropwave", "rosenbrock5", *(f"network/{s}" for s in range(6)),
        ),
        "test": tuple(f"network/{s}" for s in range(100, 108)),
    },
    "rewrite": {
        "design": ("rewrite@gpt2+bert+resnet+t5", "rewrite-rules@gpt2+bert+resnet+t5"),
        "test": (
            "rewrite@llama+vit", "rewrite-rules@llama+vit",
            "rewrite@gpt2+vit", "rewrite-rules@bert+llama",
        ),
    },
    "warm": {
        "design": tuple(f"warm/{s}/{r}" for s in range(16) for r in RELATIONS),
        "test": tuple(f"warm/{s}/{r}" for s in range(100, 104) for r in RELATIONS),
    },
    "main": {
        # seeds 15-29 added in the twenty-ninth session, after the test seeds had run
        "design": tuple(f"main/{s}" for s in (*range(5), *range(15, 30))),
        "test": tuple(f"main/{s}" for s in range(5, 15)),
    },
}  # fmt: skip


# --- search-shaped problems ------------------------------------------------------------------

_CORE = ("population", "mutations", "temperature", "prior_weight")
_PHASES = ("match", "rank", "verify", "cache", "schedule", "prune", "merge", "lower", "place")


@dataclass(frozen=True)
class Phase:
    """A hidden phase metric ``phase.<name>.score = sigmoid(sum_i w_i (v_i - c_i) + pair (v_0 -
    c_0)(v_1 - c_1))`` of its parents' values ``v`` (knobs on the unit scale, or earlier phases'
    scores), reported with multiplicative noise and clipped to [0, 1]."""

    name: str
    parents: tuple[str, ...]
    weights: tuple[float, ...]
    centres: tuple[float, ...]
    pair: float = 0.0


@dataclass(frozen=True)
class Sink:
    """How a phase with no child enters the objectives: ``window`` multiplies the gain by
    ``(4 p (1 - p))^power`` (an optimum at 0.5); ``tradeoff`` multiplies it by ``(0.2 + 0.8
    p)^power`` and adds ``cost p`` seconds."""

    phase: str
    kind: str
    power: float
    cost: float = 0.0


@dataclass(frozen=True)
class SearchSpec:
    """A search-shaped problem (see the module docstring): rules, extra knobs (``Float(0,
    1)``), hidden phases in topological order, their sinks, the noise and runs per trial."""

    name: str
    rules: RuleTable
    knobs: tuple[str, ...] = ()
    phases: tuple[Phase, ...] = ()
    sinks: tuple[Sink, ...] = ()
    noise: float = 0.1
    runs: int = 1

    @property
    def width(self) -> int:
        """Unit-cube columns of the space."""
        return len(_CORE) + len(self.knobs) + len(self.rules.names)

    def describe(self) -> dict[str, Any]:
        """The member's shape, for result files."""
        depth: dict[str, int] = {}
        for p in self.phases:
            depth[p.name] = 1 + max((depth.get(a, 0) for a in p.parents), default=0)
        read = {a for p in self.phases for a in p.parents if a in self.knobs}
        return {
            "columns": self.width,
            "rules": len(self.rules.names),
            "valued_rules": int((self.rules.value > 0).sum()),
            "knobs": len(self.knobs),
            "unread_knobs": len(self.knobs) - len(read),
            "phases": len(self.phases),
            "depth": max(depth.values(), default=0),
            "fan_in": max((len(p.parents) for p in self.phases), default=0),
            "interactions": sum(p.pair != 0 for p in self.phases),
            "noise": self.noise,
            "runs": self.runs,
        }


def _draw_rules(rng: np.random.Generator, k: int) -> RuleTable:
    """``k`` rules, 1-4 of them carrying gain (the best 1.0, the others 0.05-0.8), verification
    costs 0.1-2 ms (the best rule the most expensive on half the members), acceptance 0.3-1."""
    n_valued = int(rng.integers(1, min(4, k) + 1))
    value = np.zeros(k)
    idx = rng.choice(k, n_valued, replace=False)
    value[idx] = sorted([1.0, *rng.uniform(0.05, 0.8, n_valued - 1)], reverse=True)
    cost = rng.uniform(0.1, 2.0, k)
    if rng.random() < 0.5:
        cost[idx[0]] = 2.0
    names = tuple(RULES[i] if i < len(RULES) else f"r{i}" for i in range(k))
    return RuleTable(names, value, cost, rng.uniform(0.3, 1.0, k))


def search_spec(seed: int) -> SearchSpec:
    """Member ``search/<seed>`` of the search-shaped family (module docstring)."""
    rng = _rng("search", seed)
    width = int(round(math.exp(rng.uniform(math.log(6), math.log(60)))))
    n_knobs = int(rng.integers(0, min(10, width - 6) + 1))
    rules = _draw_rules(rng, width - len(_CORE) - n_knobs)
    depth, fan_in = int(rng.integers(1, 4)), int(rng.integers(1, 5))
    interactions = bool(rng.random() < 0.5)
    noise = float(rng.choice([0.02, 0.05, 0.1, 0.2]))
    runs = 4 if rng.random() < 0.25 else 1
    knobs = tuple(f"knob{i}" for i in range(n_knobs))
    read = [
        str(k) for k in rng.permutation(knobs)[: n_knobs - round(rng.uniform(0, 0.6) * n_knobs)]
    ]
    pool = read + [str(c) for c in rng.choice(_CORE, 2, replace=False)]
    names = iter(rng.permutation(_PHASES))
    phases: list[Phase] = []
    previous: list[str] = []
    for layer in range(depth):
        size = int(rng.integers(1, 4))
        mine: list[list[str]] = [[] for _ in range(size)]
        if layer == 0:  # every read knob is read by a first-layer phase
            for i, k in enumerate(read):
                mine[i % size].append(k)
        else:  # each phase reads one of the layer before
            for parents in mine:
                parents.append(str(rng.choice(previous)))
        made = []
        for parents in mine:
            extra = [a for a in pool + previous if a not in parents]
            want = max(fan_in - len(parents), 1 if not parents else 0)
            parents += [str(a) for a in rng.permutation(extra)[:want]]
            n = len(parents)
            phases.append(
                Phase(
                    f"phase.{next(names)}.score",
                    tuple(parents),
                    tuple(float(w) for w in rng.choice([-1, 1], n) * rng.uniform(3, 8, n)),
                    tuple(float(c) for c in rng.uniform(0.2, 0.8, n)),
                    float(rng.choice([-1, 1]) * rng.uniform(5, 15))
                    if interactions and n > 1
                    else 0,
                )
            )
            made.append(phases[-1].name)
        previous = previous + made
    children = {a for p in phases for a in p.parents}
    sinks = []
    for p in phases:
        if p.name not in children:
            kind = str(rng.choice(["window", "tradeoff"]))
            cost = float(rng.uniform(0.5, 3.0)) if kind == "tradeoff" else 0.0
            sinks.append(Sink(p.name, kind, float(rng.uniform(0.5, 2.0)), cost))
    return SearchSpec(f"search/{seed}", rules, knobs, tuple(phases), tuple(sinks), noise, runs)


def _unit_knobs(config: Mapping[str, Any]) -> dict[str, float]:
    """The search knobs on the unit scale of their (log) ranges."""
    return {
        "population": math.log(float(config["population"]) / 8.0) / math.log(16.0),
        "mutations": math.log(float(config["mutations"])) / math.log(16.0),
        "temperature": math.log(float(config["temperature"]) / 0.05) / math.log(100.0),
        "prior_weight": float(config["prior_weight"]),
    }


def evaluate_search(
    spec: SearchSpec,
    config: Mapping[str, Any],
    rng: np.random.Generator | None,
    noise: float | None = None,
) -> tuple[dict[str, float], dict[str, float]]:
    """One run of ``spec``'s search (`_search`, then the phases); noise-free when ``rng`` is
    None. Without phases it is `_search` itself (``search8``, ``search40``)."""
    sd = spec.noise if noise is None else noise
    values, metrics = _search(config, rng, sd, spec.rules)
    if not spec.phases:
        return values, metrics
    v = {**_unit_knobs(config), **{k: float(config[k]) for k in spec.knobs}}
    for p in spec.phases:
        d = [v[a] - c for a, c in zip(p.parents, p.centres, strict=True)]
        z = sum(w * x for w, x in zip(p.weights, d, strict=True))
        z += p.pair * d[0] * d[1] if len(d) > 1 else 0.0
        score = 1.0 / (1.0 + math.exp(-z))
        if rng is not None:
            score *= math.exp(sd * rng.standard_normal())
        v[p.name] = metrics[p.name] = min(max(score, 0.0), 1.0)
    gain, seconds = values["gain"], values["search_seconds"]
    for s in spec.sinks:
        share = v[s.phase]
        if s.kind == "window":
            gain *= (4 * share * (1 - share)) ** s.power
        else:
            gain *= (0.2 + 0.8 * share) ** s.power
            seconds += s.cost * share
    return {"gain": gain, "search_seconds": seconds}, metrics


def _mean_of_runs(
    one: Any, config: Mapping[str, Any], rng: np.random.Generator | None, runs: int, noise: float
) -> tuple[dict[str, float], dict[str, float]]:
    """A trial as the mean of ``runs`` runs of ``one(config, rng, noise)``, each with noise
    ``noise * sqrt(runs)`` (the mean's noise is about ``noise``), every run's values also
    reported as ``<name>@s<i>``; noise-free (``rng`` None) it is one noise-free run."""
    if rng is None:
        return one(config, None, noise)  # type: ignore[no-any-return]
    out = [one(config, rng, noise * math.sqrt(runs)) for _ in range(runs)]
    values = {k: float(np.mean([v[k] for v, _ in out])) for k in out[0][0]}
    metrics = {k: float(np.mean([m[k] for _, m in out])) for k in out[0][1]}
    for i, (v, m) in enumerate(out):
        metrics.update({run_metric(k, f"s{i}"): x for k, x in {**v, **m}.items()})
    return values, metrics


def search_member(spec: SearchSpec) -> Problem:
    """The `Problem` of a search-shaped spec (its true DAG: `_search_edges` plus the phases)."""
    space = Space(
        {
            "population": Float(8.0, 128.0, log=True),
            "mutations": Float(1.0, 16.0, log=True),
            "temperature": Float(0.05, 5.0, log=True),
            "prior_weight": Float(0.0, 1.0),
            **{k: Float(0.0, 1.0) for k in spec.knobs},
            "priors": Simplex(spec.rules.names),
        }
    )
    edges = list(_search_edges(spec.rules.names))
    edges += [(a, p.name) for p in spec.phases for a in p.parents]
    edges += [(s.phase, "gain") for s in spec.sinks]
    edges += [(s.phase, "search_seconds") for s in spec.sinks if s.kind == "tradeoff"]
    metrics = [f"rule.{r}.applied" for r in spec.rules.names]
    metrics += ["time.verify_seconds", "search.usefulness", "search.acceptance_rate"]
    metrics += ["search.frontier_size", *(p.name for p in spec.phases)]

    def one(config: Mapping[str, Any], rng: Any, noise: float) -> tuple[dict, dict]:
        return evaluate_search(spec, config, rng, noise)

    if spec.runs > 1:
        evaluate: Any = functools.partial(_mean_of_runs, one, runs=spec.runs, noise=spec.noise)
    else:
        evaluate = functools.partial(one, noise=spec.noise)
    seconds_ref = -5.0 - sum(s.cost for s in spec.sinks)
    return Problem(
        spec.name, space, {"gain": "maximize", "search_seconds": "minimize"}, (0.0, seconds_ref),
        evaluate, tuple(edges), tuple(metrics), ax=False, noisy=spec.noise > 0,
        hand_edges=_search_hand_edges(spec.rules.names), knowledge=_search_knowledge(spec.rules.names),
    )  # fmt: skip


# --- members ---------------------------------------------------------------------------------


def _rewrite_member(name: str) -> Problem:
    """``rewrite@w1+w2`` or ``rewrite-rules@...``: the rewrite study's space on those zoo
    workloads (`_structure_problems._rewrite_problem`)."""
    from benchmarks._structure_problems import _rewrite_problem

    kind, _, workloads = name.partition("@")
    priors = "rules" if kind == "rewrite-rules" else "family"
    return _rewrite_problem(priors, tuple(workloads.split("+")))


@functools.cache
def member(name: str) -> Problem:
    """The `Problem` of a structure member of `SPLIT` (``search8``, ``search/7``,
    ``network/101``, ``alpine2``, ``rewrite@llama+vit``, ...), built once per process."""
    family, _, seed = name.partition("/")
    if family == "search" and seed:
        return search_member(search_spec(int(seed)))
    if family == "network" and seed:
        return network_member(network_spec(int(seed)))
    if name.startswith("rewrite"):
        return _rewrite_member(name)
    if name in ("search8", "search40"):
        k = int(name.removeprefix("search"))
        return search_member(SearchSpec(name, rule_table(k)))
    if name in PROBLEMS:
        return PROBLEMS[name]
    raise KeyError(f"unknown family member {name!r}; see benchmarks._families.SPLIT")


def describe(name: str) -> dict[str, Any]:
    """A structure member's shape (columns, depth, noise, ...)."""
    family, _, seed = name.partition("/")
    if family == "search" and seed:
        return search_spec(int(seed)).describe()
    if family == "network" and seed:
        return network_spec(int(seed)).describe()
    problem = member(name)
    return {"columns": problem.space.dim}


def members(family: str, split: str) -> tuple[str, ...]:
    """The members of ``family``'s ``split`` (``"design"`` or ``"test"``)."""
    if family not in SPLIT or split not in SPLIT[family]:
        raise KeyError(f"unknown family or split {family!r}/{split!r}; see SPLIT")
    return SPLIT[family][split]


# --- warm-start pairs ------------------------------------------------------------------------


@dataclass(frozen=True)
class WarmPair:
    """A warm-start pair: the target, the source (same space and objectives) and their
    relation (`RELATIONS`)."""

    name: str
    relation: str
    target: Problem
    source: Problem


def _warm_target(seed: int) -> Problem:
    """The target of pairs ``warm/<seed>/*``: a function network (even seeds) or a search
    member of at most 16 columns (odd seeds), reporting its objectives only."""
    if seed % 2 == 0:
        base = network_member(network_spec(1000 + seed))
    else:
        s = 1000 + seed
        while search_spec(s).width > 16:
            s += 1000
        base = search_member(search_spec(s))

    def evaluate(config: Mapping[str, Any], rng: np.random.Generator | None) -> tuple[dict, dict]:
        return base.evaluate(config, rng)[0], {}

    return _replace(base, f"warm/{seed}", evaluate)


def _replace(problem: Problem, name: str, evaluate: Any) -> Problem:
    return Problem(
        name, problem.space, problem.objectives, problem.ref, evaluate, (), (), ax=problem.ax,
        noisy=problem.noisy,
    )  # fmt: skip


def _sample_values(problem: Problem, n: int = 256) -> np.ndarray:
    """The noise-free objectives (own units) at ``n`` Sobol points of the space."""
    X = problem.space.sample_unit(n, 1)
    configs = problem.space.from_unit(X)
    return np.array(
        [[problem.evaluate(c, None)[0][o] for o in problem.objectives] for c in configs]
    )


@functools.cache
def warm_pair(name: str) -> WarmPair:
    """The pair ``warm/<seed>/<relation>`` of `SPLIT` (module docstring)."""
    _, seed_s, relation = name.split("/")
    seed = int(seed_s)
    if relation not in RELATIONS:
        raise KeyError(f"unknown relation {relation!r}; one of {RELATIONS}")
    target = _warm_target(seed)
    space, objectives = target.space, list(target.objectives)
    rng = _rng("warm", seed * len(RELATIONS) + RELATIONS.index(relation))
    Y = _sample_values(target)
    lo, hi = Y.min(axis=0), Y.max(axis=0)
    if relation == "identical":
        evaluate = target.evaluate
    elif relation == "shifted":
        a, b = (
            rng.uniform(1.5, 3.0, len(objectives)),
            rng.uniform(-1, 1, len(objectives)) * (hi - lo),
        )

        def evaluate(config: Mapping[str, Any], r: Any) -> tuple[dict, dict]:
            v = target.evaluate(config, r)[0]
            return {o: float(a[j] * v[o] + b[j]) for j, o in enumerate(objectives)}, {}
    elif relation == "moved":
        gamma = np.exp(rng.uniform(math.log(0.5), math.log(2.0), space.dim))

        def evaluate(config: Mapping[str, Any], r: Any) -> tuple[dict, dict]:
            u = space.to_unit([config]).numpy()[0]
            return target.evaluate(space.from_unit(u[None, :] ** gamma)[0], r)

    elif relation == "unrelated":
        W = rng.normal(0, 2.0, (len(objectives), 3, space.dim))
        phi = rng.uniform(0, 2 * math.pi, (len(objectives), 3))

        def evaluate(config: Mapping[str, Any], r: Any) -> tuple[dict, dict]:
            u = space.to_unit([config]).numpy()[0]
            s = np.sin(W @ u + phi).mean(axis=1)  # in [-1, 1]
            return {
                o: float(lo[j] + (hi[j] - lo[j]) * (s[j] + 1) / 2) for j, o in enumerate(objectives)
            }, {}
    else:  # misleading
        c = hi + lo

        def evaluate(config: Mapping[str, Any], r: Any) -> tuple[dict, dict]:
            v = target.evaluate(config, r)[0]
            return {o: float(c[j] - v[o]) for j, o in enumerate(objectives)}, {}

    source = _replace(target, f"{name}:source", evaluate)
    return WarmPair(name, relation, target, source)
