"""All random tests of a field check in one pass: a leading test axis on every value.

`BatchedFieldOps` evaluates ``T`` field tests at once. Every value carries a leading axis of size
``T`` (or 1 for values computed from constants only); test ``t`` uses exactly the sources and
random maps of ``FieldOps(xp, seeds[t])``, so the batched result equals the stacked results of
``T`` separate evaluations element for element (tests check this). The gain is one array call
per op instead of ``T``, which dominates on the small regions a search checks.

Hot ops have batched rules (element-wise ops, products, norms, softmax, attention, layout ops and
reductions with their dims shifted by one); every other op falls back to a loop over the tests
with the per-test semantics, which is always correct.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rewrite.ir import Node
from rewrite.ops import ops_where
from rewrite.verify import field as F
from rewrite.verify.field import FieldOps, is_float

__all__ = ["BatchedFieldOps"]

#: Ops with a batched rule on aligned operands (random maps, `OpDef.random_map`, have one too).
_ALIGNED = frozenset(
    {
        "add",
        "sub",
        "neg",
        "mul",
        "div",
        "rsqrt",
        "reciprocal",
        "silu",
        "gelu",
        "mm",
        "bmm",
        "linear",
        "addmm",
        "layer_norm",
        "rms_norm",
        "sdpa",
        "all_reduce",
    }
)


class BatchedFieldOps:
    """Field semantics of ``len(seeds)`` tests at once (see the module docstring).

    Args:
        xp: Array namespace.
        seeds: One seed per test.
    """

    def __init__(self, xp: Any, seeds: Sequence[int]) -> None:
        self.xp, self.seeds = xp, tuple(seeds)
        self.tests = [FieldOps(xp, s) for s in self.seeds]
        self._keys: dict[str, Any] = {}
        self._inv: Any = None
        self.mod = self.tests[0].mod
        self.inv = self.tests[0].inv
        self.matmul = self.tests[0].matmul
        self.to_field = self.tests[0].to_field
        self._additive = self.tests[0]._additive

    def rmap(self, key: str, a: Any) -> Any:
        """Per-test random map ``key`` (test ``t`` uses seed ``seeds[t]``)."""
        k = self._keys.get(key)
        if k is None:
            k = self.xp.asarray([F._key64(f"{key}|{s}") for s in self.seeds], dtype=self.xp.uint64)
            self._keys[key] = k
        keys = k.reshape((len(self.seeds),) + (1,) * (a.ndim - 1))
        return F.prf(self.xp, keys, a.astype(self.xp.uint64), F.PRIME)

    def from_field(self, a: Any, dtype: str) -> Any:
        """A field array seen as a plain ``dtype`` array (casts to int/bool)."""
        return F.from_field(self, a, dtype)

    # ------------------------------------------------------------------ evaluation
    def run(self, node: Node, args: Sequence[Any]) -> tuple[Any, ...]:
        """Batched outputs of ``node`` (leading test axis on inputs and outputs)."""
        op = node.op
        floats = all(is_float(t.dtype) for t in node.types) and all(
            is_float(t.dtype) or (op == "sdpa" and i == 3) for i, t in enumerate(node.in_types)
        )
        rule = _LAYOUT.get(op)
        if rule is not None and floats:
            return rule(self, node, args)
        maps = ops_where(random_map=True)
        if op == "linear" and len(node.in_types[0].shape) == 1:
            # a vector times a matrix: aligning the vector to the weight's rank would give the
            # product a unit axis the type does not have (tests, 1, N); run each test instead
            return self._loop(node, args)
        if (op in _ALIGNED or op in maps) and floats and (op != "matmul"):
            rank = max(a.ndim for a in args)
            aligned = [_align(self.xp, a, rank) for a in args]
            if op in maps and op not in F._SPECIAL:
                return (self.rmap(f"{op}|{sorted(node.attrs.items())}", aligned[0]),)
            if op in F._ADDITIVE:
                return (self._additive(op, aligned),)
            if op == "mul":
                return (self.mod(aligned[0] * aligned[1]),)
            if op == "all_reduce":
                out = aligned[0]
                for x in aligned[1:]:
                    out = self._additive("add", (out, x))
                return (out,)
            return F._SPECIAL[op](self, node, aligned)  # type: ignore[arg-type]
        if op == "const":
            return tuple(o[None] for o in F._const(self.tests[0], node, args))
        if op == "fused":
            return F.run_body(self, node.attrs["body"], args)
        return self._loop(node, args)

    def _loop(self, node: Node, args: Sequence[Any]) -> tuple[Any, ...]:
        """Per-test fallback: run each test's semantics on its slice and stack the results."""
        per = []
        for t, sem in enumerate(self.tests):
            per.append(sem.run(node, [a[min(t, a.shape[0] - 1)] for a in args]))
        return tuple(self.xp.stack([p[i] for p in per]) for i in range(len(node.types)))


def _align(xp: Any, a: Any, rank: int) -> Any:
    """Insert unit axes after the test axis so ``a`` has ``rank`` dims (right-aligned broadcast)."""
    if a.ndim == rank:
        return a
    return a.reshape((a.shape[0],) + (1,) * (rank - a.ndim) + tuple(a.shape[1:]))


def _shifted(name: str) -> Callable[[Mapping[str, Any]], Any]:
    return lambda attrs: attrs[name] + 1


def _reshape(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return (a[0].reshape((a[0].shape[0], *n.attrs["shape"])),)


def _expand(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    x = _align(f.xp, a[0], len(n.attrs["shape"]) + 1)
    return (f.xp.broadcast_to(x, (x.shape[0], *n.attrs["shape"])),)


def _permute(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return (f.xp.transpose(a[0], (0, *(d + 1 for d in n.attrs["dims"]))),)


def _transpose(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return (f.xp.swapaxes(a[0], n.attrs["dim0"] + 1, n.attrs["dim1"] + 1),)


def _slice(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    idx = [slice(None)] * a[0].ndim
    idx[n.attrs["dim"] + 1] = slice(n.attrs["start"], n.attrs["end"], n.attrs["step"])
    return (a[0][tuple(idx)],)


def _split(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    d, out, start = n.attrs["dim"] + 1, [], 0
    for s in n.attrs["sizes"]:
        idx = [slice(None)] * a[0].ndim
        idx[d] = slice(start, start + s)
        out.append(a[0][tuple(idx)])
        start += s
    return tuple(out)


def _diagonal(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    at = n.attrs
    return (f.xp.diagonal(a[0], at["offset"], at["dim1"] + 1, at["dim2"] + 1),)


def _shard(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(f.xp.split(a[0], n.attrs["n"], axis=n.attrs["dim"] + 1))


def _concat(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    t = max(x.shape[0] for x in a)
    xs = [f.xp.broadcast_to(x, (t, *x.shape[1:])) for x in a]
    return (f.xp.concatenate(xs, axis=n.attrs["dim"] + 1),)


def _sum(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    dims = tuple(d + 1 for d in n.attrs["dims"])
    s = f.mod(a[0].sum(axis=dims, keepdims=n.attrs["keepdim"]))
    if n.op == "mean":
        count = 1
        for d in dims:
            count *= a[0].shape[d]
        s = f.mod(s * F._inv_int(count))
    return (s,)


def _softmax(f: BatchedFieldOps, n: Node, a: Sequence[Any]) -> tuple[Any, ...]:
    return (F.softmax_field(f, a[0], n.attrs["dim"] + 1, n.op == "log_softmax"),)  # type: ignore[arg-type]


_LAYOUT: dict[str, Callable[[BatchedFieldOps, Node, Sequence[Any]], tuple[Any, ...]]] = {
    "reshape": _reshape,
    "expand": _expand,
    "permute": _permute,
    "transpose": _transpose,
    "slice": _slice,
    "split": _split,
    "diagonal": _diagonal,
    "shard": _shard,
    "concat": _concat,
    "all_gather": _concat,
    "sum": _sum,
    "mean": _sum,
    "softmax": _softmax,
    "log_softmax": _softmax,
}
