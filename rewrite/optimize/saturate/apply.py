"""Apply one rule at one e-match: rebuild the match as a region graph, run the rule, add it back.

An e-match (one row of a rule's match relation) names one e-node per `P` of the pattern. The
region graph holds those nodes; each input class at its boundary becomes a copy of a constant or
parameter the class holds, or else a fresh graph input of the class's type, as
`rewrite.verify.region_graphs` cuts a region out of a graph. The rule is matched again on the
region (its attribute constraints and its precondition run here), applied with its own builder,
and the pair is verified as the engine verifies a rewrite (a shape-reduced region check by the
search's verifier). The new nodes are added to the e-graph and each replaced value is unioned
with its replacement.

Rules that read one level beyond their pattern (`Rule.extra_nodes`, e.g. a fusion absorbing the
producer of an input) get one region per e-node of each input class of the root: the producer is
then in the region, with its own inputs at the boundary.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from rewrite.builder import GraphBuilder
from rewrite.errors import (
    EvaluationError,
    GraphError,
    MatchError,
    RuleError,
    ShapeError,
    VerificationError,
)
from rewrite.ir import Graph, Value
from rewrite.optimize.result import RunStats, Step
from rewrite.optimize.saturate.egraph import Snapshot, TermGraph
from rewrite.optimize.saturate.translate import Translation, output_terms
from rewrite.rules.base import Site
from rewrite.rules.pattern import P

__all__ = ["Applier", "Region"]

_LEAVES = ("const", "param")


@dataclass
class Region:
    """A match rebuilt as a graph.

    Attributes:
        graph: The region (``before``): outputs are the values the rule replaces.
        roots: The site's root values in ``graph``.
        handles: Region node id -> e-graph handle of each of its outputs.
    """

    graph: Graph
    roots: tuple[Value, ...]
    handles: dict[int, tuple[int, ...]]


class _RegionBuilder:
    """Builds one region graph from e-nodes (see the module docstring)."""

    def __init__(self, tg: TermGraph, snap: Snapshot, name: str) -> None:
        self.tg, self.snap = tg, snap
        self.b = GraphBuilder(f"region:{name}")
        self.handles: dict[int, tuple[int, ...]] = {}
        self._boundary: dict[int, Value] = {}
        self._built: dict[int, int] = {}  # e-graph node id -> region node id
        self._inputs = 0

    def node(self, nid: int, inputs: list[Value]) -> int:
        """Add e-node ``nid`` reading ``inputs``; returns its region node id."""
        hit = self._built.get(nid)
        if hit is not None:
            return hit
        rec = self.tg.nodes[nid]
        key = self.tg.keys[rec.key]
        node = self.b.add_node(key.op, inputs, dict(key.attrs))
        if node.types != key.types:
            raise GraphError(f"e-node {nid} rebuilt with types {node.types}, not {key.types}.")
        self._built[nid] = node.id
        self.handles[node.id] = rec.outs
        return node.id

    def boundary(self, handle: int, expand: tuple[int, int, int] | None = None) -> Value:
        """The region value standing for the class of ``handle``: a leaf it holds, the e-node
        ``expand`` names for it (``(class, node id, output)``), or a fresh input."""
        c = self.snap.class_of[handle]
        hit = self._boundary.get(c)
        if hit is not None:
            return hit
        tg = self.tg
        if expand is not None and expand[0] == c:
            rec = tg.nodes[expand[1]]
            ins = [self.boundary(a) for a in rec.args]
            v = Value(self.node(expand[1], ins), expand[2])
        else:
            leaf = next(
                (
                    n
                    for n, i in self.snap.members.get(c, ())
                    if tg.keys[tg.nodes[n].key].op in _LEAVES
                ),
                None,
            )
            if leaf is not None:
                v = Value(self.node(leaf, []), 0)
            else:
                t = tg.types[handle]
                v = self.b.input(f"x{self._inputs}", t.shape, t.dtype)
                self.handles[v.node] = (handle,)
                self._inputs += 1
        self._boundary[c] = v
        return v


def _region(
    tg: TermGraph,
    snap: Snapshot,
    tr: Translation,
    row: tuple[int, ...],
    expand: tuple[int, int, int] | None,
) -> Region:
    rb = _RegionBuilder(tg, snap, tr.rule.name)
    child = {(pn.parent, pn.arg): i for i, pn in enumerate(tr.nodes) if pn.parent is not None}
    ids: dict[int, int] = {}

    def build(i: int) -> int:
        pat = tr.nodes[i].pat
        rec = tg.nodes[row[i]]
        ins = []
        for j, h in enumerate(rec.args):
            if j < len(pat.args) and isinstance(pat.args[j], P):
                c = child[(i, j)]
                ins.append(Value(build(c), tr.nodes[c].pat.output))
            else:
                ins.append(rb.boundary(h, expand if i == tr.roots[0] else None))
        ids[i] = rb.node(row[i], ins)
        return ids[i]

    for r in tr.roots:
        build(r)
    roots = tuple(Value(ids[r], tr.nodes[r].pat.output) for r in tr.roots)
    if tr.rule.multi_output:
        root = rb.b.node(roots[0].node)
        outs = list(root.outs)
    else:
        outs = list(roots)
    return Region(rb.b.build(outs), roots, rb.handles)


class Applier:
    """Applies rules at e-matches and adds the results to the e-graph.

    Args:
        tg: The e-graph.
        verifier: A `rewrite.verify.Verifier`, or None to add rewrites unverified.
        stats: The run's counters (per rule: ``applicable`` for each e-match, ``fired`` for each
            rewrite added, ``verified``/``rejected`` for each region check).
        expand: E-nodes tried per input class of the root for rules with ``extra_nodes``.
    """

    def __init__(self, tg: TermGraph, verifier: Any, stats: RunStats, expand: int = 8) -> None:
        self.tg, self.verifier, self.stats, self.expand = tg, verifier, stats, expand
        self.created: dict[int, Step] = {}

    def _expansions(
        self, snap: Snapshot, tr: Translation, row: tuple[int, ...]
    ) -> Iterator[tuple[int, int, int] | None]:
        if tr.rule.extra_nodes is None:
            yield None
            return
        rec = self.tg.nodes[row[tr.roots[0]]]
        seen: set[int] = set()
        for h in rec.args:
            c = snap.class_of[h]
            if c in seen:
                continue
            seen.add(c)
            members = [
                (n, i)
                for n, i in snap.members.get(c, ())
                if self.tg.keys[self.tg.nodes[n].key].op not in ("input", *_LEAVES)
            ]
            for n, i in members[: self.expand]:
                yield (c, n, i)

    def apply(self, snap: Snapshot, tr: Translation, row: tuple[int, ...]) -> int:
        """Apply ``tr``'s rule at the e-match ``row``; returns the rewrites added."""
        added = 0
        for expand in self._expansions(snap, tr, row):
            try:
                region = _region(self.tg, snap, tr, row, expand)
            except (GraphError, ShapeError, KeyError):
                continue  # a stale or inconsistent match: nothing to add
            added += self._rewrite(tr, region)
        return added

    def _rewrite(self, tr: Translation, region: Region) -> int:
        rule, before, stats = tr.rule, region.graph, self.stats
        site = next(
            (s for s in rule.matches_at(before, region.roots[0].node) if s.roots == region.roots),
            None,
        )
        if site is None:
            return 0  # the attributes or the precondition reject this match
        stats.count(rule.name, "applicable")
        t0 = time.perf_counter()
        try:
            after = rule.apply(before, site)
        except (MatchError, RuleError, GraphError, ShapeError):
            stats.dropped["error"] += 1
            return 0
        stats.times["apply"] += time.perf_counter() - t0
        if output_terms(after) == output_terms(before) or not self._verified(
            rule.name, before, after
        ):
            return 0
        self._add(rule.name, site, before, after, region.handles)
        stats.count(rule.name, "fired")
        stats.steps += 1
        return 1

    def _verified(self, rule: str, before: Graph, after: Graph) -> bool:
        if self.verifier is None:
            return True
        t0 = time.perf_counter()
        try:
            res = self.verifier.check(before, after, reduce=True)
            ok, cached = bool(res.ok), bool(res.cached)
        except (VerificationError, EvaluationError):
            ok, cached = False, False
        self.stats.times["verify"] += time.perf_counter() - t0
        self.stats.hit("verify", cached)
        self.stats.count(rule, "verified" if ok else "rejected")
        return ok

    def _add(
        self,
        rule: str,
        site: Site,
        before: Graph,
        after: Graph,
        handles: dict[int, tuple[int, ...]],
    ) -> None:
        tg = self.tg
        out: dict[int, tuple[int, ...]] = {}
        for nid in after.topo_order():
            node = after.node(nid)
            if nid in before.nodes and before.node(nid) is node:
                out[nid] = handles[nid]
                continue
            rec = tg.add(tg.key(node), [out[v.node][v.index] for v in node.inputs])
            self.created.setdefault(rec.nid, Step(rule, site))
            out[nid] = rec.outs
        for vb, va in zip(before.outputs, after.outputs):
            tg.union(handles[vb.node][vb.index], out[va.node][va.index])
