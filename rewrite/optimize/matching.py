"""Site tables: every site of every rule in a graph, updated incrementally after a rewrite.

A full match pass visits every anchor of every rule. After a local rewrite most sites are
unchanged, so `inherit_sites` keeps the parent's sites anchored far from the edit and re-matches
only anchors within `radius` hops (inputs or users) of a changed node. The radius is ``2 * depth
+ 2`` for the deepest pattern: a site reaches at most ``depth`` hops below its anchor, a second
root is found among the users of a bound value, and exclusivity reads the users of matched nodes.

Completeness is best effort; soundness never depends on it: `revalidate` re-matches the chosen
anchor in the current graph before a site is applied, so a stale site is never rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence

from rewrite.ir import Graph
from rewrite.rules.base import Rule, Site
from rewrite.rules.pattern import P, V

__all__ = ["SiteTable", "all_sites", "inherit_sites", "pattern_depth", "revalidate"]

SiteTable = dict[str, list[Site]]
"""Rule name -> its sites in one graph, in a deterministic order."""


def pattern_depth(pat: P | V) -> int:
    """Number of op levels in a pattern tree (a variable counts 0)."""
    if isinstance(pat, V) or pat.variadic:
        return 0 if isinstance(pat, V) else 1
    return 1 + max((pattern_depth(a) for a in pat.args), default=0)


def match_radius(rules: Sequence[Rule]) -> int:
    """Hop radius around an edit inside which sites may change (see the module docstring)."""
    depth = max((pattern_depth(p) for r in rules for p in r.pattern), default=1)
    return 2 * depth + 2


def all_sites(rules: Sequence[Rule], graph: Graph) -> SiteTable:
    """Every site of every rule (a full pass)."""
    return {r.name: r.matches(graph) for r in rules}


def _region(graph: Graph, radius: int) -> set[int]:
    delta = graph.delta
    assert delta is not None
    nodes = graph.nodes
    seeds = {n.id for n in delta.added if n.id in nodes}
    for n in delta.removed:
        seeds.update(v.node for v in n.inputs if v.node in nodes)
        if n.id in nodes:
            seeds.add(n.id)
    region = set(seeds)
    frontier = list(seeds)
    for _ in range(radius):
        nxt: list[int] = []
        for nid in frontier:
            node = nodes[nid]
            for v in node.inputs:
                if v.node not in region:
                    region.add(v.node)
                    nxt.append(v.node)
            for u in graph.users(nid):
                if u not in region:
                    region.add(u)
                    nxt.append(u)
        frontier = nxt
        if not frontier:
            break
    return region


def inherit_sites(
    rules: Sequence[Rule], parent_sites: SiteTable, child: Graph, radius: int
) -> tuple[SiteTable, int]:
    """The child's site table, reusing the parent's sites away from the edit.

    Args:
        rules: The rules.
        parent_sites: Site table of the graph ``child`` was edited from (``child.delta``).
        child: The edited graph.
        radius: Hop radius of re-matching (`match_radius`).

    Returns:
        ``(table, reused)``: the table and how many sites were inherited unchanged.
    """
    if child.delta is None:
        return all_sites(rules, child), 0
    region = _region(child, radius)
    nodes = child.nodes
    out: SiteTable = {}
    reused = 0
    for rule in rules:
        kept = [
            s
            for s in parent_sites.get(rule.name, ())
            if s.anchor not in region and all(n in nodes and n not in region for n in s.nodes)
        ]
        reused += len(kept)
        anchors = sorted(nid for op in rule.anchor_ops for nid in child.by_op(op) if nid in region)
        fresh = [s for nid in anchors for s in rule.matches_at(child, nid)]
        out[rule.name] = kept + fresh
    return out, reused


def revalidate(rule: Rule, graph: Graph, site: Site) -> bool:
    """Whether ``site`` is a current site of ``rule`` in ``graph`` (pattern, exclusivity and
    precondition re-checked at its anchor)."""
    if site.anchor not in graph.nodes:
        return False
    return any(s == site for s in rule.matches_at(graph, site.anchor))
