"""Memoized graph evaluation for the verifier, in finite-field or float semantics.

An `Evaluator` evaluates graphs for one test (one seed): graph inputs and parameters get random
values drawn from ``(seed, node hash)``, so two graphs that share a source node see the same
value, and every node's outputs are memoized under its structural hash. Integer sources are drawn
from a wide signed range, or from ``[0, n)`` when they index a tensor of size ``n``, and bool
sources uniformly (see `rewrite.verify.sources`). Evaluating a rewritten graph after its parent
therefore recomputes only the nodes the rewrite created. The memo is an LRU bounded in bytes.

Not thread-safe: use one evaluator per thread or process.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rewrite.ir import Graph, Node, TensorType, numpy_dtype
from rewrite.verify.field import PRIME, Semantics, is_float, random_elements, run_body
from rewrite.verify.sources import SourceKey, int_range
from rewrite.verify.sources import index_bounds as index_bounds_of

__all__ = ["DeadlineExceeded", "Evaluator", "FloatOps", "Semantics", "run_body"]


class DeadlineExceeded(Exception):
    """An evaluation ran past its deadline (the checker reports the check as not run)."""


class FloatOps:
    """Float semantics: the ops' numpy reference implementations in the declared dtypes.

    Args:
        xp: Array namespace.
        seed: Unused (float semantics has no random maps); kept for a uniform signature.
    """

    def __init__(self, xp: Any, seed: int = 0) -> None:
        self.xp, self.seed = xp, seed

    def run(self, node: Node, args: Sequence[Any]) -> tuple[Any, ...]:
        """Outputs of ``node`` on ``args`` computed by its reference implementation."""
        from rewrite.ops import get_op

        if node.op == "fused":
            return run_body(self, node.attrs["body"], args)
        with np.errstate(all="ignore"):  # non-finite results are judged by the checker, not warned
            outs = get_op(node.op).impl(self.xp, list(args), node.attrs)
        return tuple(
            self.xp.asarray(o).astype(numpy_dtype(t.dtype), copy=False)
            for o, t in zip(outs, node.types)
        )


def node_hashes(graph: Graph) -> Mapping[int, bytes]:
    """Structural hash of every node of ``graph`` (id -> 16 bytes), computed once per graph."""
    return graph.node_hashes()


def _source_rng(seed: int, key: str) -> np.random.Generator:
    d = hashlib.blake2b(f"{seed}|{key}".encode(), digest_size=8).digest()
    return np.random.default_rng(int.from_bytes(d, "little"))


class Evaluator:
    """Evaluates graphs for one test seed with a per-node-hash memo.

    Args:
        sem: The semantics (`FieldOps` or `FloatOps`).
        memo_bytes: Bound on the bytes of memoized arrays (least recently used evicted).
    """

    def __init__(self, sem: Semantics, memo_bytes: int = 256 << 20) -> None:
        self.sem, self.xp = sem, sem.xp
        self.field = not isinstance(sem, FloatOps)
        self.memo: OrderedDict[bytes, tuple[Any, ...]] = OrderedDict()
        self.memo_bytes, self._bytes = memo_bytes, 0
        self.index_bounds: Mapping[SourceKey, int] = {}
        self.hits = self.misses = 0

    def source(self, node: Node, key: str) -> Any:
        """Random value of an ``input``/``param`` node (a function of the seed and ``key``).

        A batched semantics (with ``seeds``) gets the per-seed values stacked on a leading axis.
        """
        seeds = getattr(self.sem, "seeds", None)
        if seeds is not None:
            if self.field:
                return self._source(node, [f"{s}|{key}" for s in seeds], 0)
            return self.xp.stack([self._source(node, key, s) for s in seeds])
        return self._source(node, key, getattr(self.sem, "seed", 0))

    def _source(self, node: Node, key: str | list[str], seed: int) -> Any:
        t: TensorType = node.type
        xp = self.xp
        if self.field or not is_float(t.dtype):
            keys = key if isinstance(key, list) else f"{seed}|{key}"
            if is_float(t.dtype):
                return random_elements(xp, keys, t.shape, PRIME)
            if t.dtype == "bool":
                return random_elements(xp, keys, t.shape, 2) != 0
            bound = self.index_bounds.get((node.op, node.attrs["name"]))
            lo, hi = (0, bound) if bound is not None else int_range(t.dtype)
            a = random_elements(xp, keys, t.shape, hi - lo) + lo
            return a.astype(numpy_dtype(t.dtype))
        assert isinstance(key, str), "per-seed keys are only used by field semantics"
        rng = _source_rng(seed, key)
        # positive weights keep variances, scales and norms in range
        a = rng.uniform(0.5, 1.5, t.shape) if node.op == "param" else rng.standard_normal(t.shape)
        return xp.asarray(a.astype(numpy_dtype(t.dtype)))

    def _remember(self, key: bytes, outs: tuple[Any, ...]) -> None:
        self.memo[key] = outs
        for o in outs:
            self._bytes += o.nbytes
        while self._bytes > self.memo_bytes and len(self.memo) > 1:
            _, old = self.memo.popitem(last=False)
            self._bytes -= sum(int(getattr(o, "nbytes", 0)) for o in old)

    def outputs(
        self,
        graph: Graph,
        index_bounds: Mapping[SourceKey, int] | None = None,
        deadline: float | None = None,
    ) -> list[Any]:
        """The graph's output arrays, computing only nodes missing from the memo.

        Values found in the memo are taken when the walk reaches them (so later evictions cannot
        lose them), and every value is dropped from this call's working set after its last
        reader: peak memory is the live values plus the memo, not the whole graph.

        Args:
            graph: The graph.
            index_bounds: Exclusive bounds of the index sources (`rewrite.verify.sources`);
                default: those of ``graph`` alone. Pass the joint bounds of every graph of one
                check so they all see the same source values.
            deadline: `time.perf_counter` value after which no further node is computed.

        Raises:
            DeadlineExceeded: When ``deadline`` passes before the outputs are computed.
        """
        bounds = index_bounds if index_bounds is not None else index_bounds_of(graph)
        self.index_bounds = bounds
        structural = node_hashes(graph)
        hashes = structural
        if bounds:
            # Values drawn under these bounds are memoized apart from the unbounded ones (most
            # graphs index nothing and share one memo); switching back and forth costs nothing.
            salt = hashlib.blake2b(repr(sorted(bounds.items())).encode(), digest_size=8).digest()
            hashes = {nid: salt + h for nid, h in structural.items()}
        need, env = self._needed(graph, hashes)
        readers: dict[int, int] = {}
        for nid in need:
            if nid not in env:
                for v in graph.node(nid).inputs:
                    readers[v.node] = readers.get(v.node, 0) + 1
        keep = {v.node for v in graph.outputs}
        for nid in need:
            if nid in env:
                continue
            if deadline is not None and time.perf_counter() > deadline:
                raise DeadlineExceeded(f"deadline passed with {len(need)} nodes to evaluate")
            node = graph.node(nid)
            self.misses += 1
            if node.op in ("input", "param"):
                outs: tuple[Any, ...] = (self.source(node, structural[nid].hex()),)
            else:
                outs = self.sem.run(node, [env[v.node][v.index] for v in node.inputs])
                for v in node.inputs:
                    readers[v.node] -= 1
                    if not readers[v.node] and v.node not in keep:
                        env.pop(v.node, None)
            env[nid] = outs
            self._remember(hashes[nid], outs)
        return [env[v.node][v.index] for v in graph.outputs]

    def _needed(
        self, graph: Graph, hashes: Mapping[int, bytes]
    ) -> tuple[list[int], dict[int, tuple[Any, ...]]]:
        """Node ids to visit in topological order, and the memoized values among them.

        The walk stops descending at memoized nodes and takes their values right away, since
        remembering the values computed later may evict them from the memo.
        """
        order: list[int] = []
        found: dict[int, tuple[Any, ...]] = {}
        seen: set[int] = set()
        stack: list[tuple[int, bool]] = [(v.node, False) for v in reversed(graph.outputs)]
        memo = self.memo
        while stack:
            nid, expanded = stack.pop()
            if expanded:
                order.append(nid)
                continue
            if nid in seen:
                continue
            seen.add(nid)
            stack.append((nid, True))
            hit = memo.get(hashes[nid])
            if hit is not None:
                memo.move_to_end(hashes[nid])
                self.hits += 1
                found[nid] = hit
                continue
            for v in reversed(graph.node(nid).inputs):
                if v.node not in seen:
                    stack.append((v.node, False))
        return order, found
