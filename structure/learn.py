"""Tiered structure learning: parameters -> metrics -> objectives.

`learn_structure` runs the PC algorithm as causal-learn runs it (Fisher-z conditional-
independence tests; `structure._pc_fast`) with background knowledge (tiers; no edges within the
parameter or objective tier; expert forbidden edges) on bootstrap resamples of the trials table,
keeps the adjacencies found in at least ``stability`` of them (their frequency is the edge
strength), orients them (across tiers by tier; within the metric tier by the data's majority
vote, else by the search's phase order, else by column order), breaks any cycle by dropping the
weakest edge, adds required and formula edges, and post-processes: caps each node's in-degree,
drops metrics that no parameter drives or that reach no objective, gives parentless metrics
every parameter as parent, and connects every parameter that has no path to an objective
directly to it.

PC proposes; GP evidence decides the parents that the network's GPs read. By default
(``LearnConfig.select``) each objective's parents are chosen by `structure.select`: greedy
forward-backward selection among the parameters and metrics, scored by a GP's leave-one-out log
density, against the all-parameter (flat) set; then, down the chain, the parents of every metric
so selected; a selected metric that nothing predicts is dropped and its children choose again.
This finds non-monotone links that Fisher-z misses and keeps metrics that do not help
prediction out of the network. Nodes PC alone handles (no
selection, or metrics kept as outputs) get every parameter as a parent (``all_param_parents``,
``direct_edges``), so a missed parameter effect costs accuracy, not correctness.
"""

from __future__ import annotations

import dataclasses
import logging
import numbers
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from structure.dag import Edge, Knowledge, Structure
from structure.errors import KnowledgeError, StructureLearningError
from structure.parents import Rows, run_rows, select_structure
from structure.pc import TIER_RANK, Table, bootstrap_pc, make_table, orient, pc_metrics
from structure.runs import RunTable
from structure.select import SelectConfig, select_parents

__all__ = ["LearnConfig", "learn_structure"]

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LearnConfig:
    """Options of `learn_structure`.

    Attributes:
        alpha: Significance level of PC's Fisher-z tests.
        bootstrap: Number of bootstrap resamples PC runs on.
        stability: Least fraction of resamples an adjacency must appear in to be kept.
        max_parents: Largest in-degree of a node among learned edges (required, formula and
            repair edges may exceed it).
        min_rows: Fewest trials structure learning runs on.
        pc_metrics: Most metric columns PC tests (the most relevant first, and never more than
            its Fisher-z tests allow at this many trials); selection considers every metric,
            and PC's cost grows fast with its columns.
        direct_edges: Keep an edge from every parameter to every objective (not defined by an
            exact formula), so each objective's GP sees the parameters as well as its metric
            parents: a metric parent that structure learning missed then costs accuracy, not
            correctness. Off for a trusted structure (e.g. the true DAG).
        all_param_parents: Give every metric kept in the structure (not defined by an exact
            formula) all parameters as parents (origin ``"direct"``): Fisher-z misses
            non-monotone parameter effects, and a node GP missing an input explains it as noise
            that the network then does not propagate; the ARD kernel ignores irrelevant inputs.
        select: GP parent selection (`structure.select`) for every objective and, recursively,
            for the metrics it selects; replaces PC's parents of those nodes (PC's neighbours
            are always among the inputs tried) and, there, `direct_edges` and
            `all_param_parents`. None keeps PC's parents.
        select_rows: Most rows selection scores when the rows are runs (`learn_structure`'s
            ``groups``): a seeded subsample spread evenly over the trials
            (`structure.runs.subsample_groups`). Each GP fit of selection costs the cube of its
            rows, and selection fits hundreds; PC reads every row.
        dense: Learn nothing but the parameters the objectives read beyond the metrics: every
            parameter is a parent of every metric and every metric a parent of every objective,
            with the knowledge's required and formula edges and none it forbids; the node GPs'
            ARD lengthscales weigh the inputs. An objective also reads every parameter with
            ``direct_edges``, else the parameters `select` adds to its metrics (a forward
            search from all the metrics: a parameter that acts on the objective other than
            through them), else none. PC does not run, per-run rows are not read, and the
            knowledge's candidate edges and phase order have nothing to add.
    """

    alpha: float = 0.05
    bootstrap: int = 12
    stability: float = 0.5
    max_parents: int = 6
    min_rows: int = 8
    pc_metrics: int = 12
    direct_edges: bool = True
    all_param_parents: bool = True
    select: SelectConfig | None = field(default_factory=SelectConfig)
    select_rows: int = 120
    dense: bool = False

    def __post_init__(self) -> None:
        names = ("alpha", "stability", "bootstrap", "max_parents", "min_rows", "pc_metrics")
        for name in (*names, "select_rows"):
            value = getattr(self, name)
            real = name in ("alpha", "stability")
            ok = isinstance(value, numbers.Real if real else numbers.Integral)
            if isinstance(value, bool) or not ok:
                raise StructureLearningError(
                    f"LearnConfig.{name} must be {'a number' if real else 'an int'}, got {value!r}."
                )
        if not isinstance(self.dense, bool):
            raise StructureLearningError(f"LearnConfig.dense must be a bool, got {self.dense!r}.")
        if not (0.0 < self.alpha < 1.0 and 0.0 < self.stability <= 1.0):
            raise StructureLearningError(
                f"`0 < alpha < 1` and `0 < stability <= 1` must hold, got {self.alpha=}, "
                f"{self.stability=}."
            )
        if (
            self.bootstrap < 1
            or self.max_parents < 1
            or self.min_rows < 4
            or self.pc_metrics < 0
            or self.select_rows < self.min_rows
        ):
            raise StructureLearningError(
                "`bootstrap >= 1`, `max_parents >= 1`, `min_rows >= 4`, `pc_metrics >= 0` and "
                f"`select_rows >= min_rows` must hold, got {self.bootstrap=}, "
                f"{self.max_parents=}, {self.min_rows=}, {self.pc_metrics=}, {self.select_rows=}."
            )


def learn_structure(
    params: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    objectives: Mapping[str, np.ndarray],
    knowledge: Knowledge | None = None,
    config: LearnConfig | None = None,
    seed: int = 0,
    transforms: Mapping[str, str] | None = None,
    outputs: Collection[str] = (),
    hints: Mapping[str, Sequence[str]] | None = None,
    runs: RunTable | None = None,
) -> Structure:
    """Learn a tiered DAG from a trials table (and, given `runs`, from the trials' runs).

    Args:
        params: Parameter name -> ``n x k``-dim array of its unit-cube columns (``k >= 1``).
        metrics: Metric name -> ``n``-dim array (featurized, no NaN), most relevant first: PC
            tests as many as its Fisher-z tests allow at ``n`` trials, in this order (metrics
            named in `knowledge` or `outputs` first); selection considers them all.
        objectives: Objective name -> ``n``-dim array.
        knowledge: Expert knowledge (required/forbidden/candidate edges, formulas, phase order).
        config: Options; defaults when None.
        seed: Seed of the bootstrap resampling.
        transforms: Node -> ``"identity"``/``"log1p"``, recorded in the result.
        outputs: Metrics that must stay in the structure and be predictable from the parameters
            (the outcome-constraint metrics of the tuner).
        hints: Metric -> parameters its name points to (`structure.params.name_hints`): soft
            knowledge that selection tries first and keeps unless the data overturns it.
        runs: The same nodes with one row per run of the trials (`structure.runs.run_table`):
            PC reads them (its bootstrap resamples whole trials), and so does the selection of
            the metrics each objective reads (at most ``config.select_rows`` rows spread over
            the trials; `structure.parents`); the rest is chosen on the trials. None: the
            trials alone.

    Returns:
        The learned `Structure`.

    Raises:
        StructureLearningError: Fewer than ``config.min_rows`` trials, no objective, columns of
            different lengths, a value that is not finite, or `runs` of other nodes.
        KnowledgeError: Knowledge names an unknown node or breaks the tier rules.
    """
    config = config or LearnConfig()
    table, n = _tables(params, metrics, objectives, runs, config)
    knowledge = _known_candidates(knowledge or Knowledge(), table.tier)
    check_knowledge(knowledge, table.tier)
    protected = {f.node for f in knowledge.formulas} | {
        i for f in knowledge.formulas for i in f.inputs
    }
    protected |= {n for pair in knowledge.required for n in pair} | set(outputs)
    if config.dense:
        edges = _dense_edges(params, metrics, objectives, knowledge, config)
        edges = _add_knowledge(edges, knowledge, table.tier)
        return _structure(params, metrics, objectives, edges, knowledge, table.tier, transforms, n)
    edges = _pc_edges(table, knowledge, [*metrics], protected, config, seed, runs)
    exact = {f.node for f in knowledge.formulas if not f.residual}
    selected: set[str] = set()
    if config.select is not None:
        trials = Rows(params, metrics, objectives)
        rows = None if runs is None else run_rows(runs, config.select_rows, seed)
        edges, selected = select_structure(
            trials, edges, knowledge, config.select, hints or {}, rows
        )
    forbidden = set(knowledge.forbidden)
    # An objective whose parents selection chose has weighed every parameter already.
    edges = _prune_and_repair(
        edges, [*params], [*metrics], [*objectives], protected, exact | selected, forbidden
    )
    free = exact | selected  # nodes whose parents are set: no direct edges added
    if config.all_param_parents:
        used = {n for key in edges for n in key} | (set(outputs) & set(metrics))
        for m in metrics:
            if m in used and m not in free:
                edges.update(_param_edges(params, m, edges, forbidden, "direct"))
    if config.direct_edges:
        for o in objectives:
            if o not in free:
                edges.update(_param_edges(params, o, edges, forbidden, "direct"))
    return _structure(params, metrics, objectives, edges, knowledge, table.tier, transforms, n)


def _structure(
    params: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    objectives: Mapping[str, np.ndarray],
    edges: Mapping[tuple[str, str], Edge],
    knowledge: Knowledge,
    tier: Mapping[str, str],
    transforms: Mapping[str, str] | None,
    n: int,
) -> Structure:
    """The `Structure` of `learn_structure`'s result."""
    return Structure(
        params=tuple(params),
        metrics=tuple(metrics),
        objectives=tuple(objectives),
        edges=tuple(sorted(edges.values(), key=lambda e: (e.target, e.source))),
        formulas=knowledge.formulas,
        transforms={k: v for k, v in (transforms or {}).items() if k in tier},
        n_trials=n,
    )


def _dense_edges(
    params: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    objectives: Mapping[str, np.ndarray],
    knowledge: Knowledge,
    config: LearnConfig,
) -> dict[tuple[str, str], Edge]:
    """``LearnConfig.dense``'s edges (see there): direct edges from every parameter to every
    metric and from every metric to every objective; an objective's parameter parents are
    direct (``direct_edges``, or no metric) or learned (chosen by `select`, with their share of
    the gain as strength)."""
    edges = [Edge(p, m, 0.0, "direct") for p in params for m in metrics]
    edges += [Edge(m, o, 0.0, "direct") for o in objectives for m in metrics]
    for o, y in objectives.items():
        allowed = [p for p in params if (p, o) not in knowledge.forbidden]
        if config.direct_edges or not metrics:
            edges += [Edge(p, o, 0.0, "direct") for p in allowed]
        elif config.select is not None:
            sel = select_parents(
                np.asarray(y, dtype=np.float64),
                {**{p: params[p] for p in allowed}, **metrics},
                base=[*metrics],
                required=[*metrics],
                config=config.select,
            )
            edges += [Edge(p, o, sel.strength(p), "learned") for p in sel.parents if p in params]
    forbidden = set(knowledge.forbidden)
    return {(e.source, e.target): e for e in edges if (e.source, e.target) not in forbidden}


def _tables(
    params: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    objectives: Mapping[str, np.ndarray],
    runs: RunTable | None,
    config: LearnConfig,
) -> tuple[Table, int]:
    """The table PC reads (the run rows where given, else the trials) and the number of
    trials, after checking both (see `learn_structure`'s Raises)."""
    table = make_table(params, metrics, objectives)
    n = table.data.shape[0]
    if n < config.min_rows or not objectives:
        raise StructureLearningError(
            f"Structure learning needs at least {config.min_rows} trials and one objective, got "
            f"n={n} trials and objectives {list(objectives)}."
        )
    if runs is None:
        return table, n
    names = [list(params), list(metrics), list(objectives)]
    if [list(runs.params), list(runs.metrics), list(runs.objectives)] != names:
        raise StructureLearningError(
            "The run rows must hold the trials' nodes, in their order: parameters, metrics "
            f"and objectives {names}, but got {list(runs.params)}, {list(runs.metrics)} and "
            f"{list(runs.objectives)}."
        )
    return make_table(runs.params, runs.metrics, runs.objectives), n


def _pc_edges(
    table: Table,
    knowledge: Knowledge,
    metrics: Sequence[str],
    protected: set[str],
    config: LearnConfig,
    seed: int,
    runs: RunTable | None,
) -> dict[tuple[str, str], Edge]:
    """The edges bootstrapped PC finds on ``table``, oriented, with the knowledge's edges added
    and each node's in-degree capped."""
    forbidden_nodes = {n for pair in knowledge.forbidden for n in pair}
    tested = pc_metrics(table, list(metrics), protected | forbidden_nodes, config.pc_metrics)
    adj, votes = bootstrap_pc(
        table, knowledge, config.alpha, config.bootstrap, seed, tested, config.select is None,
        None if runs is None else runs.groups,
    )  # fmt: skip
    edges = orient(table, adj, votes, knowledge, config.stability)
    edges = _add_knowledge(edges, knowledge, table.tier)
    return _cap_in_degree(edges, config.max_parents)


def _known_candidates(knowledge: Knowledge, tier: Mapping[str, str]) -> Knowledge:
    """`knowledge` without the candidate edges that name a node not in the table: soft
    knowledge about a metric no trial reports (a rule that never fired) says nothing here."""
    kept = tuple((s, t) for s, t in knowledge.candidates if s in tier and t in tier)
    if kept == knowledge.candidates:
        return knowledge
    return dataclasses.replace(knowledge, candidates=kept)


def check_knowledge(
    knowledge: Knowledge, tier: Mapping[str, str], unknown_tier: str | None = None
) -> None:
    """Check `knowledge` against the tiers of the nodes (name -> ``"param"``, ``"metric"`` or
    ``"objective"``).

    Args:
        knowledge: The expert knowledge.
        tier: The known nodes' tiers.
        unknown_tier: The tier of a name not in `tier` (``"metric"`` before the metrics are
            known); None makes an unknown name an error.

    Raises:
        KnowledgeError: A name is unknown, an edge breaks the tier rules, or a formula reads a
            parameter.
    """
    pairs = [*knowledge.required, *knowledge.forbidden, *knowledge.candidates]
    pairs += [(i, f.node) for f in knowledge.formulas for i in f.inputs]
    if unknown_tier is not None:
        tier = {n: tier.get(n, unknown_tier) for pair in pairs for n in pair}
    for s, t in pairs:
        if s not in tier or t not in tier:
            raise KnowledgeError(
                f"Knowledge edge {s!r} -> {t!r} names a node that is not in the table; "
                f"known nodes: {sorted(tier)}."
            )
        if TIER_RANK[tier[s]] > TIER_RANK[tier[t]] or (tier[s] == tier[t] != "metric"):
            raise KnowledgeError(
                f"Knowledge edge {s!r} ({tier[s]}) -> {t!r} ({tier[t]}) breaks the tier rules: "
                "edges run from parameters to metrics to objectives, none into a parameter or "
                "out of an objective."
            )
    for f in knowledge.formulas:
        params = [i for i in f.inputs if tier.get(i) == "param"]
        if params:
            raise KnowledgeError(
                f"Formula {f.node!r} reads parameters {params}; formulas read metrics and "
                "objectives only. Use residual=True for a GP on the parameters, or required "
                f"edges such as ({params[0]!r}, {f.node!r})."
            )


def _add_knowledge(
    edges: dict[tuple[str, str], Edge], knowledge: Knowledge, tier: Mapping[str, str]
) -> dict[tuple[str, str], Edge]:
    """Add required and formula edges; a formula node keeps only its inputs (and parameters
    when it has a residual GP) as parents."""
    out = dict(edges)
    required = list(knowledge.required)
    for f in knowledge.formulas:
        for key in [k for k in out if k[1] == f.node]:
            if not (f.residual and tier[key[0]] == "param"):
                del out[key]
        required += [(i, f.node) for i in f.inputs]
    for s, t in required:
        out.pop((t, s), None)
        out[(s, t)] = Edge(s, t, 1.0, "required")
    graph = nx.DiGraph(list(out))
    if not nx.is_directed_acyclic_graph(graph):
        cycle = nx.find_cycle(graph)
        for s, t in cycle:  # drop a learned edge of the cycle; required edges stay
            if out[(s, t)].origin == "learned":
                del out[(s, t)]
                return _add_knowledge(out, Knowledge(), tier)
        raise KnowledgeError(f"Required and formula edges form a cycle: {cycle}.")
    return out


def _cap_in_degree(
    edges: dict[tuple[str, str], Edge], max_parents: int
) -> dict[tuple[str, str], Edge]:
    """Keep at most ``max_parents`` learned parents per node, the strongest first."""
    out = {k: e for k, e in edges.items() if e.origin != "learned"}
    by_target: dict[str, list[Edge]] = {}
    for e in edges.values():
        if e.origin == "learned":
            by_target.setdefault(e.target, []).append(e)
    for group in by_target.values():
        group.sort(key=lambda e: (-e.strength, e.source))
        out.update({(e.source, e.target): e for e in group[:max_parents]})
    return out


def _param_edges(
    params: Iterable[str],
    node: str,
    edges: Mapping[tuple[str, str], Edge],
    forbidden: set[tuple[str, str]],
    origin: str,
) -> dict[tuple[str, str], Edge]:
    """An edge of `origin` into `node` from each parameter not yet wired to it nor forbidden."""
    return {
        (p, node): Edge(p, node, 0.0, origin)
        for p in params
        if (p, node) not in edges and (p, node) not in forbidden
    }


def _prune_and_repair(
    edges: dict[tuple[str, str], Edge],
    params: list[str],
    metrics: list[str],
    objectives: list[str],
    protected: set[str],
    exact: set[str],
    forbidden: set[tuple[str, str]],
) -> dict[tuple[str, str], Edge]:
    """Drop unprotected metrics that reach no objective; give every remaining metric without
    parents all parameters as parents (PC's linear tests miss non-monotone parameter effects, the
    node's ARD GP sorts them out); then connect each parameter without a path to an objective
    directly to it. No edge the knowledge forbids is added."""
    out = dict(edges)
    while True:
        graph = nx.DiGraph(list(out))
        graph.add_nodes_from([*params, *metrics, *objectives])
        reach_o = set().union(*(nx.ancestors(graph, o) for o in objectives))
        dead = [m for m in metrics if m not in protected and m not in reach_o]
        dead = [m for m in dead if any(m in k for k in out)]
        if not dead:
            break
        out = {k: e for k, e in out.items() if k[0] not in dead and k[1] not in dead}
    used = {n for k in out for n in k} | (protected & set(metrics))
    for m in metrics:
        if m in used and m not in exact and not any(k[1] == m for k in out):
            out.update(_param_edges(params, m, out, forbidden, "repaired"))
    graph = nx.DiGraph(list(out))
    graph.add_nodes_from([*params, *metrics, *objectives])
    for o in objectives:
        if o in exact:
            continue
        ancestors = nx.ancestors(graph, o)
        for p in params:
            if p not in ancestors and (p, o) not in forbidden:
                out[(p, o)] = Edge(p, o, 0.0, "repaired")
    return out
