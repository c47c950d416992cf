"""GP parent selection over a DAG: the step of `structure.learn.learn_structure` after PC, which
chooses the parents of every objective and, recursively, of the metrics it selects, by how well a
GP on them predicts the node (`structure.select.select_parents`, one node at a time)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import networkx as nx
import numpy as np

from structure.dag import Edge, Knowledge
from structure.runs import RunTable, subsample_groups
from structure.select import SelectConfig, Selection, select_parents

__all__ = ["Rows", "run_rows", "select_structure"]


def run_rows(runs: RunTable, select_rows: int, seed: int) -> Rows:
    """At most ``select_rows`` of the run rows, spread over the trials (`subsample_groups`)."""
    rows = subsample_groups(runs.groups, select_rows, seed)
    return Rows(*({k: np.asarray(v)[rows] for k, v in part.items()} for part in runs[:3]))


class Rows(NamedTuple):
    """The node columns selection reads: one row per trial, or per run."""

    params: Mapping[str, np.ndarray]
    metrics: Mapping[str, np.ndarray]
    objectives: Mapping[str, np.ndarray]


def select_structure(
    trials: Rows,
    edges: dict[tuple[str, str], Edge],
    knowledge: Knowledge,
    select: SelectConfig,
    hints: Mapping[str, Sequence[str]],
    runs: Rows | None = None,
) -> tuple[dict[tuple[str, str], Edge], set[str]]:
    """GP parent selection for the objectives and, recursively, their selected metric parents.

    A node's candidates are every parameter and every metric that is not its descendant nor of a
    later search phase (`Knowledge.phase_order`); its PC parents and its candidate edges'
    sources are always tried, required parents kept; the base set is all (allowed) parameters;
    formula nodes keep their formula's inputs. With ``select.recurse``, a selected metric that
    nothing predicts (`Selection.predictable`: pure noise, or unlearnable at this many trials)
    is unknown at a new configuration and cannot help the network: it is excluded and the nodes
    that chose it choose again.

    With run rows (`runs`), an objective's parents are chosen in two steps
    (`_objective_on_runs`); every other choice reads the trials.

    Returns:
        The edges with the selected nodes' parents replaced, and the selected nodes.
    """
    params, metrics, objectives = trials
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
        excluded = nx.descendants(graph, node) | {node} | unpredictable
        sel, run_metrics = _choose_parents(
            node, trials, out, excluded, knowledge, select, hints, runs
        )
        _set_parents(out, graph, node, sel, run_metrics)
        chosen[node] = sel.parents
        if not select.recurse:
            continue
        if node in metrics and not sel.predictable and node not in kept:
            unpredictable.add(node)
            for child in [c for c, parents in chosen.items() if node in parents]:
                del chosen[child]
                queue.append(child)
            continue
        for p in sel.parents:
            if p in metrics and depth[node] < select.max_depth:
                depth[p] = min(depth.get(p, depth[node] + 1), depth[node] + 1)
                queue.append(p)
    return out, set(chosen)


def _choose_parents(
    node: str,
    trials: Rows,
    edges: Mapping[tuple[str, str], Edge],
    excluded: set[str],
    knowledge: Knowledge,
    select: SelectConfig,
    hints: Mapping[str, Sequence[str]],
    runs: Rows | None,
) -> tuple[Selection, dict[str, float]]:
    """``node``'s selected parents (see `_select`) among every allowed parameter and every
    metric not in ``excluded`` (its descendants, itself, the unpredictable metrics), and the
    strengths of the metrics the runs chose (empty without run rows)."""
    params, metrics, objectives = trials
    required = [s for s, t in knowledge.required if t == node]
    allowed = [p for p in params if (p, node) not in knowledge.forbidden]
    for m in metrics:
        ok = m not in excluded and not _later(m, node, knowledge)
        if m in required or (ok and (m, node) not in knowledge.forbidden):
            allowed.append(m)
    prefer = [s for (s, t), e in edges.items() if t == node and e.origin == "learned"]
    candidate = [s for s, t in knowledge.candidates if t == node]
    prefer = [s for s in dict.fromkeys([*candidate, *prefer]) if s in allowed]
    sparse = select.sparse_metrics and node in metrics
    hinted = [*candidate, *hints.get(node, ())] if sparse else []
    base = [p for p in params if p in allowed]
    if runs is not None and node in objectives:
        return _objective_on_runs(node, trials, runs, allowed, base, required, prefer, select)
    values, inputs = {**metrics, **objectives}, {**params, **metrics}
    sel = select_parents(
        np.asarray(values[node], dtype=np.float64),
        {a: inputs[a] for a in allowed},
        base=base,
        required=required,
        prefer=prefer,
        config=select,
        hints=list(dict.fromkeys(h for h in hinted if h in allowed)),
        sparse=sparse,
    )
    return sel, {}


def _set_parents(
    edges: dict[tuple[str, str], Edge],
    graph: nx.DiGraph,
    node: str,
    sel: Selection,
    run_metrics: Mapping[str, float],
) -> None:
    """Replace ``node``'s edges (but the required) in ``edges`` and ``graph`` by edges from the
    selected parents.

    A base input kept without a gain of its own (selection did not test it:
    `SelectConfig.keep_base`) is a direct edge, as the base set's are; a metric the runs chose
    is learned, with its strength there.
    """
    for key in [k for k, e in edges.items() if k[1] == node and e.origin != "required"]:
        del edges[key]
        graph.remove_edge(*key)
    for parent in sel.parents:
        if (parent, node) not in edges:
            if parent in run_metrics:
                edge = Edge(parent, node, run_metrics[parent], "learned")
            elif sel.used_base or parent not in sel.gains:
                edge = Edge(parent, node, 0.0, "direct")
            else:
                edge = Edge(parent, node, sel.strength(parent), "learned")
            edges[(parent, node)] = edge
            graph.add_edge(parent, node)


def _objective_on_runs(
    node: str,
    trials: Rows,
    runs: Rows,
    allowed: Sequence[str],
    base: Sequence[str],
    required: Sequence[str],
    prefer: Sequence[str],
    config: SelectConfig,
) -> tuple[Selection, dict[str, float]]:
    """An objective's parents from run rows, in two steps. First its metrics, chosen on the
    runs with every parameter kept (`SelectConfig.keep_base`): within one configuration, what
    varies from run to run is what the metrics explain, and the runs of a trial hold that
    evidence many times over. Then its parameters, chosen on the trials with those metrics
    required and the parameters that do not help dropped (``sparse``; with
    `SelectConfig.keep_base` every parameter stays): the parameters' effects show between
    trials, which the run rows hold no more of. Without a metric from the runs,
    the trials decide as they do without runs.

    Returns:
        The selection, and the metrics the runs chose with their strengths there.
    """
    run_inputs = {**runs.params, **runs.metrics}
    on_runs = select_parents(
        np.asarray(runs.objectives[node], dtype=np.float64),
        {a: run_inputs[a] for a in allowed},
        base=base,
        required=required,
        prefer=prefer,
        config=dataclasses.replace(config, keep_base=True),
    )
    found = {p: on_runs.strength(p) for p in on_runs.parents if p in runs.metrics}
    inputs = {**trials.params, **trials.metrics}
    target = np.asarray(trials.objectives[node], dtype=np.float64)
    if not found:
        sel = select_parents(
            target, {a: inputs[a] for a in allowed}, base, required, prefer, config
        )
        return sel, {}
    sel = select_parents(
        target,
        {a: inputs[a] for a in [*base, *found]},
        base=base,
        required=list(dict.fromkeys([*required, *found])),
        config=config,
        sparse=not config.keep_base,
    )
    return sel, found


def _later(source: str, target: str, knowledge: Knowledge) -> bool:
    """Whether `source` belongs to a later search phase than `target` (so cannot feed it)."""
    a, b = knowledge.phase_rank(source), knowledge.phase_rank(target)
    return a is not None and b is not None and a > b
