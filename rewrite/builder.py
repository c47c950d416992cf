"""Build graphs (`GraphBuilder`) and edit them into new graphs (`GraphEditor`).

Every registered op is available as a method: ``b.matmul(x, w)``, ``b.softmax(x, dim=-1)``,
``b.split(x, sizes=(2, 2), dim=1)``. Positional arguments are inputs (Values, Nodes, python
scalars or numpy arrays, the latter two becoming constants), keyword arguments are attributes.
Single-output ops return a `Value`, multi-output ops a tuple of Values.

Example:
    >>> b = GraphBuilder("mlp")
    >>> x = b.input("x", (4, 8))
    >>> w = b.param("w", (16, 8))
    >>> g = b.build([b.relu(b.linear(x, w))])

Editing (what rewrite rules do):
    >>> ed = GraphEditor(g)
    >>> old = g.outputs[0]
    >>> new = ed.gelu(ed.node(old.node).inputs[0])
    >>> ed.replace(old, new)
    >>> g2 = ed.finish()   # shares every untouched node with g; g2.delta lists the change

An editor never redirects the inputs of nodes it added itself, so a replacement may consume the
value it replaces. Nodes left without users are removed (graph inputs excepted).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from rewrite.errors import GraphError
from rewrite.ir import ConstArray, Graph, GraphDelta, Node, TensorType, Value
from rewrite.ops import get_op

__all__ = ["GraphBuilder", "GraphEditor"]

ValueLike = Value | Node | int | float | bool | np.ndarray


class _NodeFactory:
    """Shared machinery: typed node creation, constants and per-op methods."""

    def __init__(self, next_id: int) -> None:
        self._new: dict[int, Node] = {}
        self._next_id = next_id
        self._consts: dict[str, Value] = {}

    def _base_node(self, nid: int) -> Node | None:
        return None

    def node(self, nid: int) -> Node:
        """The node with id ``nid`` (created here, or in the edited graph)."""
        n = self._new.get(nid) or self._base_node(nid)
        if n is None:
            raise GraphError(
                f"node %{nid} does not exist here; use a Value returned by this builder."
            )
        return n

    def type_of(self, value: Value) -> TensorType:
        """The type of ``value``."""
        return self.node(value.node).types[value.index]

    def _value(self, v: Any, like: TensorType | None) -> Value:
        if isinstance(v, Value):
            return v
        if isinstance(v, Node):
            return v.out(0)
        if isinstance(v, bool | int | float | np.ndarray | np.generic):
            return self.const(v, dtype=_scalar_dtype(v, like) if np.ndim(v) == 0 else None)
        raise GraphError(
            f"inputs must be Values, Nodes, scalars or numpy arrays, but got {type(v).__name__}."
        )

    def add_node(
        self,
        op: str,
        inputs: Sequence[ValueLike] = (),
        attrs: Mapping[str, Any] | None = None,
        **kw: Any,
    ) -> Node:
        """Add a node of ``op``, inferring its output types.

        Args:
            op: A registered op name.
            inputs: Input values (scalars and arrays become constants).
            attrs: Attributes; merged with ``kw``.

        Returns:
            The new `Node`.

        Raises:
            ShapeError: If the op rejects the input types or attributes.
            UnknownOpError: If ``op`` is not registered.
        """
        opdef = get_op(op)
        like = next(
            (
                self.type_of(v) if isinstance(v, Value) else v.type
                for v in inputs
                if isinstance(v, Value | Node)
            ),
            None,
        )
        values = tuple(self._value(v, like) for v in inputs)
        opdef.check_arity(len(values))
        in_types = tuple(self.type_of(v) for v in values)
        full = opdef.check_attrs({**(attrs or {}), **kw})
        if opdef.normalize is not None:
            full = opdef.normalize(in_types, full)
        types = opdef.infer(in_types, full)
        node = Node(self._next_id, op, full, values, in_types, types)
        self._next_id += 1
        self._new[node.id] = node
        return node

    def add(self, *args: Any, **kw: Any) -> Any:
        """Two uses: ``add("op", inputs, attrs)`` is `add_node`; ``add(x, y)`` is the ``add`` op."""
        if args and isinstance(args[0], str):
            return self.add_node(*args, **kw)
        return self.__getattr__("add")(*args, **kw)

    def const(self, value: Any, dtype: str | None = None) -> Value:
        """A constant node holding ``value`` (deduplicated by content)."""
        arr = value if isinstance(value, ConstArray) else ConstArray(value, dtype)
        hit = self._consts.get(arr.digest)
        if hit is None:
            hit = self.add_node("const", value=arr).out(0)
            self._consts[arr.digest] = hit
        return hit

    def __getattr__(self, op: str) -> Callable[..., Any]:
        if op.startswith("_"):
            raise AttributeError(op)
        get_op(op)  # raises UnknownOpError naming the known ops

        def method(*inputs: Any, **attrs: Any) -> Value | tuple[Value, ...]:
            flat: list[Any] = []
            for x in inputs:
                flat.extend(x) if isinstance(x, list | tuple) and not isinstance(
                    x, Value
                ) else flat.append(x)
            node = self.add_node(op, flat, attrs)
            return node.out(0) if len(node.types) == 1 else node.outs

        method.__name__ = op
        return method


def _scalar_dtype(v: Any, like: TensorType | None) -> str:
    if isinstance(v, bool | np.bool_):
        return "bool"
    ld = like.dtype if like is not None else None
    if isinstance(v, int | np.integer):
        return ld if ld is not None and ld != "bool" else "int64"
    return ld if ld in ("float16", "bfloat16", "float32", "float64") else "float32"


class GraphBuilder(_NodeFactory):
    """Builds a `Graph` from scratch.

    Args:
        name: Name of the graph to build.
    """

    def __init__(self, name: str = "graph") -> None:
        super().__init__(0)
        self.name = name
        self._inputs: list[int] = []
        self._input_names: dict[str, int] = {}
        self._params: dict[str, TensorType] = {}

    def input(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Value:
        """Declare a graph input (inputs keep declaration order).

        Raises:
            GraphError: If an input named ``name`` was already declared (inputs are fed by name).
        """
        if name in self._input_names:
            raise GraphError(
                f"graph input names must be unique (inputs are fed by name), but {name!r} was "
                f"already declared as %{self._input_names[name]}; reuse that Value or pick "
                "another name."
            )
        v = self.add_node("input", name=name, shape=tuple(shape), dtype=dtype).out(0)
        self._inputs.append(v.node)
        self._input_names[name] = v.node
        return v

    def param(self, name: str, shape: Sequence[int], dtype: str = "float32") -> Value:
        """Declare a parameter (weight) named ``name``.

        Params are fed by name, so two params with the same name, shape and dtype are one
        shared (tied) weight.

        Raises:
            GraphError: If ``name`` was already declared with another shape or dtype.
        """
        node = self.add_node("param", name=name, shape=tuple(shape), dtype=dtype)
        old = self._params.setdefault(name, node.type)
        if old != node.type:
            del self._new[node.id]
            raise GraphError(
                f"params with the same name share one weight, so they must have the same type, "
                f"but {name!r} was declared as {old} and now as {node.type}; rename one of them."
            )
        return node.out(0)

    def build(self, outputs: Sequence[ValueLike], name: str | None = None) -> Graph:
        """The graph computing ``outputs``; nodes they do not need are dropped.

        Raises:
            GraphError: If an output is not a value of this builder.
        """
        outs = tuple(self._value(v, None) for v in outputs)
        keep: set[int] = set(self._inputs)
        stack = [v.node for v in outs]
        while stack:
            nid = stack.pop()
            if nid in keep:
                continue
            keep.add(nid)
            stack.extend(v.node for v in self.node(nid).inputs)
        nodes = {nid: n for nid, n in self._new.items() if nid in keep}
        return Graph(nodes, self._inputs, outs, name or self.name)


class GraphEditor(_NodeFactory):
    """Edits a graph into a new one that shares every node the edit does not touch.

    Use: add nodes (``ed.add_node`` or op methods), redirect uses with `replace`, then `finish`.
    The source graph is never modified. An editor is single-use and not thread-safe.

    Args:
        graph: The graph to edit.
    """

    def __init__(self, graph: Graph) -> None:
        super().__init__(graph.next_id)
        self.graph = graph
        self._redirect: dict[Value, Value] = {}
        self._done = False

    def _base_node(self, nid: int) -> Node | None:
        return self.graph._nodes.get(nid)

    def replace(self, old: Value, new: Value | Node) -> None:
        """Make every pre-existing reader of ``old`` (and graph outputs) read ``new`` instead.

        Raises:
            GraphError: If the types differ or ``old`` is not in the edited graph.
        """
        new = new.out(0) if isinstance(new, Node) else new
        if old.node not in self.graph._nodes:
            raise GraphError(
                f"replace() needs a value of the edited graph, but %{old.node} is not in it."
            )
        if self.type_of(old) != self.type_of(new):
            raise GraphError(
                f"a replacement must keep the type, but {old} is {self.type_of(old)} and {new} is "
                f"{self.type_of(new)}; reshape or cast the replacement."
            )
        if old != new:
            self._redirect[old] = new

    def _resolve(self, v: Value) -> Value:
        seen = 0
        while v in self._redirect:
            v = self._redirect[v]
            seen += 1
            if seen > len(self._redirect):
                raise GraphError(f"replacements form a cycle through {v}.")
        return v

    def finish(self) -> Graph:
        """The edited graph, with `Graph.delta` describing the change.

        Raises:
            GraphError: If the editor was already finished. A cycle created by the edit raises
                `GraphError` at the new graph's first topological sort.
        """
        if self._done:
            raise GraphError(
                "a GraphEditor is single-use, but finish() was called twice; start "
                "GraphEditor(graph) again."
            )
        self._done = True
        base = self.graph
        nodes = dict(base._nodes)
        base.users(-1)  # make sure the parent's user index exists
        users = dict(base._users or {})
        removed: dict[int, Node] = {}
        added: dict[int, Node] = {}
        for nid, node in self._new.items():
            nodes[nid] = added[nid] = node
            for v in node.inputs:
                users[v.node] = (*users.get(v.node, ()), nid)
        self._redirect_readers(nodes, users, removed, added)
        outputs = tuple(self._resolve(v) for v in base.outputs)
        self._prune(nodes, users, removed, added, outputs)
        delta = GraphDelta(base.uid, tuple(removed.values()), tuple(added.values()))
        # A cycle (a replacement reading a descendant of what it replaces) is reported by the
        # first topological sort (costing, hashing, iteration), keeping edits O(changed nodes).
        return Graph._from_edit(base, nodes, outputs, users, delta, self._next_id)

    def _redirect_readers(
        self,
        nodes: dict[int, Node],
        users: dict[int, tuple[int, ...]],
        removed: dict[int, Node],
        added: dict[int, Node],
    ) -> None:
        readers = {
            r for old in self._redirect for r in users.get(old.node, ()) if r not in self._new
        }
        for rid in sorted(readers):
            node = nodes[rid]
            ins = tuple(self._resolve(v) for v in node.inputs)
            if ins == node.inputs:
                continue
            new = node.with_inputs(ins)
            if rid in self.graph._nodes:
                removed.setdefault(rid, self.graph._nodes[rid])
            nodes[rid] = added[rid] = new
            for v in set(node.inputs) - set(ins):
                if all(w.node != v.node for w in ins):
                    users[v.node] = tuple(u for u in users.get(v.node, ()) if u != rid)
            for v in set(ins) - set(node.inputs):
                if rid not in users.get(v.node, ()):
                    users[v.node] = (*users.get(v.node, ()), rid)

    def _prune(
        self,
        nodes: dict[int, Node],
        users: dict[int, tuple[int, ...]],
        removed: dict[int, Node],
        added: dict[int, Node],
        outputs: tuple[Value, ...],
    ) -> None:
        keep = {v.node for v in outputs} | set(self.graph.inputs)
        stack = [v.node for v in self._redirect] + list(self._new)
        while stack:
            nid = stack.pop()
            if nid in keep or nid not in nodes or users.get(nid):
                continue
            node = nodes.pop(nid)
            users.pop(nid, None)
            added.pop(nid, None)
            if nid in self.graph._nodes:
                removed[nid] = self.graph._nodes[nid]
            for v in node.inputs:
                users[v.node] = tuple(u for u in users.get(v.node, ()) if u != nid)
                stack.append(v.node)
