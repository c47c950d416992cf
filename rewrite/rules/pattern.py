"""Pattern language of rewrite rules and the matcher.

A pattern is a tree of `P` (an op node) and `V` (a variable binding any value). A variable name
used twice must bind the same value (a shared operand); a `P` with ``name`` binds the value it
matched, so a rule's precondition and builder can read it. A rule's pattern is a tuple of roots
(multi-root patterns: e.g. two matmuls sharing their input ``x``).

Matching is anchored: the first root is tried only at the nodes of its op (`Graph.by_op`); every
further root is searched among the users of a value already bound, so a multi-root match costs
``O(users)`` per anchor rather than ``O(nodes)``.

Example:
    >>> pat = P("mm", P("mm", V("a"), V("b"), name="ab"), V("c"))   # (a @ b) @ c
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from rewrite.errors import RuleError
from rewrite.ir import Graph, Node, TensorType, Value

__all__ = ["Match", "P", "V", "pattern_ops", "pattern_vars"]


@dataclass(frozen=True)
class V:
    """A pattern variable: binds any value (the same value wherever the name recurs).

    Args:
        name: Variable name, unique within the rule.
    """

    name: str


@dataclass(frozen=True)
class P:
    """A pattern node: an op applied to sub-patterns.

    Args:
        op: Op name, or a tuple of accepted op names.
        *args: Sub-patterns (`P` or `V`), one per input, in order.
        name: Optional binding name for the value this node produces.
        attrs: Attribute values the node must have (exact equality).
        output: Which output of the node the parent reads (multi-output ops such as ``split``).
        variadic: Accept any number of inputs; the sub-patterns then match a prefix of them.
    """

    op: str | tuple[str, ...]
    args: tuple[P | V, ...] = ()
    name: str | None = None
    attrs: Mapping[str, Any] = field(default_factory=dict)
    output: int = 0
    variadic: bool = False

    def __init__(
        self,
        op: str | tuple[str, ...],
        *args: P | V,
        name: str | None = None,
        attrs: Mapping[str, Any] | None = None,
        output: int = 0,
        variadic: bool = False,
    ) -> None:
        object.__setattr__(self, "op", op)
        object.__setattr__(self, "args", tuple(args))
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "attrs", dict(attrs or {}))
        object.__setattr__(self, "output", output)
        object.__setattr__(self, "variadic", variadic)

    @property
    def ops(self) -> tuple[str, ...]:
        """The accepted op names."""
        return (self.op,) if isinstance(self.op, str) else tuple(self.op)


def pattern_ops(pat: P | V) -> set[str]:
    """Every op name a pattern mentions."""
    if isinstance(pat, V):
        return set()
    out = set(pat.ops)
    for a in pat.args:
        out |= pattern_ops(a)
    return out


def pattern_vars(pat: P | V) -> list[str]:
    """Variable names of a pattern in left-to-right order (with repeats)."""
    if isinstance(pat, V):
        return [pat.name]
    return [v for a in pat.args for v in pattern_vars(a)]


class Match:
    """One match of a rule's pattern in a graph: the bindings a precondition/builder reads.

    Attributes:
        graph: The matched graph.
        env: Binding name -> `Value` (variables and named pattern nodes).
        roots: The matched root values, in pattern order.
        nodes: Ids of every node matched by a `P` (roots included).
    """

    __slots__ = ("env", "graph", "nodes", "roots")

    def __init__(
        self, graph: Graph, env: dict[str, Value], roots: tuple[Value, ...], nodes: frozenset[int]
    ):
        self.graph, self.env, self.roots, self.nodes = graph, env, roots, nodes

    def __getitem__(self, name: str) -> Value:
        return self.env[name]

    def __contains__(self, name: str) -> bool:
        return name in self.env

    def type(self, name: str) -> TensorType:
        """The type of binding ``name``."""
        return self.graph.type_of(self.env[name])

    def shape(self, name: str) -> tuple[int, ...]:
        """The shape of binding ``name``."""
        return self.type(name).shape

    def node(self, name: str) -> Node:
        """The node producing binding ``name``."""
        return self.graph.node(self.env[name].node)

    def attr(self, name: str, key: str) -> Any:
        """Attribute ``key`` of the node producing binding ``name``."""
        return self.node(name).attrs[key]

    def root_node(self, i: int = 0) -> Node:
        """The node of root ``i``."""
        return self.graph.node(self.roots[i].node)


def _match(g: Graph, pat: P | V, value: Value, env: dict[str, Value], nodes: set[int]) -> bool:
    if isinstance(pat, V):
        bound = env.get(pat.name)
        if bound is None:
            env[pat.name] = value
            return True
        return bound == value
    if value.index != pat.output:
        return False
    node = g._nodes[value.node]
    if node.op not in pat.ops:
        return False
    n_in = len(node.inputs)
    if n_in != len(pat.args) and not (pat.variadic and n_in >= len(pat.args)):
        return False
    attrs = node.attrs
    for k, want in pat.attrs.items():
        if attrs.get(k) != want:
            return False
    if pat.name is not None:
        bound = env.get(pat.name)
        if bound is not None and bound != value:
            return False
        env[pat.name] = value
    nodes.add(node.id)
    return all(_match(g, a, v, env, nodes) for a, v in zip(pat.args, node.inputs))


def _root_value(node: Node, pat: P) -> Value:
    return Value(node.id, pat.output)


def _first_shared_var(pat: P | V, env: Mapping[str, Value]) -> str | None:
    for name in pattern_vars(pat):
        if name in env:
            return name
    return None


def match_roots(
    g: Graph, roots: tuple[P, ...], anchor: int, ordered: bool
) -> Iterator[tuple[dict[str, Value], tuple[Value, ...], frozenset[int]]]:
    """Every match of ``roots`` whose first root is node ``anchor``.

    Args:
        g: The graph.
        roots: The rule's root patterns.
        anchor: Candidate node id for the first root.
        ordered: For symmetric multi-root patterns, require root node ids to increase so each
            unordered match is reported once.

    Yields:
        ``(env, root values, matched node ids)``.
    """
    env: dict[str, Value] = {}
    nodes: set[int] = set()
    first = roots[0]
    if not _match(g, first, _root_value(g._nodes[anchor], first), env, nodes):
        return
    yield from _extend(g, roots, 1, env, nodes, (Value(anchor, first.output),), ordered)


def _extend(
    g: Graph,
    roots: tuple[P, ...],
    k: int,
    env: dict[str, Value],
    nodes: set[int],
    found: tuple[Value, ...],
    ordered: bool,
) -> Iterator[tuple[dict[str, Value], tuple[Value, ...], frozenset[int]]]:
    if k == len(roots):
        yield env, found, frozenset(nodes)
        return
    pat = roots[k]
    shared = _first_shared_var(pat, env)
    if shared is None:
        raise RuleError(
            f"root {k} of a multi-root pattern must share a variable with an earlier root, but {pat} does not."
        )
    taken = {v.node for v in found}
    for uid in g.users(env[shared].node):
        if uid in taken or (ordered and uid < found[-1].node):
            continue
        node = g._nodes[uid]
        if node.op not in pat.ops:
            continue
        env2, nodes2 = dict(env), set(nodes)
        if _match(g, pat, Value(uid, pat.output), env2, nodes2) and not (nodes2 & taken - nodes):
            yield from _extend(
                g, roots, k + 1, env2, nodes2, (*found, Value(uid, pat.output)), ordered
            )


def is_exclusive(g: Graph, nodes: frozenset[int], roots: tuple[Value, ...]) -> bool:
    """Whether every matched non-root node is used only inside the match and is no graph output."""
    root_ids = {v.node for v in roots}
    outs = {v.node for v in g.outputs}
    for nid in nodes:
        if nid in root_ids:
            continue
        if nid in outs:
            return False
        for u in g.users(nid):
            if u not in nodes:
                return False
    return True
