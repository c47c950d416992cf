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
        graph: The region (``before``): outputs are the values the rule replaces; None for a
            dry walk (`signature` and `handles` only).
        roots: The site's root values in ``graph``.
        handles: Region node id -> e-graph handle of each of its outputs.
        signature: What the region is, node by node (keys, inputs, boundary types): two matches
            with one signature give the same region graph, so one rewrite serves both.
    """

    graph: Graph | None
    roots: tuple[Value, ...]
    handles: dict[int, tuple[int, ...]]
    signature: tuple[Any, ...]


class _RegionBuilder:
    """Builds one region graph from e-nodes (see the module docstring), or, with ``real``
    False, only walks it: the same node ids and handles, and the signature, without type
    inference."""

    def __init__(self, tg: TermGraph, snap: Snapshot, name: str, real: bool) -> None:
        self.tg, self.snap, self.real = tg, snap, real
        self.b = GraphBuilder(f"region:{name}")
        self.handles: dict[int, tuple[int, ...]] = {}
        self.signature: list[Any] = []
        self._boundary: dict[int, Value] = {}
        self._built: dict[int, int] = {}  # e-graph node id -> region node id
        self._inputs = 0
        self._next = 0

    def _id(self) -> int:
        self._next += 1
        return self._next - 1

    def node(self, nid: int, inputs: list[Value]) -> int:
        """Add e-node ``nid`` reading ``inputs``; returns its region node id."""
        hit = self._built.get(nid)
        if hit is not None:
            return hit
        rec = self.tg.nodes[nid]
        key = self.tg.keys[rec.key]
        self.signature.append((rec.key, tuple(inputs)))
        if self.real:
            node = self.b.add_node(key.op, inputs, dict(key.attrs))
            if node.types != key.types:
                raise GraphError(f"e-node {nid} rebuilt as {node.types}, not {key.types}.")
            rid = node.id
        else:
            rid = self._id()
        self._built[nid] = rid
        self.handles[rid] = rec.outs
        return rid

    def _input(self, handle: int) -> Value:
        t = self.tg.types[handle]
        self.signature.append(t)
        if self.real:
            v = self.b.input(f"x{self._inputs}", t.shape, t.dtype)
        else:
            v = Value(self._id(), 0)
        self.handles[v.node] = (handle,)
        self._inputs += 1
        return v

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
            v = Value(self.node(leaf, []), 0) if leaf is not None else self._input(handle)
        self._boundary[c] = v
        return v


def _region(
    tg: TermGraph,
    snap: Snapshot,
    tr: Translation,
    row: tuple[int, ...],
    expand: tuple[int, int, int] | None,
    real: bool,
) -> Region:
    rb = _RegionBuilder(tg, snap, tr.rule.name, real)
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
    sig = (tr.rule.name, roots, tuple(rb.signature))
    if not real:
        return Region(None, roots, rb.handles, sig)
    outs = list(rb.b.node(roots[0].node).outs) if tr.rule.multi_output else list(roots)
    return Region(rb.b.build(outs), roots, rb.handles, sig)


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
        # region signature -> (before, after, site) of its verified rewrite, or None (no rewrite)
        self._done: dict[tuple[Any, ...], tuple[Graph, Graph, Site] | None] = {}

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
        """Apply ``tr``'s rule at the e-match ``row``; returns the rewrites added.

        A region whose signature was seen before reuses that region's outcome (its verified
        rewrite, or that there is none) without rebuilding or checking it again.
        """
        added = 0
        for expand in self._expansions(snap, tr, row):
            try:
                walk = _region(self.tg, snap, tr, row, expand, real=False)
            except KeyError:
                continue  # a stale match: nothing to add
            if walk.signature in self._done:
                done = self._done[walk.signature]
                if done is not None:
                    self.stats.count(tr.rule.name, "applicable")
                    added += self._fire(tr.rule.name, *done, walk.handles)
                continue
            try:
                region = _region(self.tg, snap, tr, row, expand, real=True)
            except (GraphError, ShapeError):
                self._done[walk.signature] = None
                continue
            out = self._rewrite(tr, region)
            self._done[walk.signature] = out
            if out is not None:
                added += self._fire(tr.rule.name, *out, region.handles)
        return added

    def _rewrite(self, tr: Translation, region: Region) -> tuple[Graph, Graph, Site] | None:
        """The verified rewrite of ``region`` by ``tr``'s rule, or None."""
        rule, before, stats = tr.rule, region.graph, self.stats
        assert before is not None
        site = next(
            (s for s in rule.matches_at(before, region.roots[0].node) if s.roots == region.roots),
            None,
        )
        if site is None:
            return None  # the attributes or the precondition reject this match
        stats.count(rule.name, "applicable")
        t0 = time.perf_counter()
        try:
            after = rule.apply(before, site)
        except (MatchError, RuleError, GraphError, ShapeError):
            stats.dropped["error"] += 1
            return None
        stats.times["apply"] += time.perf_counter() - t0
        if output_terms(after) == output_terms(before):
            return None
        if not self._verified(rule.name, before, after):
            return None
        return before, after, site

    def _fire(
        self,
        rule: str,
        before: Graph,
        after: Graph,
        site: Site,
        handles: dict[int, tuple[int, ...]],
    ) -> int:
        self._add(rule, site, before, after, handles)
        self.stats.count(rule, "fired")
        self.stats.steps += 1
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
