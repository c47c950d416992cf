"""The e-graph of one saturation: egglog holds it, Python names its classes and nodes.

`TermGraph` wraps an ``egglog.bindings.EGraph`` declared with `PRELUDE`. Python adds terms and
unions in batches (`flush`): rows of plain relations (``NewK``: a node of ``K`` inputs; ``NewOut``:
an output's handle; ``Same``: two handles to merge), loaded by egglog's ``input`` command from
tab-separated files and turned into terms by the ``build`` rules (40,000 nodes in 0.7 s; one
egglog command per term costs about 0.5 ms, and a long program's memory grows quadratically). egglog hash-conses them, keeps the congruence closure and runs
the match rules (`run_matches`). Python keeps, for each node it added, a
`NodeRecord` (op, interned key, input handles, output handles) and the type of every handle, so
a match (node ids) can be rebuilt as a concrete graph without asking egglog. `snapshot` reads the
canonical classes back (``egraph.freeze()``): which handles and which node outputs share a class,
and the rows of the match relations.

Not thread-safe; one per saturation.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewrite.ir import Graph, Node, TensorType, Value
from rewrite.optimize.saturate.translate import PRELUDE, Translation, arity_program

__all__ = ["Key", "NodeRecord", "Snapshot", "TermGraph", "egglog_bindings"]

_BUILD = """
(relation Made (i64 Nd))
(relation NewOut (i64 i64 i64))
(relation Same (i64 i64))
(ruleset build)
(rule ((NewOut n i h) (Made n nd)) ((union (R h) (Out nd i))) :ruleset build)
(rule ((Same a b)) ((union (R a) (R b))) :ruleset build)
"""


def _build_rule(k: int) -> str:
    """The relation of new ``k``-input nodes and the rule that makes their terms."""
    ins = "".join(f" a{j}" for j in range(k))
    terms = "".join(f" (R a{j})" for j in range(k))
    return (
        f"(relation New{k} (i64 String i64{' i64' * k}))\n"
        f"(rule ((New{k} n op k{ins})) ((let nd (N{k} op k{terms})) (set (nid nd) n) "
        f"(Made n nd)) :ruleset build)\n"
    )


def egglog_bindings() -> Any:
    """The ``egglog.bindings`` module (raises ImportError with an install hint)."""
    try:
        import egglog.bindings as bindings
    except ImportError as err:  # pragma: no cover - depends on the environment
        raise ImportError(
            "strategy='saturate' needs the egglog package: pip install 'egglog==13.2.0' "
            "(or pip install 'rewrite-tuner[saturate]')."
        ) from err
    return bindings


@dataclass(frozen=True)
class Key:
    """What a node is apart from its inputs: op, attributes and output types."""

    op: str
    attrs: Mapping[str, Any]
    types: tuple[TensorType, ...]


@dataclass(frozen=True)
class NodeRecord:
    """A node the Python side added.

    Attributes:
        nid: Its id (``(nid node)`` in egglog; the smallest id wins when nodes merge).
        key: Index into `TermGraph.keys`.
        args: Handle of each input's class.
        outs: Handle of each output's class.
    """

    nid: int
    key: int
    args: tuple[int, ...]
    outs: tuple[int, ...]


@dataclass
class Snapshot:
    """The canonical classes of the e-graph at one moment.

    Attributes:
        class_of: Handle -> canonical class id.
        members: Class id -> the ``(node id, output)`` of every node output in it (one per
            distinct e-node: merged nodes keep their smallest id).
        node_classes: Node id -> class id of each output, for the id each e-node keeps (the
            smallest of the nodes that merged into it; match rows and ``members`` name those).
        matches: Match relation name -> its rows (tuples of node ids).
        nodes: Number of distinct e-nodes.
    """

    class_of: dict[int, int]
    members: dict[int, list[tuple[int, int]]]
    node_classes: dict[int, tuple[int, ...]]
    matches: dict[str, list[tuple[int, ...]]]
    nodes: int


class TermGraph:
    """An egglog e-graph of IR nodes (see the module docstring).

    Args:
        translations: The rules' match translations.
        facts: The ``OpIn`` facts they read.
    """

    def __init__(self, translations: Sequence[Translation], facts: str) -> None:
        self._b = egglog_bindings()
        self.egraph = self._b.EGraph()
        self.translations = list(translations)
        base = {0, 1, 2, 3}.union(*(t.fixed_arities for t in self.translations))
        decl = "".join(arity_program(k) + _build_rule(k) for k in sorted(base))
        rels = "".join(t.declaration() for t in self.translations)
        rules = "".join(p for t in self.translations for p in t.programs(base))
        self._run(PRELUDE + _BUILD + decl + facts + rels + rules)
        self._dir = tempfile.TemporaryDirectory(prefix="rewrite-egraph-")
        self._arities: set[int] = set(base)
        self._rows: dict[str, list[str]] = {}
        self.keys: list[Key] = []
        self._key_index: dict[bytes, int] = {}
        self.nodes: dict[int, NodeRecord] = {}
        self._by_term: dict[tuple[int, tuple[int, ...]], NodeRecord] = {}
        self._class_of: dict[int, int] = {}
        self.added = 0  # nodes added since the last snapshot
        self.types: list[TensorType] = []
        self.unions = 0

    # ------------------------------------------------------------------ egglog
    def _run(self, text: str) -> list[Any]:
        eg = self.egraph
        return list(eg.run_program(*eg.parse_program(text)))

    def _relation(self, arity: int) -> str:
        if arity not in self._arities:
            self._arities.add(arity)
            rules = "".join(p for t in self.translations for p in t.programs(self._arities, arity))
            self._run(arity_program(arity) + _build_rule(arity) + rules)
        return f"New{arity}"

    def flush(self) -> None:
        """Send the batched terms and unions to egglog."""
        if not self._rows:
            return
        cmds = []
        for name, rows in self._rows.items():
            path = os.path.join(self._dir.name, f"{name}.tsv")
            with open(path, "w") as f:
                f.write("\n".join(rows))
                f.write("\n")
            cmds.append(f'(input {name} "{path}")')
        self._rows = {}
        self._run("\n".join(cmds) + "\n(run-schedule (saturate build))")

    def close(self) -> None:
        """Remove the batch files."""
        self._dir.cleanup()

    def run_matches(self) -> None:
        """One iteration of the match rules (egglog rebuilds first)."""
        self.flush()
        self._run("(run match 1)")

    # ------------------------------------------------------------------ terms
    def key(self, node: Node) -> int:
        """The interned key of ``node`` (op, attributes, output types)."""
        lk = node.local_key
        k = self._key_index.get(lk)
        if k is None:
            k = self._key_index[lk] = len(self.keys)
            self.keys.append(Key(node.op, node.attrs, node.types))
        return k

    def _handle(self, t: TensorType) -> int:
        self.types.append(t)
        return len(self.types) - 1

    def _canon(self, h: int) -> int:
        """A name of the class of handle ``h`` as of the last snapshot (negative: the handle
        itself, for a handle made since)."""
        c = self._class_of.get(h)
        return -1 - h if c is None else c

    def add(self, key: int, args: Sequence[int]) -> NodeRecord:
        """The node ``key(args)``: the record of the same term when Python added it since the
        last snapshot (inputs compared by class), else a new node whose outputs get new
        handles."""
        args = tuple(args)
        term = (key, tuple(self._canon(a) for a in args))
        hit = self._by_term.get(term)
        if hit is not None:
            return hit
        k = self.keys[key]
        nid = len(self.nodes)
        outs = tuple(self._handle(t) for t in k.types)
        rec = NodeRecord(nid, key, args, outs)
        self.nodes[nid] = rec
        self._by_term[term] = rec
        self.added += 1
        rel = self._relation(len(args))
        row = "\t".join([str(nid), k.op, str(key), *map(str, args)])
        self._rows.setdefault(rel, []).append(row)
        outs_rows = self._rows.setdefault("NewOut", [])
        outs_rows.extend(f"{nid}\t{i}\t{h}" for i, h in enumerate(outs))
        return rec

    def union(self, a: int, b: int) -> None:
        """Merge the classes of handles ``a`` and ``b``."""
        if a != b:
            self._rows.setdefault("Same", []).append(f"{a}\t{b}")
            self.unions += 1

    def add_graph(self, graph: Graph) -> tuple[dict[Value, int], tuple[int, ...]]:
        """Add every node of ``graph``; returns its values' handles and its outputs' handles."""
        handles: dict[Value, int] = {}
        for nid in graph.topo_order():
            node = graph.node(nid)
            rec = self.add(self.key(node), [handles[v] for v in node.inputs])
            for i, h in enumerate(rec.outs):
                handles[Value(nid, i)] = h
        return handles, tuple(handles[v] for v in graph.outputs)

    # ------------------------------------------------------------------ reading back
    def snapshot(self, relations: Sequence[str]) -> Snapshot:
        """The canonical classes and the match relations' rows (flushes first)."""
        self.flush()
        eg = self.egraph
        funcs = eg.freeze().functions
        to_i64 = eg.value_to_i64
        class_id: dict[Any, int] = {}

        def cid(v: Any) -> int:
            c = class_id.get(v)
            if c is None:
                c = class_id[v] = len(class_id)
            return c

        class_of = {to_i64(r.inputs[0]): cid(r.output) for r in funcs["R"].rows}
        nd_nid = {r.inputs[0]: to_i64(r.output) for r in funcs["nid"].rows}
        members: dict[int, list[tuple[int, int]]] = {}
        outs: dict[int, dict[int, int]] = {}
        for r in funcs["Out"].rows:
            nid = nd_nid[r.inputs[0]]
            i = to_i64(r.inputs[1])
            c = cid(r.output)
            members.setdefault(c, []).append((nid, i))
            outs.setdefault(nid, {})[i] = c
        node_classes = {n: tuple(o[i] for i in range(len(o))) for n, o in outs.items()}
        matches = {
            rel: [tuple(nd_nid[x] for x in r.inputs) for r in funcs[rel].rows]
            for rel in relations
            if rel in funcs
        }
        for m in members.values():
            m.sort()
        self._class_of, self._by_term, self.added = class_of, {}, 0
        return Snapshot(class_of, members, node_classes, matches, len(node_classes))
