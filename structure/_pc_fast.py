"""PC with Fisher-z tests and tiered background knowledge, as causal-learn runs it, on index arrays.

`pc_graph` computes what causal-learn's ``pc(data, alpha, test, background_knowledge=bk)``
(stable skeleton, ``uc_rule=0``, ``uc_priority=2``) computes, on every bootstrap resample.
causal-learn's skeleton discovery loops over node objects and edits a ``GeneralGraph`` edge by
edge, and its orientation phase deep-copies the graph and scans the knowledge's rule sets on
every query, which costs far more than the cached p-values. `pc_graph` returns the same graph
matrix from an index adjacency matrix, the p-values of one depth computed together, and plain
lists for the orientation; ``tests/structure/test_pc_fast.py`` checks it against causal-learn.
Most of its time is the skeleton's enumeration of conditioning sets; the orientation is a small
part. Timings against causal-learn: docs/structure.md and benchmarks/README.md,
"bench_structure: proposal time".

What is replicated, and why each matters for the result:

- the skeleton is order-independent (``stable=True``): per depth, every neighbour ``y`` of every
  ``x`` is tested against every ``depth``-subset of ``x``'s other neighbours, all of them (a
  test that raises anywhere makes the run fail, as causal-learn's does), and the edges with a
  p-value above ``alpha``, and those knowledge forbids both ways, go at the end of the depth;
- the separating set of a removed pair is the union of the conditioning sets that separated it
  at that depth (causal-learn keeps a list of them; only ``y in S`` for some ``S`` is read);
- `orient_by_background_knowledge`, ``uc_sepset`` with priority 2 and Meek's rules visit edges,
  unshielded triples, triangles and kites in causal-learn's order (``find_adj`` lists the
  tails, then the arrowheads, row by row), which decides conflicting colliders;
- Meek's acyclicity check reads causal-learn's ancestor matrix (``GeneralGraph.dpath``), which it
  updates incrementally and does not close transitively; it is kept the same way, including
  the rebuild when ``uc_sepset`` removes a directed edge to re-add it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import combinations

import numpy as np

__all__ = ["fisher_z_p", "pc_graph"]

_CLIP = 1.0 - np.finfo(float).eps


def fisher_z_p(corr: np.ndarray, n: int, x: int, y: int, cond: Iterable[int]) -> float:
    """The Fisher-z p-value of ``x _||_ y | cond``: causal-learn's, as ``erfc(|z| / sqrt 2)``.

    Args:
        corr: ``c x c``-dim correlation matrix of the data.
        n: The number of rows of the data.
        x: Column index.
        y: Column index.
        cond: Column indices of the conditioning set, sorted ascending.

    Returns:
        The p-value (NaN when the partial correlation is undefined).

    Raises:
        ValueError: The correlation submatrix is singular, or ``n < len(cond) + 3``.
    """
    cond = tuple(cond)
    var = [x, y, *cond]
    sub = corr[var][:, var]
    try:
        inv = np.linalg.inv(sub)
    except np.linalg.LinAlgError:
        raise ValueError("Data correlation matrix is singular.") from None
    with np.errstate(divide="ignore", invalid="ignore"):
        r = -inv[0, 1] / math.sqrt(abs(inv[0, 0] * inv[1, 1]))
    if abs(r) >= 1:  # a tiny sample or an exact dependence, as causal-learn clips
        r = _CLIP * math.copysign(1.0, r)
    z = math.sqrt(n - len(cond) - 3) * abs(math.atanh(r))
    return math.erfc(z / math.sqrt(2.0))


def _p_values(corr: np.ndarray, n: int, keys: list[tuple[int, ...]]) -> list[float]:
    """`fisher_z_p` of each key ``(x, y, *cond)`` (one conditioning-set size), the inverses of all
    submatrices in one batched call: `np.linalg.inv` solves each matrix of a stack as it solves
    one matrix, and the elementwise arithmetic is IEEE-exact, so the numbers are
    `fisher_z_p`'s."""
    if not keys:
        return []
    m = len(keys[0])
    if n - (m - 2) - 3 < 0:
        raise ValueError("math domain error")  # `fisher_z_p`'s sqrt of a negative count
    idx = np.array(keys, dtype=np.intp)
    try:
        inv = np.linalg.inv(corr[idx[:, :, None], idx[:, None, :]])
    except np.linalg.LinAlgError:
        raise ValueError("Data correlation matrix is singular.") from None
    with np.errstate(divide="ignore", invalid="ignore"):
        r = (-inv[:, 0, 1] / np.sqrt(np.abs(inv[:, 0, 0] * inv[:, 1, 1]))).tolist()
    scale = math.sqrt(n - (m - 2) - 3)
    root2 = math.sqrt(2.0)
    atanh, erfc, copysign = math.atanh, math.erfc, math.copysign
    return [
        erfc(scale * abs(atanh(rk if abs(rk) < 1 else _CLIP * copysign(1.0, rk))) / root2)
        for rk in r
    ]


def pc_graph(data: np.ndarray, alpha: float, forbidden: np.ndarray) -> np.ndarray:
    """causal-learn's ``pc(data, alpha, fisher-z, background_knowledge=bk).G.graph`` (stable,
    ``uc_rule=0``, ``uc_priority=2``) for knowledge that forbids edges and requires none.

    The same graph, computed faster (figures: benchmarks/README.md, "bench_structure: proposal
    time"; the module docstring says what is replicated).

    Args:
        data: ``n x c``-dim data.
        alpha: Significance level of the Fisher-z tests, in ``(0, 1)``.
        forbidden: ``c x c``-dim bool, ``forbidden[i, j]``: the knowledge forbids ``i -> j``
            (causal-learn's ``bk.is_forbidden(node_i, node_j)``: tiers, forbidden pairs).

    Returns:
        ``c x c``-dim int graph in causal-learn's encoding: ``graph[j, i] == 1`` and
        ``graph[i, j] == -1`` is ``i -> j``, both ``-1`` is ``i -- j``, both 0 no edge.

    Raises:
        ValueError: A Fisher-z test failed (a singular correlation submatrix, too few rows), or
            the data has no column; causal-learn fails on these too.
    """
    n, c = data.shape
    if c == 0:
        raise ValueError("PC needs at least one column.")
    corr = np.corrcoef(data.T)
    forbid = np.asarray(forbidden, dtype=bool).tolist()
    adj, sepsets = _skeleton(corr, n, alpha, forbid)
    return np.array(_orient(adj, sepsets, forbid), dtype=int)


def _skeleton(
    corr: np.ndarray, n: int, alpha: float, forbid: list[list[bool]]
) -> tuple[list[list[bool]], dict[tuple[int, int], set[int]]]:
    """causal-learn's stable skeleton discovery: the adjacency matrix and, per removed pair
    ``(x, y)`` with ``x < y``, the union of its separating sets."""
    c = len(forbid)
    adj = [[i != j for j in range(c)] for i in range(c)]
    sepsets: dict[tuple[int, int], set[int]] = {}
    depth = -1
    while max(sum(row) for row in adj) - 1 > depth:
        depth += 1
        neighbours = [[j for j in range(c) if row[j]] for row in adj]
        # The tests of x's pass over its neighbour y and of y's pass over x, each once.
        keys: list[tuple[int, ...]] = []
        for x in range(c):
            for y in neighbours[x]:
                if y > x:
                    conds = set(combinations([v for v in neighbours[x] if v != y], depth))
                    conds.update(combinations([v for v in neighbours[y] if v != x], depth))
                    keys.extend((x, y, *s) for s in conds)
        removed: set[tuple[int, int]] = set()
        for key, p in zip(keys, _p_values(corr, n, keys)):
            if p > alpha:
                pair = (key[0], key[1])
                removed.add(pair)
                sepsets.setdefault(pair, set()).update(key[2:])
        for x in range(c):  # knowledge that forbids both directions removes the edge
            for y in neighbours[x]:
                if x < y and forbid[x][y] and forbid[y][x]:
                    removed.add((x, y))
                    sepsets.setdefault((x, y), set())
        for x, y in removed:
            adj[x][y] = adj[y][x] = False
    return adj, sepsets


class _Graph:
    """causal-learn's ``GeneralGraph`` restricted to what PC's orientation reaches: undirected
    and directed edges (``g``, its encoding) and its ancestor matrix ``dpath``
    (``dpath[j][i] == 1``: ``i`` is an ancestor of ``j``)."""

    def __init__(self, adj: list[list[bool]]) -> None:
        c = len(adj)
        self.c = c
        self.g = [[-1 if adj[i][j] else 0 for j in range(c)] for i in range(c)]
        self.dpath = [[int(i == j) for j in range(c)] for i in range(c)]

    def directed(self, i: int, j: int) -> bool:
        """``i -> j``."""
        return self.g[i][j] == -1 and self.g[j][i] == 1

    def undirected(self, i: int, j: int) -> bool:
        return self.g[i][j] == -1 and self.g[j][i] == -1

    def _adjust_dpath(self, i: int, j: int) -> None:
        # `GeneralGraph.adjust_dpath`, verbatim: not a transitive closure.
        dpath = self.dpath
        dpath[j][i] = 1
        for k in range(self.c):
            if dpath[i][k] == 1:
                dpath[j][k] = 1
            if dpath[k][j] == 1:
                dpath[k][i] = 1

    def orient(self, i: int, j: int) -> None:
        """Replace the edge between ``i`` and ``j`` with ``i -> j``, as ``remove_edge`` then
        ``add_edge`` / ``add_directed_edge`` do."""
        was_directed = self.directed(i, j) or self.directed(j, i)
        self.g[i][j] = self.g[j][i] = 0
        if was_directed:  # `remove_edge` rebuilds dpath from the remaining edges
            self.dpath = [[int(a == b) for b in range(self.c)] for a in range(self.c)]
            pairs = [(a, b) for a in range(self.c) for b in range(a + 1, self.c) if self.g[b][a]]
            for a, b in reversed(pairs):
                if self.directed(a, b):
                    self._adjust_dpath(a, b)
                elif self.directed(b, a):
                    self._adjust_dpath(b, a)
        self.g[j][i], self.g[i][j] = 1, -1
        self._adjust_dpath(i, j)

    def ordered_adjacencies(self) -> list[tuple[int, int]]:
        """``CausalGraph.find_adj``: ``(i, j)`` for each tail at ``j`` (``g[j][i] == -1``), then
        for each arrowhead at ``j``, each list in row-major order of ``g``."""
        c, g = self.c, self.g
        tails = [(i, j) for j in range(c) for i in range(c) if g[j][i] == -1]
        heads = [(i, j) for j in range(c) for i in range(c) if g[j][i] == 1]
        return tails + heads

    def triples(self) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
        """``find_unshielded_triples`` and ``find_triangles``, in their order: pairs of
        adjacencies ``(a, b), (b, c)`` in ``permutations(find_adj(), 2)`` order."""
        adjs = self.ordered_adjacencies()
        after: dict[int, list[int]] = {}
        for a, b in adjs:
            after.setdefault(a, []).append(b)
        unshielded, triangles = [], []
        for a, b in adjs:
            for c in after.get(b, ()):
                if c == a:
                    continue
                if self.g[a][c] == 0:
                    unshielded.append((a, b, c))
                else:
                    triangles.append((a, b, c))
        return unshielded, triangles


def _kites(graph: _Graph, triangles: list[tuple[int, int, int]]) -> list[tuple[int, ...]]:
    """``find_kites``: pairs of triangles ``(i, j, t), (i, k, t)`` with ``j < k`` and ``j``, ``k``
    not adjacent, in ``permutations(find_triangles(), 2)`` order, as ``(i, j, k, t)``."""
    groups: dict[tuple[int, int], list[int]] = {}
    for i, j, t in triangles:
        groups.setdefault((i, t), []).append(j)
    kites: list[tuple[int, ...]] = []
    for i, j, t in triangles:
        kites.extend((i, j, k, t) for k in groups[(i, t)] if j < k and graph.g[j][k] == 0)
    return kites


def _orient(
    adj: list[list[bool]], sepsets: dict[tuple[int, int], set[int]], forbid: list[list[bool]]
) -> list[list[int]]:
    """causal-learn's ``orient_by_background_knowledge``, ``uc_sepset(priority=2)`` and ``meek``
    on the skeleton; the graph matrix."""
    graph = _Graph(adj)
    c = graph.c
    for i in range(c):  # orient_by_background_knowledge, over get_graph_edges (i < j)
        for j in range(i + 1, c):
            if adj[i][j]:
                if forbid[j][i]:
                    graph.orient(i, j)
                elif forbid[i][j]:
                    graph.orient(j, i)
    unshielded, _ = graph.triples()
    for x, y, z in unshielded:  # uc_sepset, priority 2: keep existing orientations
        if x > z or forbid[x][y] or forbid[z][y] or y in sepsets[(x, z)]:
            continue
        if not graph.directed(y, x) and not graph.directed(y, z):
            graph.orient(x, y)
            graph.orient(z, y)
    unshielded, triangles = graph.triples()
    kites = _kites(graph, triangles)
    return _meek(graph, unshielded, triangles, kites, forbid)


def _meek(
    graph: _Graph,
    unshielded: list[tuple[int, int, int]],
    triangles: list[tuple[int, int, int]],
    kites: list[tuple[int, ...]],
    forbid: list[list[bool]],
) -> list[list[int]]:
    """causal-learn's ``meek``: rules 1-3 until none applies, an orientation skipped where
    ``dpath`` says it would close a cycle, or where the knowledge forbids it (kept as causal-learn
    has it; never the case here, as `_orient` already directed every edge with a forbidden
    direction)."""
    loop = True
    while loop:
        loop = False
        for i, j, k in unshielded:
            if graph.directed(i, j) and graph.undirected(j, k) and not forbid[j][k]:
                loop |= _orient_acyclic(graph, j, k)
        for i, j, k in triangles:
            if (
                graph.directed(i, j)
                and graph.directed(j, k)
                and graph.undirected(i, k)
                and not forbid[i][k]
            ):
                loop |= _orient_acyclic(graph, i, k)
        for i, j, k, t in kites:
            if (
                graph.undirected(i, j)
                and graph.undirected(i, k)
                and graph.directed(j, t)
                and graph.directed(k, t)
                and graph.undirected(i, t)
                and not forbid[i][t]
            ):
                loop |= _orient_acyclic(graph, i, t)
    return graph.g


def _orient_acyclic(graph: _Graph, i: int, j: int) -> bool:
    """Meek's step: orient ``i -> j`` unless ``dpath`` has ``i`` as a descendant of ``j`` (a
    cycle, as causal-learn's check reads it); whether it oriented."""
    if graph.dpath[i][j] == 1:
        return False
    graph.orient(i, j)
    return True
