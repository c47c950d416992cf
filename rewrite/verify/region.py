"""Cut a rule's matched region out of a graph, for cheap region-level checks.

The region is the nodes the rule's pattern matched. Values flowing into it from outside become
fresh graph inputs (constants and parameters are copied, so preconditions that inspect them still
hold); the region's outputs are the values the rule replaces, followed by any other region value
still read outside the region (it stays live, so the cut-out keeps it as an output). The rule is then applied to the region graph at
the corresponding site, giving the pair ``(before, after)`` to compare.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rewrite.builder import GraphBuilder
from rewrite.errors import MatchError
from rewrite.ir import Graph, Value

if TYPE_CHECKING:
    from rewrite.rules.base import Rule, Site

__all__ = ["region_graphs"]


def region_graphs(rule: Rule, graph: Graph, site: Site) -> tuple[Graph, Graph]:
    """The region of ``site`` as a standalone graph, before and after the rewrite.

    Raises:
        MatchError: If ``site`` does not match ``graph``, or the rule's precondition rejects the
            cut-out region (rules with graph-wide preconditions must be checked on whole graphs).
    """
    m = rule.match_of(graph, site)
    b = GraphBuilder(f"region:{rule.name}")
    region = rule.region_nodes(m)
    ids = _topo(graph, region)
    mapped: dict[Value, Value] = {}
    n_in = 0
    for nid in ids:
        node = graph.node(nid)
        ins = []
        for v in node.inputs:
            if v not in mapped:
                src = graph.node(v.node)
                if v.node in region:
                    raise MatchError(
                        f"region of rule {rule.name!r} is not closed under its order at {v}."
                    )
                if src.op in ("const", "param"):
                    mapped[v] = b.add(src.op, (), dict(src.attrs)).out(v.index)
                else:
                    t = graph.type_of(v)
                    mapped[v] = b.input(f"x{n_in}", t.shape, t.dtype)
                    n_in += 1
            ins.append(mapped[v])
        new = b.add(node.op, ins, dict(node.attrs))
        for i in range(len(node.types)):
            mapped[Value(nid, i)] = new.out(i)
    roots = tuple(mapped[r] for r in m.roots)
    replaced = rule.replaced_values(m)
    outs = [mapped[v] for v in replaced] + [
        mapped[v] for v in _escaping(graph, region, set(replaced))
    ]
    before = b.build(outs)
    anchor = roots[0].node
    for s in rule.matches_at(before, anchor):
        if s.roots == roots:
            return before, rule.apply(before, s)
    raise MatchError(
        f"rule {rule.name!r} does not match its own cut-out region (its precondition reads the "
        "surrounding graph); check the rewrite on the whole graph with Verifier.check_rewrite."
    )


def _escaping(graph: Graph, region: frozenset[int], replaced: set[Value]) -> list[Value]:
    """Values of the region still read outside it (or graph outputs): kept as extra outputs."""
    outs = set(graph.outputs)
    res = []
    for nid in sorted(region):
        for v in graph.node(nid).outs:
            if v in replaced:
                continue
            if v in outs or any(
                u not in region and v in graph.node(u).inputs for u in graph.users(nid)
            ):
                res.append(v)
    return res


def _topo(graph: Graph, nodes: frozenset[int]) -> list[int]:
    out: list[int] = []
    done: set[int] = set()

    def visit(n: int) -> None:
        if n in done or n not in nodes:
            return
        done.add(n)
        for v in graph.node(n).inputs:
            visit(v.node)
        out.append(n)

    for n in sorted(nodes):
        visit(n)
    return out
