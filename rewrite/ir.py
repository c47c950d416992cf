"""Immutable tensor-graph IR: typed nodes, graphs, structural hashes and topological order.

A `Graph` is a DAG of `Node`s. A node is ``(op, attrs, inputs)`` plus its inferred output
types; it is identified inside its graph by an integer id, and its inputs are `Value`s
``(node_id, output_index)``. Nodes are immutable and shared: an edit (`rewrite.GraphEditor`) copies
the id -> node table (a flat dict copy) and replaces only the nodes it touches, so a rewritten
graph shares every unchanged `Node` object with its parent and records the difference in
`Graph.delta` (used by incremental costing).

Hashes are Merkle hashes: a node's hash is a digest of its op, canonical attrs, output types
and its inputs' hashes, so it does not depend on node ids; two structurally equal graphs have the
same `Graph.hash` whatever their ids. Hashes are BLAKE2b digests (stable across processes and
runs), computed lazily and inherited from the parent graph for nodes no edit reached.

Kinds of nodes: graph inputs (op ``input``), parameters (op ``param``, the weights, resident in
memory), constants (op ``const``, carrying a `ConstArray`), ordinary ops from `rewrite.ops`, fused
groups (op ``fused``, carrying a body `Graph`) and opaque nodes (op ``opaque``).

The tensor types (dtypes, `TensorType`, `ConstArray`) live in `rewrite.tensor` and are re-exported
here.

Thread-safety: graphs and nodes are immutable; lazily computed caches are idempotent, so
concurrent readers are safe.
"""

from __future__ import annotations

import hashlib
import itertools
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple

from rewrite.errors import GraphError
from rewrite.tensor import DTYPE_BYTES, ConstArray, TensorType, numpy_dtype

__all__ = [
    "DTYPE_BYTES",
    "ConstArray",
    "Graph",
    "GraphDelta",
    "Node",
    "TensorType",
    "Value",
    "numpy_dtype",
]


class Value(NamedTuple):
    """One output of one node: ``(node id, output index)``."""

    node: int
    index: int = 0  # type: ignore[assignment]  # shadows tuple.index on purpose


_MASK_128 = (1 << 128) - 1


def _canon_repr(attrs: Mapping[str, Any]) -> str:
    return repr(tuple(sorted(attrs.items())))


class Node:
    """One immutable node of a graph.

    Nodes are created by `GraphBuilder`/`GraphEditor` (which infer ``types``); do not mutate
    them. They may be shared by many graphs.

    Attributes:
        id: The node's id, unique inside its graph.
        op: The op name (a key of the `rewrite.ops` registry, or ``opaque``/``fused``).
        attrs: Read-only attribute mapping (values: ints, floats, strs, bools, None, tuples,
            `ConstArray`, `Graph`).
        inputs: The `Value`s this node consumes, in order.
        in_types: The types of ``inputs``.
        types: The inferred output types (one per output).
    """

    __slots__ = ("_cost", "_lkey", "attrs", "id", "in_types", "inputs", "op", "types")

    def __init__(
        self,
        id: int,
        op: str,
        attrs: Mapping[str, Any],
        inputs: tuple[Value, ...],
        in_types: tuple[TensorType, ...],
        types: tuple[TensorType, ...],
    ) -> None:
        self.id = id
        self.op = op
        self.attrs = attrs if isinstance(attrs, MappingProxyType) else MappingProxyType(dict(attrs))
        self.inputs = inputs
        self.in_types = in_types
        self.types = types
        self._lkey: bytes | None = None
        self._cost: dict[Any, Any] | None = None

    @property
    def type(self) -> TensorType:
        """The type of output 0."""
        return self.types[0]

    def __reduce__(self) -> tuple[Any, ...]:
        # picklable for process pools (caches are dropped); persisted graphs use JSON
        return (Node, (self.id, self.op, dict(self.attrs), self.inputs, self.in_types, self.types))

    def out(self, index: int = 0) -> Value:
        """The `Value` of output ``index``."""
        return Value(self.id, index)

    @property
    def outs(self) -> tuple[Value, ...]:
        """The `Value`s of every output."""
        return tuple(Value(self.id, i) for i in range(len(self.types)))

    @property
    def local_key(self) -> bytes:
        """Canonical bytes of (op, attrs, output types): the hash input besides the inputs."""
        k = self._lkey
        if k is None:
            k = f"{self.op}|{_canon_repr(self.attrs)}|{self.types!r}".encode()
            self._lkey = k
        return k

    def with_inputs(self, inputs: tuple[Value, ...], id: int | None = None) -> Node:
        """A copy of this node reading ``inputs`` (same types), optionally under a new id."""
        return Node(
            self.id if id is None else id, self.op, self.attrs, inputs, self.in_types, self.types
        )

    def __repr__(self) -> str:
        ins = ", ".join(f"%{v.node}" + (f".{v.index}" if v.index else "") for v in self.inputs)
        attrs = ", ".join(f"{k}={v!r}" for k, v in sorted(self.attrs.items()))
        types = ", ".join(map(str, self.types))
        return f"%{self.id} = {self.op}({ins}{'; ' if attrs and ins else ''}{attrs}) -> {types}"


class GraphDelta(NamedTuple):
    """What an edit changed relative to the parent graph (see `Graph.delta`).

    Attributes:
        parent_uid: `Graph.uid` of the parent graph.
        removed: Parent nodes absent from (or replaced in) the child.
        added: Child nodes absent from the parent (new, or rebuilt with redirected inputs).
    """

    parent_uid: int
    removed: tuple[Node, ...]
    added: tuple[Node, ...]


_uids = itertools.count()


class Graph:
    """An immutable tensor graph.

    Args:
        nodes: Mapping from node id to `Node`; every node must be reachable from ``outputs``
            (graph inputs excepted).
        inputs: Ids of the graph's ``input`` nodes, in call order.
        outputs: The graph's output `Value`s, in order.
        name: A label (not part of the hash).
        validate: Check references, input kinds, reachability and acyclicity.

    Raises:
        GraphError: When ``validate`` finds a malformed graph.
    """

    __slots__ = (
        "_by_op",
        "_digest",
        "_hash_src",
        "_hashes",
        "_nodes",
        "_topo",
        "_users",
        "delta",
        "inputs",
        "name",
        "next_id",
        "outputs",
        "uid",
        "__weakref__",
    )

    def __init__(
        self,
        nodes: Mapping[int, Node],
        inputs: Sequence[int],
        outputs: Sequence[Value],
        name: str = "graph",
        *,
        validate: bool = True,
    ) -> None:
        self._nodes: dict[int, Node] = dict(nodes)
        self.inputs = tuple(inputs)
        self.outputs = tuple(Value(*v) for v in outputs)
        self.name = name
        self.next_id = max(self._nodes, default=-1) + 1
        self.delta: GraphDelta | None = None
        self.uid = next(_uids)
        self._users: dict[int, tuple[int, ...]] | None = None
        self._topo: tuple[int, ...] | None = None
        self._by_op: dict[str, tuple[int, ...]] | None = None
        self._hashes: dict[int, bytes] | None = None
        self._hash_src: tuple[Graph, frozenset[int]] | None = None
        self._digest: bytes | None = None
        if validate:
            self.validate()

    @classmethod
    def _from_edit(
        cls,
        parent: Graph,
        nodes: dict[int, Node],
        outputs: tuple[Value, ...],
        users: dict[int, tuple[int, ...]],
        delta: GraphDelta,
        next_id: int,
    ) -> Graph:
        g = cls.__new__(cls)
        g._nodes, g.inputs, g.outputs, g.name = nodes, parent.inputs, outputs, parent.name
        g.next_id, g.delta, g.uid, g._users = next_id, delta, next(_uids), users
        g._topo = g._by_op = g._hashes = g._digest = None
        changed = frozenset(n.id for n in delta.removed) | frozenset(n.id for n in delta.added)
        g._hash_src = (parent, changed)
        return g

    # ------------------------------------------------------------------ access
    def validate(self) -> None:
        """Check references, input kinds, reachability and acyclicity.

        Raises:
            GraphError: Naming the offending node and the rule it breaks.
        """
        nodes = self._nodes
        for nid, node in nodes.items():
            if node.id != nid:
                raise GraphError(f"node ids must match their keys, but key {nid} holds {node!r}.")
            if len(node.inputs) != len(node.in_types):
                raise GraphError(
                    f"node %{nid} has {len(node.inputs)} inputs but {len(node.in_types)} in_types."
                )
            for v, t in zip(node.inputs, node.in_types):
                src = nodes.get(v.node)
                if src is None or v.index >= len(src.types):
                    raise GraphError(
                        f"node {node!r} reads %{v.node}.{v.index}, which does not exist in graph {self.name!r}."
                    )
                if src.types[v.index] != t:
                    raise GraphError(
                        f"node %{nid} expects {t} from %{v.node}.{v.index}, which produces {src.types[v.index]}."
                    )
        names: dict[str, int] = {}
        for nid in self.inputs:
            if nid not in nodes or nodes[nid].op != "input":
                raise GraphError(
                    f"graph inputs must be `input` nodes, but %{nid} is {nodes.get(nid)!r}."
                )
            name = nodes[nid].attrs["name"]
            if names.setdefault(name, nid) != nid:
                raise GraphError(
                    f"graph input names must be unique (inputs are fed by name), but %{names[name]} "
                    f"and %{nid} are both named {name!r}; rename one of them."
                )
        for v in self.outputs:
            if v.node not in nodes or v.index >= len(nodes[v.node].types):
                raise GraphError(f"graph output {v} does not exist in graph {self.name!r}.")
        order = self.topo_order()  # raises on cycles
        if len(order) != len(nodes):
            dead = sorted(set(nodes) - set(order))[:10]
            raise GraphError(
                f"every node must be reachable from the outputs, but {len(nodes) - len(order)} are not "
                f"(e.g. {dead}); build graphs with GraphBuilder.build, which prunes dead nodes."
            )

    @property
    def nodes(self) -> Mapping[int, Node]:
        """Read-only id -> `Node` mapping."""
        return MappingProxyType(self._nodes)

    def node(self, nid: int) -> Node:
        """The node with id ``nid``.

        Raises:
            GraphError: If the graph has no node ``nid``.
        """
        try:
            return self._nodes[nid]
        except (KeyError, TypeError):
            ids = sorted(self._nodes)
            some = ids if len(ids) <= 10 else [*ids[:5], "...", *ids[-5:]]
            raise GraphError(
                f"graph {self.name!r} has no node {nid!r}; its {len(ids)} node ids are "
                f"{', '.join(map(str, some))}. Use ids from this graph's nodes or values."
            ) from None

    __getitem__ = node

    def __len__(self) -> int:
        return len(self._nodes)

    def __contains__(self, nid: object) -> bool:
        return nid in self._nodes

    def __iter__(self) -> Iterator[Node]:
        """Nodes in topological order."""
        nodes = self._nodes
        return (nodes[i] for i in self.topo_order())

    def type_of(self, value: Value) -> TensorType:
        """The type of ``value``."""
        return self._nodes[value.node].types[value.index]

    @property
    def input_types(self) -> tuple[TensorType, ...]:
        """Types of the graph inputs."""
        return tuple(self._nodes[i].type for i in self.inputs)

    @property
    def output_types(self) -> tuple[TensorType, ...]:
        """Types of the graph outputs."""
        return tuple(self.type_of(v) for v in self.outputs)

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the graph inputs."""
        return tuple(self._nodes[i].attrs["name"] for i in self.inputs)

    def params(self) -> list[Node]:
        """The ``param`` nodes (weights), in topological order."""
        return [n for n in self if n.op == "param"]

    def constants(self) -> list[Node]:
        """The ``const`` nodes, in topological order."""
        return [n for n in self if n.op == "const"]

    def op_counts(self) -> Counter[str]:
        """How many nodes of each op the graph holds."""
        return Counter(n.op for n in self._nodes.values())

    def users(self, nid: int) -> tuple[int, ...]:
        """Ids of the nodes that read any output of node ``nid``."""
        if self._users is None:
            users: dict[int, list[int]] = {}
            for node in self._nodes.values():
                for v in node.inputs:
                    lst = users.setdefault(v.node, [])
                    if not lst or lst[-1] != node.id:
                        lst.append(node.id)
            self._users = {k: tuple(v) for k, v in users.items()}
        return self._users.get(nid, ())

    def by_op(self, op: str) -> tuple[int, ...]:
        """Ids of the nodes of op ``op``, in topological order (index for rule matching)."""
        if self._by_op is None:
            idx: dict[str, list[int]] = {}
            for nid in self.topo_order():
                idx.setdefault(self._nodes[nid].op, []).append(nid)
            self._by_op = {k: tuple(v) for k, v in idx.items()}
        return self._by_op.get(op, ())

    # ------------------------------------------------------------------ order
    def topo_order(self) -> tuple[int, ...]:
        """Deterministic topological order of node ids.

        Graph inputs come first in declared order, then a depth-first post-order from the
        outputs (in order) visiting each node's inputs in order. The order depends only on the
        structure, never on ids or insertion order.

        Raises:
            GraphError: If the graph has a cycle.
        """
        if self._topo is not None:
            return self._topo
        nodes = self._nodes
        done: set[int] = set(self.inputs)
        order: list[int] = list(self.inputs)
        active: set[int] = set()  # expanded, not finished: the current DFS path
        for out in self.outputs:
            stack = [out[0]]
            while stack:
                nid = stack[-1]
                if nid in done:
                    stack.pop()
                    continue
                pending = [v[0] for v in nodes[nid].inputs if v[0] not in done]
                if pending:
                    if nid in active or not active.isdisjoint(pending):
                        bad = nid if nid in active else next(c for c in pending if c in active)
                        raise GraphError(
                            f"graphs must be acyclic, but node %{bad} is its own ancestor."
                        )
                    active.add(nid)
                    pending.reverse()
                    stack.extend(pending)
                else:
                    stack.pop()
                    active.discard(nid)
                    done.add(nid)
                    order.append(nid)
        self._topo = tuple(order)
        return self._topo

    # ------------------------------------------------------------------ hashing
    def _ensure_hashes(self) -> dict[int, bytes]:
        memo = self._hashes
        if memo is not None and len(memo) == len(self._nodes):
            return memo
        if memo is None:
            memo = self._inherited_hashes()
        nodes = self._nodes
        blake = hashlib.blake2b
        expanded: set[int] = set()
        for root in nodes:
            if root in memo:
                continue
            stack = [root]
            while stack:  # post-order over the nodes still missing a hash
                nid = stack[-1]
                if nid in memo:
                    stack.pop()
                    continue
                node = nodes[nid]
                missing = [v[0] for v in node.inputs if v[0] not in memo]
                if missing:
                    if nid in expanded:
                        self.topo_order()  # an input is still missing after expansion: a cycle
                    expanded.add(nid)
                    stack.extend(missing)
                    continue
                h = blake(node.local_key, digest_size=16)
                for v in node.inputs:
                    h.update(memo[v[0]])
                    h.update(v[1].to_bytes(2, "little"))
                memo[nid] = h.digest()
                stack.pop()
        self._hashes = memo
        return memo

    def _inherited_hashes(self) -> dict[int, bytes]:
        """The parent's hashes minus every node the edit changed and their descendants."""
        src, self._hash_src = self._hash_src, None
        if src is None:
            return {}
        parent, changed = src
        if parent._hashes is None or len(parent._hashes) != len(parent._nodes):
            return {}
        memo = dict(parent._hashes)
        seen: set[int] = set()
        stack = list(changed)
        while stack:
            nid = stack.pop()
            if nid not in seen:
                seen.add(nid)
                memo.pop(nid, None)
                stack.extend(self.users(nid))
        return memo

    def node_hashes(self) -> Mapping[int, bytes]:
        """Node id to its 16-byte structural hash, for every node (read-only view)."""
        return MappingProxyType(self._ensure_hashes())

    def node_hash(self, nid: int) -> str:
        """Structural (Merkle) hash of node ``nid`` as 32 hex digits.

        Equal for nodes with the same op, attrs, output types and input hashes, in any graph.
        """
        return self._ensure_hashes()[nid].hex()

    @property
    def digest(self) -> bytes:
        """Structural hash of the whole graph, 16 bytes.

        It covers the inputs and outputs in order and the multiset of node hashes, so graphs that
        compute the same outputs with different sharing (a common subexpression eliminated, a
        producer rematerialized) hash differently.
        """
        if self._digest is None:
            memo = self._ensure_hashes()
            h = hashlib.blake2b(b"graph", digest_size=16)
            total = sum(int.from_bytes(d, "little") for d in memo.values()) & _MASK_128
            h.update(len(memo).to_bytes(8, "little"))
            h.update(total.to_bytes(16, "little"))
            for nid in self.inputs:
                h.update(memo[nid])
            for v in self.outputs:
                h.update(memo[v.node])
                h.update(v.index.to_bytes(2, "little"))
            self._digest = h.digest()
        return self._digest

    @property
    def hash(self) -> str:
        """Structural hash of the whole graph as 32 hex digits (dedupe and cache key)."""
        return self.digest.hex()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Graph) and self.digest == other.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"Graph({self.name!r}, {len(self._nodes)} nodes, hash={self.hash[:12]})"

    def __reduce__(self) -> tuple[Any, ...]:
        # picklable for process pools: nodes only, no caches; the copy gets a new uid and no delta
        return (_restore_graph, (self._nodes, self.inputs, self.outputs, self.name))

    def copy(self) -> Graph:
        """A new graph object sharing all nodes, with empty caches and no delta."""
        return Graph(self._nodes, self.inputs, self.outputs, self.name, validate=False)


def _restore_graph(
    nodes: dict[int, Node], inputs: tuple[int, ...], outputs: tuple[Value, ...], name: str
) -> Graph:
    return Graph(nodes, inputs, outputs, name, validate=False)
