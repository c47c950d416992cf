"""Tiered structure learning: parameters -> metrics -> objectives.

`learn_structure` runs causal-learn's PC algorithm (Fisher-z conditional-independence tests)
with background knowledge (tiers; no edges within the parameter or objective tier; expert
forbidden edges) on bootstrap resamples of the trials table, keeps the adjacencies found in at
least ``stability`` of them (their frequency is the edge strength), orients them (across tiers by
tier; within the metric tier by the data's majority vote, else by the search's phase order, else
by column order), breaks any cycle by dropping the weakest edge, adds required and formula edges,
and post-processes: caps each node's in-degree, drops metrics that no parameter drives or that
reach no objective, gives parentless metrics every parameter as parent, and connects every
parameter that has no path to an objective directly to it.

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

import logging
import numbers
import warnings
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import networkx as nx
import numpy as np
from scipy.stats import norm, rankdata

from structure.dag import Edge, Knowledge, Structure
from structure.errors import KnowledgeError, StructureLearningError
from structure.select import SelectConfig, select_parents

__all__ = ["LearnConfig", "learn_structure"]

_log = logging.getLogger(__name__)
_TIER_RANK = {"param": 0, "metric": 1, "objective": 2}


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

    def __post_init__(self) -> None:
        for name in ("alpha", "stability", "bootstrap", "max_parents", "min_rows", "pc_metrics"):
            value = getattr(self, name)
            real = name in ("alpha", "stability")
            ok = isinstance(value, numbers.Real if real else numbers.Integral)
            if isinstance(value, bool) or not ok:
                raise StructureLearningError(
                    f"LearnConfig.{name} must be {'a number' if real else 'an int'}, got {value!r}."
                )
        if not (0.0 < self.alpha < 1.0 and 0.0 < self.stability <= 1.0):
            raise StructureLearningError(
                f"`0 < alpha < 1` and `0 < stability <= 1` must hold, got {self.alpha=}, "
                f"{self.stability=}."
            )
        if self.bootstrap < 1 or self.max_parents < 1 or self.min_rows < 4 or self.pc_metrics < 0:
            raise StructureLearningError(
                "`bootstrap >= 1`, `max_parents >= 1`, `min_rows >= 4` and `pc_metrics >= 0` "
                f"must hold, got {self.bootstrap=}, {self.max_parents=}, {self.min_rows=}, "
                f"{self.pc_metrics=}."
            )


@dataclass(frozen=True)
class _Table:
    """Column view of the trials table for PC: one or more columns per node."""

    data: np.ndarray  # n x c, normal scores
    column_node: list[str]  # column -> node name
    nodes: list[str]
    tier: dict[str, str]


def learn_structure(
    params: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    objectives: Mapping[str, np.ndarray],
    knowledge: Knowledge | None = None,
    config: LearnConfig | None = None,
    seed: int = 0,
    transforms: Mapping[str, str] | None = None,
    outputs: Collection[str] = (),
) -> Structure:
    """Learn a tiered DAG from a trials table.

    Args:
        params: Parameter name -> ``n x k``-dim array of its unit-cube columns (``k >= 1``).
        metrics: Metric name -> ``n``-dim array (featurized, no NaN), most relevant first: PC
            tests as many as its Fisher-z tests allow at ``n`` trials, in this order (metrics
            named in `knowledge` or `outputs` first); selection considers them all.
        objectives: Objective name -> ``n``-dim array.
        knowledge: Expert knowledge (required/forbidden edges, formulas, phase order).
        config: Options; defaults when None.
        seed: Seed of the bootstrap resampling.
        transforms: Node -> ``"identity"``/``"log1p"``, recorded in the result.
        outputs: Metrics that must stay in the structure and be predictable from the parameters
            (the outcome-constraint metrics of the tuner).

    Returns:
        The learned `Structure`.

    Raises:
        StructureLearningError: Fewer than ``config.min_rows`` trials, no objective, columns of
            different lengths or a value that is not finite.
        KnowledgeError: Knowledge names an unknown node or breaks the tier rules.
    """
    config = config or LearnConfig()
    knowledge = knowledge or Knowledge()
    table = _make_table(params, metrics, objectives)
    n = table.data.shape[0]
    if n < config.min_rows or not objectives:
        raise StructureLearningError(
            f"Structure learning needs at least {config.min_rows} trials and one objective, got "
            f"n={n} trials and objectives {list(objectives)}."
        )
    check_knowledge(knowledge, table.tier)
    protected = {f.node for f in knowledge.formulas} | {
        i for f in knowledge.formulas for i in f.inputs
    }
    protected |= {n for pair in knowledge.required for n in pair} | set(outputs)
    forbidden_nodes = {n for pair in knowledge.forbidden for n in pair}
    pc_metrics = _pc_metrics(table, [*metrics], protected | forbidden_nodes, config.pc_metrics)
    adj, votes = _bootstrap_pc(table, knowledge, config, seed, pc_metrics)
    edges = _orient(table, adj, votes, knowledge, config.stability)
    edges = _add_knowledge(edges, knowledge, table.tier)
    edges = _cap_in_degree(edges, config.max_parents)
    exact = {f.node for f in knowledge.formulas if not f.residual}
    selected: set[str] = set()
    if config.select is not None:
        edges, selected = _select(params, metrics, objectives, edges, knowledge, config)
    forbidden = set(knowledge.forbidden)
    edges = _prune_and_repair(
        edges, [*params], [*metrics], [*objectives], protected, exact, forbidden
    )
    if config.all_param_parents:
        used = {n for key in edges for n in key} | (set(outputs) & set(metrics))
        for m in metrics:
            if m in used and m not in exact and m not in selected:
                edges.update(_param_edges(params, m, edges, forbidden, "direct"))
    if config.direct_edges:
        for o in objectives:
            if o not in exact and o not in selected:
                edges.update(_param_edges(params, o, edges, forbidden, "direct"))
    return Structure(
        params=tuple(params),
        metrics=tuple(metrics),
        objectives=tuple(objectives),
        edges=tuple(sorted(edges.values(), key=lambda e: (e.target, e.source))),
        formulas=knowledge.formulas,
        transforms={k: v for k, v in (transforms or {}).items() if k in table.tier},
        n_trials=n,
    )


def _select(
    params: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    objectives: Mapping[str, np.ndarray],
    edges: dict[tuple[str, str], Edge],
    knowledge: Knowledge,
    config: LearnConfig,
) -> tuple[dict[tuple[str, str], Edge], set[str]]:
    """GP parent selection for the objectives and, recursively, their selected metric parents.

    A node's candidates are every parameter and every metric that is not its descendant nor of a
    later search phase (`Knowledge.phase_order`); its PC parents are always tried, required
    parents kept; the base set is all (allowed) parameters; formula nodes keep their formula's
    inputs. With ``select.recurse``, a selected metric that nothing
    predicts (`Selection.predictable`: pure noise, or unlearnable at this many trials) is
    unknown at a new configuration and cannot help the network: it is excluded and the nodes
    that chose it choose again.

    Returns:
        The edges with the selected nodes' parents replaced, and the selected nodes.
    """
    assert config.select is not None
    values = {**metrics, **objectives}
    formula_nodes = {f.node for f in knowledge.formulas}
    out = dict(edges)
    graph = nx.DiGraph(list(out))
    graph.add_nodes_from([*params, *metrics, *objectives])
    queue = [o for o in objectives if o not in formula_nodes]
    depth = dict.fromkeys(queue, 0)
    chosen: dict[str, tuple[str, ...]] = {}
    unpredictable: set[str] = set()
    kept = {n for pair in knowledge.required for n in pair}  # kept even when unpredictable
    while queue:
        node = queue.pop(0)
        if node in chosen or node in formula_nodes:
            continue
        below = nx.descendants(graph, node) | {node}
        required = [s for s, t in knowledge.required if t == node]
        candidates: dict[str, np.ndarray] = {
            p: v for p, v in params.items() if (p, node) not in knowledge.forbidden
        }
        for m, v in metrics.items():
            allowed = m not in below and m not in unpredictable and not _later(m, node, knowledge)
            if m in required or (allowed and (m, node) not in knowledge.forbidden):
                candidates[m] = v
        prefer = [s for (s, t), e in out.items() if t == node and e.origin == "learned"]
        sel = select_parents(
            np.asarray(values[node], dtype=np.float64),
            candidates,
            base=[p for p in params if p in candidates],
            required=required,
            prefer=[s for s in prefer if s in candidates],
            config=config.select,
        )
        for key in [k for k, e in out.items() if k[1] == node and e.origin != "required"]:
            del out[key]
            graph.remove_edge(*key)
        for parent in sel.parents:
            if (parent, node) not in out:
                out[(parent, node)] = (
                    Edge(parent, node, 0.0, "direct")
                    if sel.used_base
                    else Edge(parent, node, sel.strength(parent), "learned")
                )
                graph.add_edge(parent, node)
        chosen[node] = sel.parents
        if not config.select.recurse:
            continue
        if node in metrics and not sel.predictable and node not in kept:
            unpredictable.add(node)
            for child in [c for c, parents in chosen.items() if node in parents]:
                del chosen[child]
                queue.append(child)
            continue
        for p in sel.parents:
            if p in metrics and depth[node] < config.select.max_depth:
                depth[p] = min(depth.get(p, depth[node] + 1), depth[node] + 1)
                queue.append(p)
    return out, set(chosen)


def _later(source: str, target: str, knowledge: Knowledge) -> bool:
    """Whether `source` belongs to a later search phase than `target` (so cannot feed it)."""
    a, b = knowledge.phase_rank(source), knowledge.phase_rank(target)
    return a is not None and b is not None and a > b


def _make_table(
    params: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    objectives: Mapping[str, np.ndarray],
) -> _Table:
    """Stack the columns as normal scores (a Gaussian copula, so Fisher-z also sees monotone
    non-linear relations); drop each multi-column parameter's redundant last column."""
    cols: list[np.ndarray] = []
    column_node: list[str] = []
    tier: dict[str, str] = {}
    for name, values in params.items():
        block = np.asarray(values, dtype=np.float64)
        block = block.reshape(block.shape[0], -1)
        if block.shape[1] > 1 and np.ptp(block.sum(1)) < 1e-9:  # simplex / one-hot block
            block = block[:, :-1]
        cols.extend(block.T)
        column_node.extend([name] * block.shape[1])
        tier[name] = "param"
    for group, kind in ((metrics, "metric"), (objectives, "objective")):
        for name, values in group.items():
            if name in tier:
                raise KnowledgeError(f"Node name {name!r} appears in two tiers.")
            cols.append(np.asarray(values, dtype=np.float64).reshape(-1))
            column_node.append(name)
            tier[name] = kind
    if not cols:
        raise StructureLearningError("The trials table has no columns.")
    lengths = {name: len(c) for name, c in zip(column_node, cols)}
    if len(set(lengths.values())) > 1:
        raise StructureLearningError(
            f"Every column of the trials table needs one value per trial, got lengths {lengths}."
        )
    bad = sorted({name for name, c in zip(column_node, cols) if not np.isfinite(c).all()})
    if bad:
        raise StructureLearningError(
            f"Columns {bad} hold NaN or infinite values; impute or drop them first (the "
            "surrogate's featurization does: structure.fit_features)."
        )
    data = norm.ppf(rankdata(np.stack(cols, axis=1), axis=0) / (len(cols[0]) + 1.0))
    return _Table(data, column_node, list(tier), tier)


def _pc_metrics(table: _Table, ranked: list[str], first: set[str], most: int) -> set[str]:
    """The metrics PC tests: Fisher-z needs fewer columns than trials (``n - 3`` less the
    conditioning set), so the metrics named in knowledge or kept as outputs, then the others in
    their given (relevance) order, while the columns fit and at most `most` of them. The rest
    are left to selection."""
    n = table.data.shape[0]
    room = min(n - 3 - sum(table.tier[c] != "metric" for c in table.column_node), most)
    order = [m for m in ranked if m in first] + [m for m in ranked if m not in first]
    return set(order[: max(room, 0)]) | (first & set(ranked))


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
    pairs = [*knowledge.required, *knowledge.forbidden]
    pairs += [(i, f.node) for f in knowledge.formulas for i in f.inputs]
    if unknown_tier is not None:
        tier = {n: tier.get(n, unknown_tier) for pair in pairs for n in pair}
    for s, t in pairs:
        if s not in tier or t not in tier:
            raise KnowledgeError(
                f"Knowledge edge {s!r} -> {t!r} names a node that is not in the table; "
                f"known nodes: {sorted(tier)}."
            )
        if _TIER_RANK[tier[s]] > _TIER_RANK[tier[t]] or (tier[s] == tier[t] != "metric"):
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


def _bootstrap_pc(
    table: _Table, knowledge: Knowledge, config: LearnConfig, seed: int, pc_metrics: set[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Node-level adjacency counts and directed-vote counts over the bootstrap resamples, PC
    run on the parameters, objectives and `pc_metrics` (other metrics get no adjacency).

    Returns:
        ``adj`` (``N x N`` symmetric counts of adjacencies) and ``votes`` (``N x N``,
        ``votes[i, j]`` = resamples where PC oriented ``i -> j``), over ``N`` nodes; both are
        divided by the number of successful resamples.
    """
    rng = np.random.default_rng(seed)
    index = {name: i for i, name in enumerate(table.nodes)}
    col_idx = np.array([index[c] for c in table.column_node])
    is_obj = np.array([table.tier[c] == "objective" for c in table.column_node])
    tested = np.array([table.tier[c] != "metric" or c in pc_metrics for c in table.column_node])
    # Stage 1 learns the parameter/metric part without the objectives: conditioning on a
    # descendant never separates an upstream pair and, with near-deterministic objectives,
    # wrongly does. Stage 2 (all columns) contributes only the edges into objectives.
    stages: list[tuple[np.ndarray, bool]] = [
        (np.flatnonzero(~is_obj & tested), False),
        (np.flatnonzero(tested), True),
    ]
    size = len(table.nodes)
    adj = np.zeros((size, size))
    votes = np.zeros((size, size))
    ok = 0
    n = table.data.shape[0]
    for b in range(config.bootstrap):
        rows = np.arange(n) if b == 0 else np.asarray(rng.integers(0, n, size=n))
        node_adj = np.zeros((size, size), dtype=bool)
        node_dir = np.zeros((size, size), dtype=bool)
        failed = False
        for cols, objective_stage in stages:
            if not objective_stage and not any(
                table.tier[table.column_node[c]] == "metric" for c in cols
            ):
                continue
            graph = _run_pc(table, rows, cols, knowledge, config.alpha)
            if graph is None:
                failed = True
                break
            for i, j in zip(*np.nonzero(graph != 0)):
                ci, cj = cols[i], cols[j]
                a, c = col_idx[ci], col_idx[cj]
                if a == c or objective_stage != (is_obj[ci] or is_obj[cj]):
                    continue
                node_adj[a, c] = node_adj[c, a] = True
                if graph[j, i] == 1 and graph[i, j] == -1:  # causal-learn: i -> j
                    node_dir[a, c] = True
        if failed:
            continue
        ok += 1
        adj += node_adj
        votes += node_dir
    if ok == 0 and config.select is None:
        raise StructureLearningError(f"PC failed on all {config.bootstrap} bootstrap resamples.")
    if ok == 0:  # selection still chooses the objectives' parents
        _log.info("PC failed on all %d bootstrap resamples", config.bootstrap)
        return adj, votes
    return adj / ok, votes / ok


def _run_pc(
    table: _Table, rows: np.ndarray, cols: np.ndarray, knowledge: Knowledge, alpha: float
) -> np.ndarray | None:
    """One PC run on the given rows and columns; the causal-learn graph matrix over `cols`, or
    None on failure."""
    from causallearn.graph.GraphNode import GraphNode
    from causallearn.search.ConstraintBased.PC import pc
    from causallearn.utils.PCUtils.BackgroundKnowledge import BackgroundKnowledge

    data = table.data[np.ix_(rows, cols)]
    column_node = [table.column_node[c] for c in cols]
    std = data.std(0)
    if (std <= 1e-12).any():  # a constant column in this resample breaks Fisher-z
        data = data + 1e-6 * np.random.default_rng(len(rows)).standard_normal(data.shape)
    if np.linalg.matrix_rank(np.corrcoef(data, rowvar=False)) < data.shape[1]:
        # A metric that is a deterministic function of a parameter, or more columns than trials,
        # makes the correlation matrix singular and Fisher-z undefined. A small seeded jitter
        # (1e-3 of a normal score) keeps exact dependences as very strong ones.
        data = data + 1e-3 * np.random.default_rng(len(rows) + 1).standard_normal(data.shape)
    names = [f"c{i}" for i in range(data.shape[1])]
    gnodes = [GraphNode(name) for name in names]
    bk = BackgroundKnowledge()
    for g, node in zip(gnodes, column_node):
        bk.add_node_to_tier(g, _TIER_RANK[table.tier[node]])
    bk.forbid_within_tier(0)
    bk.forbid_within_tier(2)
    for i, a in enumerate(column_node):  # columns of one node are never adjacent
        for j, b in enumerate(column_node):
            if i != j and (a == b or (a, b) in knowledge.forbidden):
                bk.add_forbidden_by_node(gnodes[i], gnodes[j])
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cg = pc(
                data, alpha, "fisherz", background_knowledge=bk, show_progress=False,
                node_names=names, verbose=False,
            )  # fmt: skip
    except (ValueError, np.linalg.LinAlgError, ZeroDivisionError) as err:
        _log.debug("PC failed on a resample: %s", err)
        return None
    return np.asarray(cg.G.graph)


def _orient(
    table: _Table, adj: np.ndarray, votes: np.ndarray, knowledge: Knowledge, stability: float
) -> dict[tuple[str, str], Edge]:
    """Orient the stable adjacencies and make the result acyclic (weakest edges dropped)."""
    nodes = table.nodes
    rank = {name: i for i, name in enumerate(nodes)}
    candidates: list[Edge] = []
    for i, j in zip(*np.nonzero(np.triu(adj >= stability, k=1))):
        a, b = nodes[i], nodes[j]
        ta, tb = _TIER_RANK[table.tier[a]], _TIER_RANK[table.tier[b]]
        if ta != tb:
            src, dst = (a, b) if ta < tb else (b, a)
        elif votes[i, j] >= 2 * votes[j, i] and votes[i, j] >= 0.5 * adj[i, j]:
            src, dst = a, b
        elif votes[j, i] >= 2 * votes[i, j] and votes[j, i] >= 0.5 * adj[i, j]:
            src, dst = b, a
        else:
            src, dst = _phase_order(a, b, knowledge, rank)
        if (src, dst) not in knowledge.forbidden:
            candidates.append(Edge(src, dst, round(float(adj[i, j]), 4), "learned"))
    graph = nx.DiGraph()
    graph.add_nodes_from(nodes)
    kept: dict[tuple[str, str], Edge] = {}
    for e in sorted(candidates, key=lambda e: (-e.strength, rank[e.source], rank[e.target])):
        graph.add_edge(e.source, e.target)
        if nx.is_directed_acyclic_graph(graph):
            kept[(e.source, e.target)] = e
        else:
            graph.remove_edge(e.source, e.target)
    return kept


def _phase_order(a: str, b: str, knowledge: Knowledge, rank: Mapping[str, int]) -> tuple[str, str]:
    """Orient a within-tier pair by phase order, else by column order."""
    pa, pb = knowledge.phase_rank(a), knowledge.phase_rank(b)
    if pa is not None and pb is not None and pa != pb:
        return (a, b) if pa < pb else (b, a)
    if pa is not None and pb is None:
        return a, b
    if pb is not None and pa is None:
        return b, a
    return (a, b) if rank[a] < rank[b] else (b, a)


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
