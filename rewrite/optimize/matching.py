"""Site tables: every site of every rule in a graph, updated incrementally after a rewrite.

A full match pass visits every anchor of every rule. After a local rewrite most sites are
unchanged, so `inherit_sites` keeps the parent's sites anchored far from the edit and re-matches
only anchors near it (`rule_radius`: along users for single-root patterns, in both directions
for multi-root ones). Sites that touch a removed or rebuilt node are dropped.

Completeness is best effort; soundness never depends on it: `revalidate` re-matches the chosen
anchor in the current graph before a site is applied, so a stale site is never rewritten.
"""

from __future__ import annotations

from collections.abc import Sequence

from rewrite.ir import Graph
from rewrite.rules.base import Rule, Site
from rewrite.rules.pattern import P, V

__all__ = [
    "SiteTable",
    "all_sites",
    "inherit_sites",
    "match_radius",
    "pattern_depth",
    "revalidate",
    "rule_radius",
]

SiteTable = dict[str, list[Site]]
"""Rule name -> its sites in one graph, in a deterministic order."""


def pattern_depth(pat: P | V) -> int:
    """Number of op levels in a pattern tree (a variable counts 0)."""
    if isinstance(pat, V) or pat.variadic:
        return 0 if isinstance(pat, V) else 1
    return 1 + max((pattern_depth(a) for a in pat.args), default=0)


def rule_radius(rule: Rule) -> tuple[int, bool]:
    """``(radius, directed)`` of the re-match region of one rule.

    A single-root pattern reaches ``depth - 1`` levels up the inputs of its anchor, so only
    anchors within ``depth`` hops downstream (along users) of a changed node, or of a node whose
    users changed, can gain or lose a site. Multi-root patterns also search the users of bound
    values, so they get ``2 * depth + 2`` hops in both directions.
    """
    depth = max((pattern_depth(p) for p in rule.pattern), default=1)
    if len(rule.pattern) == 1:
        return depth, True
    return 2 * depth + 2, False


def match_radius(rules: Sequence[Rule]) -> dict[str, tuple[int, bool]]:
    """`rule_radius` of every rule, by name."""
    return {r.name: rule_radius(r) for r in rules}


def all_sites(rules: Sequence[Rule], graph: Graph) -> SiteTable:
    """Every site of every rule (a full pass)."""
    return {r.name: r.matches(graph) for r in rules}


def _seeds(graph: Graph) -> set[int]:
    delta = graph.delta
    assert delta is not None
    nodes = graph.nodes
    seeds = {n.id for n in delta.added if n.id in nodes}
    for n in (*delta.removed, *delta.added):
        seeds.update(v.node for v in n.inputs if v.node in nodes)
    return seeds


def _distances(graph: Graph, seeds: set[int], radius: int, directed: bool) -> dict[int, int]:
    """Hop distance from ``seeds`` (along users only when ``directed``), up to ``radius``."""
    nodes = graph.nodes
    dist = dict.fromkeys(seeds, 0)
    frontier = list(seeds)
    for d in range(1, radius + 1):
        nxt: list[int] = []
        for nid in frontier:
            around = list(graph.users(nid))
            if not directed:
                around.extend(v.node for v in nodes[nid].inputs)
            for u in around:
                if u not in dist:
                    dist[u] = d
                    nxt.append(u)
        frontier = nxt
        if not frontier:
            break
    return dist


def inherit_sites(
    rules: Sequence[Rule],
    parent_sites: SiteTable,
    child: Graph,
    radius: dict[str, tuple[int, bool]],
) -> tuple[SiteTable, int]:
    """The child's site table, reusing the parent's sites away from the edit.

    Args:
        rules: The rules.
        parent_sites: Site table of the graph ``child`` was edited from (``child.delta``).
        child: The edited graph.
        radius: `match_radius` of the rules.

    Returns:
        ``(table, reused)``: the table and how many sites were inherited unchanged.
    """
    if child.delta is None:
        return all_sites(rules, child), 0
    seeds = _seeds(child)
    down_r = max((r for r, directed in radius.values() if directed), default=0)
    both_r = max((r for r, directed in radius.values() if not directed), default=0)
    down = _distances(child, seeds, down_r, True)
    both = _distances(child, seeds, both_r, False) if both_r else {}
    removed = frozenset(n.id for n in child.delta.removed) | {n.id for n in child.delta.added}
    nodes = child.nodes
    near_of: dict[tuple[int, bool], set[int]] = {}
    for key in set(radius.values()):
        dist = down if key[1] else both
        near_of[key] = {nid for nid, d in dist.items() if d <= key[0]}
    out: SiteTable = {}
    reused = 0
    for rule in rules:
        near = near_of[radius[rule.name]]
        kept = [
            s
            for s in parent_sites.get(rule.name, ())
            if s.anchor not in near and removed.isdisjoint(s.nodes)
        ]
        reused += len(kept)
        ops = rule.anchor_ops
        anchors = sorted(nid for nid in near if nodes[nid].op in ops)
        fresh = [s for nid in anchors for s in rule.matches_at(child, nid)]
        out[rule.name] = kept + fresh
    return out, reused


def revalidate(rule: Rule, graph: Graph, site: Site) -> bool:
    """Whether ``site`` is a current site of ``rule`` in ``graph`` (pattern, exclusivity and
    precondition re-checked at its anchor)."""
    if site.anchor not in graph.nodes:
        return False
    return any(s == site for s in rule.matches_at(graph, site.anchor))
