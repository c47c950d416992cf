"""Rule objects -> egglog match rules, and the list of rules an e-graph cannot run.

A term of the e-graph is one output of one node: ``(Out (N2 op key a b) i)``, where ``NK`` is
the node constructor of arity ``K``, ``op`` the op name, ``key`` an interned id of the node's
attributes and output types (`Node.local_key`) and ``a``, ``b`` its input terms. Every e-class also
holds handles ``(R k)`` the Python side uses to name it, and every node records an id:
``(nid node)``. (A cons list of inputs would make one generic constructor, but egglog's join then
meets the list cells first: a two-node query took 29 s on 3,000 nodes, against 0.6 ms with one
constructor per arity.)

A rule's pattern (`rewrite.rules.pattern`: `P` nodes and `V` variables, one or more roots) is
translated, whatever the rule, into egglog rules whose query is the pattern:

* a `P` with one op and ``K`` inputs is ``(NK "op" _ a1 .. aK)``; a `P` accepting several ops
  binds the op to a variable constrained by the relation ``(OpIn set op)``;
* a variadic `P` (a prefix of the inputs) gets one egglog rule per arity the e-graph holds
  (`Translation.programs`, declared as arities appear), its extra inputs free;
* a child `P` is joined through ``(Out node output)``; a repeated `V` is one egglog variable
  where that keeps the query a tree (see `_query_vars`), so shared operands (``A B + A C``) and
  multi-root patterns (two products of one ``x``) are conjunctive queries;
* the action records every matched node in the rule's match relation.

What the pattern cannot say (attribute values, the precondition, the replacement) stays in the
rule: the saturation loop rebuilds each match as a concrete region graph (every e-class has one
concrete type), re-matches the rule there, which applies the attribute constraints and the
precondition, and runs the rule's own builder (`rewrite.optimize.saturate.runner`). So a rule
written as data translates, new ones included, without a per-rule table.

`inexpressible` lists the rules an e-graph cannot run, each with the reason: rules whose
precondition reads the graph around the match (an e-graph has no single surrounding graph),
rules that only change sharing (hash-consing already decides it), rules that read nodes more than
one level beyond their pattern, and, on one device, nothing else; with a mesh, the sharding
family (per-device costs are not a sum over e-nodes).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from rewrite.errors import MatchError, RewriteError
from rewrite.ir import Graph
from rewrite.rules.base import Rule
from rewrite.rules.pattern import P, V

__all__ = [
    "PRELUDE",
    "PatternNode",
    "Skipped",
    "Translation",
    "arity_program",
    "inexpressible",
    "output_terms",
    "translate",
]

#: Sorts, constructors and functions every saturation e-graph declares (node constructors
#: ``NK`` are declared per arity, `arity_program`).
PRELUDE = """
(datatype T (R i64))
(sort Nd)
(constructor Out (Nd i64) T)
(function nid (Nd) i64 :merge (min old new))
(relation OpIn (i64 String))
(ruleset match)
"""


def arity_program(k: int) -> str:
    """Egglog declarations of the node constructor of arity ``k``: ``(NK op key a1 .. ak)``."""
    return f"(constructor N{k} (String i64{' T' * k}) Nd)\n"


#: Reasons a rule is skipped (`Skipped.reason` starts with one of these keys' texts).
REASONS = {
    "context": "its precondition reads the graph around the match (an e-graph has no single "
    "surrounding graph)",
    "sharing": "it changes only which nodes are shared (hash-consing in the e-graph already "
    "decides that)",
    "deep": "it reads nodes more than one level beyond its pattern",
    "sharding": "per-device costs of a sharded graph are not a sum over e-nodes, so extraction "
    "cannot price a placement",
    "sample": "its sample graph could not be rewritten to classify it",
}


@dataclass(frozen=True)
class PatternNode:
    """One `P` of a rule's pattern, in the order the match relation records it.

    Attributes:
        pat: The pattern node.
        parent: Index of the parent `PatternNode`, None for a root.
        arg: Input position in the parent (None for a root).
        root: Index of the root pattern this node belongs to.
    """

    pat: P
    parent: int | None
    arg: int | None
    root: int


@dataclass(frozen=True)
class Skipped:
    """A rule the e-graph does not run, and why."""

    rule: str
    reason: str

    def as_dict(self) -> dict[str, str]:
        """``{"rule": ..., "reason": ...}``."""
        return {"rule": self.rule, "reason": self.reason}


@dataclass(frozen=True)
class Translation:
    """A rule as an egglog match rule.

    Attributes:
        rule: The rule.
        relation: Name of its match relation (one node per `PatternNode`).
        nodes: The pattern's nodes, roots first in root order, each root followed by its subtree
            in pre-order.
        roots: Index in ``nodes`` of each root.
        op_sets: Op tuple -> id of its ``OpIn`` set, for the nodes accepting several ops.
    """

    rule: Rule
    relation: str
    nodes: tuple[PatternNode, ...]
    roots: tuple[int, ...]
    op_sets: dict[tuple[str, ...], int]

    @property
    def fixed_arities(self) -> set[int]:
        """Arities the non-variadic nodes need."""
        return {len(pn.pat.args) for pn in self.nodes if not pn.pat.variadic}

    def declaration(self) -> str:
        """The match relation's declaration."""
        return f"(relation {self.relation} ({' '.join(['Nd'] * len(self.nodes))}))\n"

    def programs(self, arities: set[int], new: int | None = None) -> list[str]:
        """The egglog rules of this pattern for the node arities ``arities`` (every variadic
        node takes each arity at least as long as its prefix); with ``new``, only the rules in
        which some variadic node takes arity ``new`` (the ones to add when it appears)."""
        var = [i for i, pn in enumerate(self.nodes) if pn.pat.variadic]
        choices = [sorted(a for a in arities if a >= len(self.nodes[i].pat.args)) for i in var]
        out = []
        for combo in itertools.product(*choices):
            if new is not None and new not in combo:
                continue
            ar = {i: len(pn.pat.args) for i, pn in enumerate(self.nodes)}
            ar.update(zip(var, combo))
            out.append(self._rule(ar, "/".join(map(str, combo))))
        return out

    def _rule(self, arity: dict[int, int], tag: str) -> str:
        child_of = {
            (pn.parent, pn.arg): i for i, pn in enumerate(self.nodes) if pn.parent is not None
        }
        names = _query_vars(self.nodes)
        atoms: list[str] = []
        for i, pn in enumerate(self.nodes):
            p = pn.pat
            args = [
                f"v{child_of[(i, j)]}" if isinstance(sub, P) else names[(i, j)]
                for j, sub in enumerate(p.args)
            ]
            args += [f"w{i}_{j}" for j in range(len(p.args), arity[i])]
            if len(p.ops) == 1:
                op = f'"{p.ops[0]}"'
            else:
                op = f"o{i}"
                atoms.append(f"(OpIn {self.op_sets[p.ops]} {op})")
            atoms.append(f"(= n{i} (N{arity[i]} {op} _{''.join(' ' + a for a in args)}))")
            if pn.parent is not None:
                atoms.append(f"(= v{i} (Out n{i} {p.output}))")
        cols = " ".join(f"n{i}" for i in range(len(self.nodes)))
        name = self.rule.name + (f"/{tag}" if tag else "")
        return (
            f'(rule ({" ".join(atoms)}) (({self.relation} {cols})) :ruleset match :name "{name}")\n'
        )


def _flatten(rule: Rule) -> tuple[list[PatternNode], list[int]]:
    nodes: list[PatternNode] = []
    roots: list[int] = []

    def visit(p: P, parent: int | None, arg: int | None, root: int) -> None:
        nodes.append(PatternNode(p, parent, arg, root))
        me = len(nodes) - 1
        for j, a in enumerate(p.args):
            if isinstance(a, P):
                visit(a, me, j, root)

    for r, p in enumerate(rule.pattern):
        roots.append(len(nodes))
        visit(p, None, None, r)
    return nodes, roots


def _translation(index: int, rule: Rule, op_sets: dict[tuple[str, ...], int]) -> Translation:
    nodes, roots = _flatten(rule)
    for pn in nodes:
        if len(pn.pat.ops) > 1:
            op_sets.setdefault(pn.pat.ops, len(op_sets))
    return Translation(rule, f"M{index}", tuple(nodes), tuple(roots), op_sets)


def _query_vars(nodes: Sequence[PatternNode]) -> dict[tuple[int, int], str]:
    """The egglog variable of each `V` of the pattern, by ``(pattern node, input position)``.

    The query is kept a tree: a variable repeated inside one root, or shared with an earlier
    root beyond the first shared variable that joins the roots, gets a fresh name, so egglog's
    join never meets a cycle (a cyclic query over a large e-graph can take seconds); the
    equality the pattern asks for is checked when the match is rebuilt as a region graph and
    matched again.
    """
    names: dict[tuple[int, int], str] = {}
    seen: dict[str, int] = {}  # variable -> root it was first bound in
    joined: set[int] = set()
    for i, pn in enumerate(nodes):
        for j, sub in enumerate(pn.pat.args):
            if not isinstance(sub, V):
                continue
            first = seen.get(sub.name)
            if first is None:
                seen[sub.name] = pn.root
                names[(i, j)] = f"x_{sub.name}"
            elif first != pn.root and pn.root not in joined:
                joined.add(pn.root)
                names[(i, j)] = f"x_{sub.name}"
            else:
                names[(i, j)] = f"y{i}_{j}"
    return names


def op_set_facts(op_sets: dict[tuple[str, ...], int]) -> str:
    """The ``OpIn`` facts of the op sets the translations use."""
    return "".join(f'(OpIn {k} "{op}")\n' for ops, k in op_sets.items() for op in ops)


def translate(
    rules: Sequence[Rule], devices: int = 1
) -> tuple[list[Translation], list[Skipped], str]:
    """Translate ``rules`` into egglog match rules.

    Args:
        rules: The rules (distinct names).
        devices: Devices of the mesh; from two on, the sharding family is skipped.

    Returns:
        ``(translations, skipped, facts)``: one `Translation` per rule the e-graph runs, the
        `Skipped` rules with their reasons, and the ``OpIn`` facts the translations read.
    """
    skipped = {s.rule: s for s in inexpressible(rules, devices)}
    op_sets: dict[tuple[str, ...], int] = {}
    out: list[Translation] = []
    for rule in rules:
        if rule.name not in skipped:
            out.append(_translation(len(out), rule, op_sets))
    return out, [skipped[r.name] for r in rules if r.name in skipped], op_set_facts(op_sets)


def inexpressible(rules: Sequence[Rule] | None = None, devices: int = 1) -> list[Skipped]:
    """The rules an e-graph cannot run, each with the reason (see the module docstring).

    Args:
        rules: The rules to classify (default: the verified catalogue, `rewrite.search`'s
            default).
        devices: Devices of the mesh (the sharding family is skipped from two on; on one device
            a search leaves it out anyway).

    Returns:
        One `Skipped` per rule that is not run, in the order of ``rules``.
    """
    if rules is None:
        from rewrite.optimize.runner import default_rules

        rules = default_rules()
    out = []
    for rule in rules:
        if rule.family == "sharding" and devices >= 2:
            out.append(Skipped(rule.name, REASONS["sharding"]))
            continue
        reason = _classify(rule)
        if reason is not None:
            out.append(Skipped(rule.name, reason))
    return out


@functools.lru_cache(maxsize=4096)
def _classify(rule: Rule) -> str | None:
    """Why ``rule`` cannot run in an e-graph, judged on its own sample graphs; None if it can."""
    from rewrite.verify.region import region_graphs

    try:
        graphs = [rule.sample_graph(seed, lo=2, hi=5) for seed in (0, 1)]
    except RewriteError as err:
        return f"{REASONS['sample']}: {err}"
    same = True
    for g in graphs:
        for site in rule.matches(g):
            m = rule.match_of(g, site)
            extra = rule.region_nodes(m) - m.nodes
            anchor = g.node(site.anchor)
            if extra - {v.node for v in anchor.inputs}:
                return REASONS["deep"]
            try:
                region_graphs(rule, g, site)
                new = rule.apply(g, site)
            except MatchError:
                return REASONS["context"]
            except RewriteError as err:
                return f"{REASONS['sample']}: {err}"
            same = same and output_terms(new) == output_terms(g)
    return REASONS["sharing"] if same else None


def output_terms(graph: Graph) -> tuple[bytes, ...]:
    """The structural hashes of ``graph``'s outputs: equal for two graphs that compute the same
    terms, whatever nodes they share (`Graph.digest` tells sharing apart, an e-graph does not)."""
    h = graph.node_hashes()
    return tuple(h[v.node] + v.index.to_bytes(2, "little") for v in graph.outputs)
