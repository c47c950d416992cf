"""Extraction: the cheapest graph an e-graph holds, under the search's own cost model.

Each e-node is priced by `rewrite.costmodel.node_cost` on its concrete node (op, attributes, input and
output types), as the engine prices graphs, and a weight vector turns that cost into one number:
for an objective, its additive part normalized by the input graph's value (``latency``: device
plus host seconds; ``flops``, ``bytes``, ``kernels`` as they are; ``peak_memory``, which is not a
sum over nodes: the bytes a kernel allocates, a proxy). Two extractors:

* `greedy`: every class takes the e-node of least tree cost (its own cost plus its input classes'
  best), relaxed to a fixpoint; strict improvements only, so the choice is acyclic;
* `ilp`: one binary per e-node, each chosen e-node needs one chosen e-node in each input class,
  the output classes need one, and an order variable per class rules out cycles (Tensat's
  formulation; the order variables only on classes that lie on a cycle), solved by scipy's
  ``milp`` (HiGHS) in a child process killed at the time limit. Classes holding a leaf
  (input, parameter, constant) take it: it is free and reads nothing. A shared e-node is paid
  once (DAG cost), which tree cost cannot see.

`build_graph` turns a choice (class -> e-node) into an IR graph with the input graph's inputs and
outputs (type inference runs on every node; a cycle raises `SearchError`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rewrite.builder import GraphBuilder
from rewrite.costmodel import node_cost
from rewrite.errors import SearchError
from rewrite.ir import Graph, Node, Value
from rewrite.ops import get_op
from rewrite.optimize.saturate.egraph import Snapshot, TermGraph

__all__ = ["Choice", "Costs", "build_graph", "dag_cost", "greedy", "ilp", "node_costs"]

_LEAVES = ("input", "param", "const")
Choice = dict[int, tuple[int, int]]
"""Class id -> the ``(node id, output)`` chosen for it."""


@dataclass
class Costs:
    """Per-e-node costs of one extraction problem.

    Attributes:
        fields: Node id -> ``(latency seconds, flops, bytes, kernels, allocated bytes)``.
        children: Node id -> its distinct input classes.
        leaves: Class id -> a leaf node id it holds.
    """

    fields: dict[int, tuple[float, float, float, float, float]]
    children: dict[int, tuple[int, ...]]
    leaves: dict[int, int]

    def weighted(self, w: Sequence[float] | np.ndarray) -> dict[int, float]:
        """Node id -> ``w . fields`` (a tiny positive floor keeps ties acyclic)."""
        wv = np.asarray(w, dtype=np.float64)
        return {n: max(float(np.dot(wv, f)), 0.0) + 1e-12 for n, f in self.fields.items()}


def node_costs(tg: TermGraph, snap: Snapshot, device: Any) -> Costs:
    """Price every distinct e-node of ``snap`` on ``device``."""
    fields: dict[int, tuple[float, float, float, float, float]] = {}
    children: dict[int, tuple[int, ...]] = {}
    leaves: dict[int, int] = {}
    for nid in snap.node_classes:
        rec = tg.nodes[nid]
        key = tg.keys[rec.key]
        ins = tuple(Value(-1 - j, 0) for j in range(len(rec.args)))
        node = Node(0, key.op, key.attrs, ins, tuple(tg.types[a] for a in rec.args), key.types)
        if key.op in _LEAVES:
            leaves.setdefault(snap.node_classes[nid][0], nid)
            fields[nid] = (0.0, 0.0, 0.0, 0.0, 0.0)
        else:
            c = node_cost(node, device)
            alloc = 0 if get_op(key.op).kind == "view" else sum(t.nbytes for t in key.types)
            fields[nid] = (c[0] + c[4], float(c[1]), float(c[2]), float(c[3]), float(alloc))
        children[nid] = tuple(dict.fromkeys(snap.class_of[a] for a in rec.args))
    return Costs(fields, children, leaves)


def greedy(costs: Costs, snap: Snapshot, w: Sequence[float] | np.ndarray) -> Choice:
    """Least tree cost per class, relaxed to a fixpoint (see the module docstring)."""
    cost = costs.weighted(w)
    best: dict[int, float] = {}
    choice: Choice = {}
    order = sorted(snap.node_classes)
    changed = True
    while changed:
        changed = False
        for nid in order:
            total = cost[nid]
            for d in costs.children[nid]:
                b = best.get(d)
                if b is None:
                    break
                total += b
            else:
                for i, c in enumerate(snap.node_classes[nid]):
                    if total < best.get(c, math.inf) * (1 - 1e-12):
                        best[c] = total
                        choice[c] = (nid, i)
                        changed = True
    return choice


@dataclass
class IlpOutcome:
    """What `ilp` returned: the choice (None when it found none), HiGHS' status, seconds."""

    choice: Choice | None
    status: str
    seconds: float


def _walk(costs: Costs, roots: Sequence[int], nodes: Callable[[int], Iterable[int]]) -> set[int]:
    """The non-leaf classes reachable from ``roots`` through the e-nodes ``nodes(c)`` of each."""
    seen: set[int] = set()
    stack = list(roots)
    while stack:
        c = stack.pop()
        if c in seen or c in costs.leaves:
            continue
        seen.add(c)
        for n in nodes(c):
            stack.extend(costs.children[n])
    return seen


def _reachable(costs: Costs, snap: Snapshot, roots: Sequence[int]) -> list[int]:
    return sorted(_walk(costs, roots, lambda c: (n for n, _ in snap.members.get(c, ()))))


def dag_cost(costs: Costs, snap: Snapshot, choice: Choice, roots: Sequence[int], w: Any) -> float:
    """The weighted cost of the distinct e-nodes ``choice`` uses from ``roots`` (each once)."""
    cost = costs.weighted(w)
    used = {choice[c][0] for c in _walk(costs, roots, lambda c: (choice[c][0],))}
    return float(sum(cost[n] for n in used))


class _IlpProblem:
    """Tensat's extraction ILP over the classes reachable from the roots (module docstring):
    variables ``x`` (one per usable e-node) then ``t`` (one per class on a cycle)."""

    def __init__(self, costs: Costs, snap: Snapshot, roots: Sequence[int], w: Any) -> None:
        self.costs, self.snap = costs, snap
        self.cost = costs.weighted(w)
        self.classes = _reachable(costs, snap, roots)
        self.inside = set(self.classes)
        self.nodes = sorted(
            {
                n
                for c in self.classes
                for n, _ in snap.members.get(c, ())
                if not set(costs.children[n]) & set(snap.node_classes[n])  # reads its own class
            }
        )
        self.nidx = {n: i for i, n in enumerate(self.nodes)}
        self.comp = _components(self.classes, costs, snap)
        loops = _nontrivial(self.comp, self.classes, costs, snap)
        cyclic = sorted(c for c in self.classes if self.comp[c] in loops)
        self.tidx = {c: i for i, c in enumerate(cyclic)}  # order variables: classes on a cycle
        self.nx, self.nt = len(self.nodes), len(cyclic)
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []
        self.lb: list[float] = []
        self._constraints(roots)

    def _row(self, entries: list[tuple[int, float]], low: float) -> None:
        r = len(self.lb)
        for col, v in entries:
            self.rows.append(r)
            self.cols.append(col)
            self.vals.append(v)
        self.lb.append(low)

    def _constraints(self, roots: Sequence[int]) -> None:
        nx, eps, snap, comp = self.nx, 1.0 / (self.nt + 1), self.snap, self.comp
        members = {
            c: [self.nidx[n] for n, _ in snap.members.get(c, ()) if n in self.nidx]
            for c in self.classes
        }
        for c in dict.fromkeys(roots):
            if c in self.inside:
                self._row([(j, 1.0) for j in members[c]], 1.0)
        for n in self.nodes:
            j = self.nidx[n]
            outs = [c for c in snap.node_classes[n] if c in self.inside]
            for d in self.costs.children[n]:
                if d not in self.inside:
                    continue
                self._row([(m, 1.0) for m in members[d]] + [(j, -1.0)], 0.0)
                for oc in outs:
                    if comp[oc] == comp[d]:  # an edge inside a cycle: order the two classes
                        ti, td = nx + self.tidx[oc], nx + self.tidx[d]
                        self._row([(ti, 1.0), (td, -1.0), (j, -(1.0 + eps))], -1.0)

    def scipy_problem(self, upper: float | None) -> tuple[Any, ...]:
        """``(c, constraints, integrality, bounds)`` for ``scipy.optimize.milp``."""
        from scipy.optimize import Bounds, LinearConstraint
        from scipy.sparse import coo_matrix

        n, r = self.nx + self.nt, len(self.lb)
        c = np.concatenate([[self.cost[x] for x in self.nodes], np.zeros(self.nt)])
        a = coo_matrix((self.vals, (self.rows, self.cols)), shape=(r, n)).tocsr()
        cons = [LinearConstraint(a, np.array(self.lb), np.full(r, np.inf))]
        if upper is not None:
            cons.append(LinearConstraint(c[None, :], -np.inf, upper * (1 + 1e-9) + 1e-12))
        integrality = np.concatenate([np.ones(self.nx), np.zeros(self.nt)])
        return c, cons, integrality, Bounds(np.zeros(n), np.ones(n))

    def choice(self, sol: np.ndarray) -> Choice:
        """The class -> e-node choice a solution makes (the cheapest chosen e-node whose input
        classes on its cycle come before its own)."""
        x, t = sol[: self.nx], sol[self.nx :]
        comp, tidx, out = self.comp, self.tidx, {}
        for c in self.classes:
            picked = [
                (self.cost[n], n, i)
                for n, i in self.snap.members.get(c, ())
                if n in self.nidx
                and x[self.nidx[n]] > 0.5
                and all(
                    t[tidx[c]] > t[tidx[d]]
                    for d in self.costs.children[n]
                    if d in self.inside and comp[d] == comp[c]
                )
            ]
            if picked:
                _, n, i = min(picked)
                out[c] = (n, i)
        return out


def ilp(
    costs: Costs,
    snap: Snapshot,
    roots: Sequence[int],
    w: Sequence[float] | np.ndarray,
    time_limit: float,
    upper: float | None = None,
) -> IlpOutcome:
    """Optimal DAG-cost extraction by integer programming (see the module docstring).

    Args:
        costs: The e-node costs.
        snap: The e-graph.
        roots: Classes of the graph's outputs.
        w: Weights of the cost fields.
        time_limit: Seconds it may take (building the problem included).
        upper: A known solution's cost (e.g. greedy's `dag_cost`): the objective is bounded by
            it, which prunes the branch and bound.

    Returns:
        An `IlpOutcome`: ``status`` ``"optimal"``, ``"time limit (incumbent)"`` (a feasible
        choice, not proven optimal), ``"time limit (no solution)"`` or ``"failed: ..."``.
    """
    t0 = time.perf_counter()
    prob = _IlpProblem(costs, snap, roots, w)
    if not prob.lb:
        return IlpOutcome({}, "optimal", time.perf_counter() - t0)
    left = max(time_limit - (time.perf_counter() - t0), 1e-9)
    code, sol, message = _solve(prob.scipy_problem(upper), left)
    secs = time.perf_counter() - t0
    if sol is None:
        status = "time limit (no solution)" if code == 1 else f"failed: {message}"
        return IlpOutcome(None, status, secs)
    status = "optimal" if code == 0 else "time limit (incumbent)"
    return IlpOutcome(prob.choice(sol), status, secs)


def _milp(problem: tuple[Any, ...], time_limit: float, conn: Any) -> None:
    """Child process: solve ``problem`` and send ``(status, x, message)`` back."""
    from scipy.optimize import milp

    c, cons, integrality, bounds = problem
    try:
        res = milp(
            c,
            constraints=cons,
            integrality=integrality,
            bounds=bounds,
            options={"time_limit": time_limit, "disp": False, "mip_rel_gap": 1e-3},
        )
        conn.send((int(res.status), res.x, str(res.message)))
    except (ValueError, MemoryError) as err:
        conn.send((4, None, str(err)))


def _solve(problem: tuple[Any, ...], time_limit: float) -> tuple[int, Any, str]:
    """``(status, x, message)`` of HiGHS on ``problem`` (scipy's codes: 0 optimal, 1 time
    limit), in a forked process killed at the time limit: HiGHS checks its own limit only
    between steps, and one LP of a large e-graph can outlast it many times over."""
    import multiprocessing as mp

    ctx = mp.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_milp, args=(problem, time_limit, send), daemon=True)
    proc.start()
    send.close()
    try:
        if recv.poll(time_limit * 1.05 + 1.0):
            return recv.recv()  # type: ignore[no-any-return]
        return 1, None, "killed at the time limit"
    except EOFError:
        return 4, None, f"the solver process died (exit code {proc.exitcode})"
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join(5)
        recv.close()


def _edges(c: int, costs: Costs, snap: Snapshot) -> list[int]:
    return [d for n, _ in snap.members.get(c, ()) for d in costs.children[n]]


def _components(classes: Sequence[int], costs: Costs, snap: Snapshot) -> dict[int, int]:
    """Strongly connected component of each class of ``classes`` (Tarjan, iterative) in the
    graph of class -> input classes; leaf classes are left out."""
    inside = set(classes)
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    comp: dict[int, int] = {}
    stack: list[int] = []
    on: set[int] = set()
    counter = 0
    for start in classes:
        if start in index:
            continue
        work = [(start, iter([d for d in _edges(start, costs, snap) if d in inside]))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter([d for d in _edges(w, costs, snap) if d in inside])))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp[w] = v
                    if w == v:
                        break
    return comp


def _nontrivial(
    comp: Mapping[int, int], classes: Sequence[int], costs: Costs, snap: Snapshot
) -> set[int]:
    """Components that hold a cycle (more than one class, or a class reading itself)."""
    size: dict[int, int] = {}
    for c in classes:
        size[comp[c]] = size.get(comp[c], 0) + 1
    out = {k for k, v in size.items() if v > 1}
    out |= {comp[c] for c in classes if c in _edges(c, costs, snap)}
    return out


def build_graph(
    tg: TermGraph,
    snap: Snapshot,
    costs: Costs,
    choice: Mapping[int, tuple[int, int]],
    graph: Graph,
    handles: Mapping[Value, int],
) -> tuple[Graph, list[int]]:
    """The IR graph a choice extracts, with ``graph``'s inputs and outputs.

    Args:
        tg: The e-graph.
        snap: Its classes.
        costs: The e-node table (for the leaves).
        choice: Class id -> chosen ``(node id, output)``; classes holding a leaf take the leaf.
        graph: The input graph (its inputs, in order, and its outputs).
        handles: The input graph's values -> their e-graph handles.

    Returns:
        ``(graph, node ids)``: the extracted graph and the e-nodes it uses.

    Raises:
        SearchError: If the choice has a cycle or leaves a needed class without a node.
    """
    b = GraphBuilder(graph.name)
    value: dict[int, Value] = {}
    for nid in graph.inputs:
        a = graph.node(nid).attrs
        value[snap.class_of[handles[Value(nid, 0)]]] = b.input(a["name"], a["shape"], a["dtype"])
    roots = [snap.class_of[handles[v]] for v in graph.outputs]
    used = _build_classes(tg, snap, costs, choice, b, value, roots)
    return b.build([value[c] for c in roots]), used


def _build_classes(
    tg: TermGraph,
    snap: Snapshot,
    costs: Costs,
    choice: Mapping[int, tuple[int, int]],
    b: GraphBuilder,
    value: dict[int, Value],
    roots: Sequence[int],
) -> list[int]:
    """Add the chosen e-node of every class ``roots`` need to ``b`` (inputs first, iteratively);
    ``value`` maps classes to built values. Returns the e-nodes built."""
    built: dict[int, Node] = {}
    state: dict[int, int] = {}  # class -> 1 on the stack, 2 done
    used: list[int] = []

    def pick(c: int) -> tuple[int, int]:
        leaf = costs.leaves.get(c)
        if leaf is not None:
            return leaf, 0
        if c not in choice:
            raise SearchError(f"extraction left e-class {c} without a node.")
        return choice[c]

    for root in roots:
        stack = [root]
        while stack:
            c = stack[-1]
            if c in value:
                stack.pop()
                continue
            nid, i = pick(c)
            rec = tg.nodes[nid]
            todo = [snap.class_of[a] for a in rec.args if snap.class_of[a] not in value]
            if todo and state.get(c) == 1:
                raise SearchError(f"extraction chose a cycle through e-class {c}.")
            if todo:
                state[c] = 1
                for d in todo:
                    if state.get(d) == 1:
                        raise SearchError(f"extraction chose a cycle through e-class {d}.")
                stack.extend(todo)
                continue
            node = built.get(nid)
            if node is None:
                key = tg.keys[rec.key]
                ins = [value[snap.class_of[a]] for a in rec.args]
                node = built[nid] = b.add_node(key.op, ins, dict(key.attrs))
                used.append(nid)
            value[c] = Value(node.id, i)
            state[c] = 2
            stack.pop()
    return used
