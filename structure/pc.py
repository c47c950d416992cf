"""PC with Fisher-z tests on bootstrap resamples of a trials table, under tiers.

The part of `structure.learn` that proposes edges: the trials table as normal scores
(`make_table`), the metrics PC has room to test (`pc_metrics`), adjacency and orientation votes
over bootstrap resamples (`bootstrap_pc`), and the stable, acyclic, oriented edges (`orient`).
PC itself is `structure._pc_fast.pc_graph`: causal-learn's ``pc``, replicated on index arrays
(15x cheaper; causal-learn is the tests' reference).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import networkx as nx
import numpy as np
from scipy.stats import norm, rankdata

from structure._pc_fast import pc_graph
from structure.dag import Edge, Knowledge
from structure.errors import KnowledgeError, StructureLearningError

__all__ = ["TIER_RANK", "Table", "bootstrap_pc", "make_table", "orient", "pc_metrics"]

_log = logging.getLogger(__name__)
TIER_RANK = {"param": 0, "metric": 1, "objective": 2}


@dataclass(frozen=True)
class Table:
    """Column view of the trials table for PC: one or more columns per node."""

    data: np.ndarray  # n x c, normal scores
    column_node: list[str]  # column -> node name
    nodes: list[str]
    tier: dict[str, str]


def make_table(
    params: Mapping[str, np.ndarray],
    metrics: Mapping[str, np.ndarray],
    objectives: Mapping[str, np.ndarray],
) -> Table:
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
    return Table(data, column_node, list(tier), tier)


def pc_metrics(table: Table, ranked: Sequence[str], first: set[str], most: int) -> set[str]:
    """The metrics PC tests: Fisher-z needs fewer columns than trials (``n - 3`` less the
    conditioning set), so the metrics named in knowledge or kept as outputs, then the others in
    their given (relevance) order, while the columns fit and at most `most` of them. The rest
    are left to selection."""
    n = table.data.shape[0]
    room = min(n - 3 - sum(table.tier[c] != "metric" for c in table.column_node), most)
    order = [m for m in ranked if m in first] + [m for m in ranked if m not in first]
    return set(order[: max(room, 0)]) | (first & set(ranked))


def bootstrap_pc(
    table: Table,
    knowledge: Knowledge,
    alpha: float,
    bootstrap: int,
    seed: int,
    pc_metrics: set[str],
    must_succeed: bool,
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Node-level adjacency counts and directed-vote counts over the bootstrap resamples, PC
    run on the parameters, objectives and `pc_metrics` (other metrics get no adjacency).

    With `groups` (``n``-dim labels: the trial of each row when rows are runs), a resample
    draws whole groups, so that rows which share a configuration stay together.

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
    members = (
        [np.arange(n)]
        if groups is None
        else [np.flatnonzero(groups == g) for g in np.unique(groups)]
    )
    for b in range(bootstrap):
        if b == 0:
            rows = np.arange(n)
        elif groups is None:
            rows = np.asarray(rng.integers(0, n, size=n))
        else:
            drawn = rng.integers(0, len(members), size=len(members))
            rows = np.concatenate([members[g] for g in drawn])
        node_adj = np.zeros((size, size), dtype=bool)
        node_dir = np.zeros((size, size), dtype=bool)
        failed = False
        for cols, objective_stage in stages:
            if not objective_stage and not any(
                table.tier[table.column_node[c]] == "metric" for c in cols
            ):
                continue
            graph = _run_pc(table, rows, cols, knowledge, alpha)
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
    if ok == 0 and must_succeed:
        raise StructureLearningError(f"PC failed on all {bootstrap} bootstrap resamples.")
    if ok == 0:  # selection still chooses the objectives' parents
        _log.info("PC failed on all %d bootstrap resamples", bootstrap)
        return adj, votes
    return adj / ok, votes / ok


def _run_pc(
    table: Table, rows: np.ndarray, cols: np.ndarray, knowledge: Knowledge, alpha: float
) -> np.ndarray | None:
    """One PC run on the given rows and columns: causal-learn's graph matrix over `cols`
    (`structure._pc_fast.pc_graph`), or None where a Fisher-z test fails."""
    data = table.data[np.ix_(rows, cols)]
    std = data.std(0)
    if (std <= 1e-12).any():  # a constant column in this resample breaks Fisher-z
        data = data + 1e-6 * np.random.default_rng(len(rows)).standard_normal(data.shape)
    if np.linalg.matrix_rank(np.corrcoef(data, rowvar=False)) < data.shape[1]:
        # A metric that is a deterministic function of a parameter, or more columns than trials,
        # makes the correlation matrix singular and Fisher-z undefined. A small seeded jitter
        # (1e-3 of a normal score) keeps exact dependences as very strong ones.
        data = data + 1e-3 * np.random.default_rng(len(rows) + 1).standard_normal(data.shape)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return pc_graph(data, alpha, _forbidden(table, cols, knowledge))
    except (ValueError, np.linalg.LinAlgError, ZeroDivisionError) as err:
        _log.debug("PC failed on a resample: %s", err)
        return None


def _forbidden(table: Table, cols: np.ndarray, knowledge: Knowledge) -> np.ndarray:
    """``c x c``-dim bool over `cols`, ``[i, j]``: the edge ``i -> j`` is forbidden (what
    causal-learn's background knowledge said: tiers in `TIER_RANK` order, no edge within the
    parameter or the objective tier, none between two columns of one node, and the knowledge's
    forbidden pairs)."""
    column_node = [table.column_node[c] for c in cols]
    tier = np.array([TIER_RANK[table.tier[node]] for node in column_node])
    same_tier = tier[:, None] == tier[None, :]
    closed = np.isin(tier, (TIER_RANK["param"], TIER_RANK["objective"]))
    forbidden = (tier[:, None] > tier[None, :]) | (same_tier & closed[:, None])
    names = np.array(column_node, dtype=object)
    forbidden |= names[:, None] == names[None, :]
    for a, b in knowledge.forbidden:
        forbidden[np.ix_(names == a, names == b)] = True
    np.fill_diagonal(forbidden, False)
    return forbidden


def orient(
    table: Table, adj: np.ndarray, votes: np.ndarray, knowledge: Knowledge, stability: float
) -> dict[tuple[str, str], Edge]:
    """Orient the stable adjacencies and make the result acyclic (weakest edges dropped)."""
    nodes = table.nodes
    rank = {name: i for i, name in enumerate(nodes)}
    candidates: list[Edge] = []
    for i, j in zip(*np.nonzero(np.triu(adj >= stability, k=1))):
        a, b = nodes[i], nodes[j]
        ta, tb = TIER_RANK[table.tier[a]], TIER_RANK[table.tier[b]]
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
