"""Lowering a propagated graph to explicit per-device ops, to verify the propagation rules.

`lower(prop)` rewrites a graph sharded over a one-axis mesh of ``n`` devices into the explicit
form of `rewrite.ops.collective`: every value becomes ``n`` per-device values (a replicated
value is one value every device shares), sources are cut with ``shard``, each move the
propagation found is spelled with the collective it names (``all_reduce``, ``all_gather``,
``reduce_scatter``; a local cut is a ``shard``), each node runs once per device on its
per-device inputs at its per-device shapes, and every output is gathered back to a whole value.
The lowered graph has the original's inputs and outputs, so `rewrite.verify.Verifier` (finite
field where the ops allow, float otherwise) or `rewrite.prove` checks it against the original:
that checks the rule that chose each node's shardings, and the collectives the plan is costed
with.

`verify_rule_samples` runs that check on small sample graphs of every rule family
(`SAMPLES`): the evidence behind `rewrite.plans.propagate.RULES`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from rewrite.builder import GraphBuilder
from rewrite.errors import PlanError
from rewrite.ir import Graph, Value
from rewrite.plans.propagate import Propagation, propagate
from rewrite.plans.sharding import Sharding

__all__ = ["SAMPLES", "lower", "verify_rule_samples"]

_SHAPED = ("reshape", "expand")
Pieces = list[Value]


@dataclass
class _Lowerer:
    prop: Propagation
    b: GraphBuilder
    axis: str
    n: int

    def cut(self, x: Value, dim: int) -> Pieces:
        return list(self.b.add_node("shard", [x], {"dim": dim, "n": self.n}).outs)

    def whole(self, pieces: Pieces, s: Sharding) -> Value:
        """The whole value from its per-device pieces in sharding ``s``."""
        if self.axis in s.partial:
            return self.b.add_node("all_reduce", pieces).out(0)
        d = s.dim_of(self.axis)
        if d is None:
            return pieces[0]
        return self.b.add_node("all_gather", pieces, {"dim": d}).out(0)

    def move(self, pieces: Pieces, src: Sharding, dst: Sharding) -> Pieces:
        """Per-device pieces of ``dst`` from those of ``src`` (the collectives of the move)."""
        if src == dst:
            return pieces
        want = dst.dim_of(self.axis)
        if self.axis in src.partial and self.axis not in dst.partial and want is not None:
            return list(self.b.add_node("reduce_scatter", pieces, {"dim": want}).outs)
        x = self.whole(pieces, src)
        if self.axis in dst.partial:
            zero = self.b.add_node("sub", [x, x]).out(0)
            return [x] + [zero] * (self.n - 1)
        return self.cut(x, want) if want is not None else [x] * self.n


def lower(prop: Propagation) -> Graph:
    """The propagated graph as explicit per-device ops (see the module docstring).

    Raises:
        PlanError: If the mesh has more than one axis of size above 1.
    """
    axes = [a for a, k in prop.mesh.items() if k > 1]
    if len(axes) != 1:
        raise PlanError(f"Lowering takes a mesh of one axis above size 1, got {prop.mesh}.")
    axis = axes[0]
    g = prop.graph
    b = GraphBuilder(g.name)
    low = _Lowerer(prop, b, axis, prop.mesh[axis])
    env: dict[Value, Pieces] = {}
    for node in g:
        if node.op in ("input", "param"):
            name = node.attrs["name"]
            x = (b.input if node.op == "input" else b.param)(name, node.type.shape, node.type.dtype)
            s = prop.out[node.out(0)]
            d = s.dim_of(axis)
            env[node.out(0)] = low.cut(x, d) if d is not None else [x] * low.n
            continue
        if node.op == "const":
            env[node.out(0)] = [b.add_node("const", (), dict(node.attrs)).out(0)] * low.n
            continue
        ins = [
            low.move(env[v], prop.out[v], prop.wanted[(node.id, i)])
            for i, v in enumerate(node.inputs)
        ]
        _, outs_t = prop.local_types(node)
        attrs = dict(node.attrs)
        if node.op in _SHAPED:
            attrs["shape"] = outs_t[0].shape
        if node.op == "embedding" and prop.wanted[(node.id, 0)].dim_of(axis) == 0:
            env[node.out(0)] = _vocab_parallel(low, node.in_types[0].shape[0], ins)
            continue
        per_device: list[tuple[Value, ...]] = []
        shared = all(len(set(p)) == 1 for p in ins) and all(not prop.out[v].axes for v in node.outs)
        for k in range(1 if shared else low.n):
            made = b.add_node(node.op, [p[k] for p in ins], attrs)
            per_device.append(made.outs)
        for j, v in enumerate(node.outs):
            env[v] = [per_device[0 if shared else k][j] for k in range(low.n)]
    outs = [low.whole(env[v], prop.out[v]) for v in g.outputs]
    return b.build(outs)


def _vocab_parallel(low: _Lowerer, vocab: int, ins: list[Pieces]) -> Pieces:
    """A vocabulary-split embedding as DTensor runs it: each device looks up the ids of its
    rows (shifted by its offset), zero elsewhere; the partial sums add up to the lookup."""
    b, rows = low.b, vocab // low.n
    out = []
    for k in range(low.n):
        w, ids = ins[0][k], ins[1][k]
        shifted = b.add_node("sub", [ids, k * rows]).out(0)
        lo = b.add_node("ge", [shifted, 0]).out(0)
        hi = b.add_node("lt", [shifted, rows]).out(0)
        valid = b.add_node("logical_and", [lo, hi]).out(0)
        safe = b.add_node("where", [valid, shifted, 0]).out(0)
        rows_k = b.add_node("embedding", [w, safe]).out(0)
        t = b.type_of(valid)
        mask = b.add_node("reshape", [valid], {"shape": (*t.shape, 1)}).out(0)
        zero = b.add_node("sub", [rows_k, rows_k]).out(0)
        out.append(b.add_node("where", [mask, rows_k, zero]).out(0))
    return out


# ------------------------------------------------------------------------------ samples
def _linear(d: int) -> tuple[Graph, dict[str, Sharding]]:
    b = GraphBuilder("linear")
    x = b.input("x", (2, 2 * d, 4))
    y = b.add_node("linear", [x, b.param("w1", (2 * d, 4)), b.param("b1", (2 * d,))]).out(0)
    y = b.add_node("gelu", [y]).out(0)
    y = b.add_node("linear", [y, b.param("w2", (4, 2 * d))]).out(0)
    z = b.add_node("add", [y, x]).out(0)
    return b.build([z]), {"w1": Sharding.split(2, 0, "t"), "b1": Sharding.split(1, 0, "t"),
                          "w2": Sharding.split(2, 1, "t")}  # fmt: skip


def _sequence(d: int) -> tuple[Graph, dict[str, Sharding]]:
    g, seeds = _linear(d)
    return g, {**seeds, "x": Sharding.split(3, 1, "t")}


def _norm_attention(d: int) -> tuple[Graph, dict[str, Sharding]]:
    b = GraphBuilder("attention")
    h, e, s = 2, 2, 2 * d
    x = b.input("x", (1, s, h * e))
    n = b.add_node("layer_norm", [x, b.param("g", (h * e,))], {"normalized_shape": (h * e,)})
    qkv = []
    for name in "qkv":
        y = b.add_node("linear", [n.out(0), b.param(f"w{name}", (h * e, h * e))]).out(0)
        y = b.add_node("reshape", [y], {"shape": (1, s, h, e)}).out(0)
        qkv.append(b.add_node("transpose", [y], {"dim0": 1, "dim1": 2}).out(0))
    o = b.add_node("sdpa", qkv, {"scale": 0.5}).out(0)
    o = b.add_node("transpose", [o], {"dim0": 1, "dim1": 2}).out(0)
    o = b.add_node("reshape", [o], {"shape": (1, s, h * e)}).out(0)
    y = b.add_node("linear", [o, b.param("wo", (h * e, h * e))]).out(0)
    seeds = {f"w{c}": Sharding.split(2, 0, "t") for c in "qkv"}
    seeds["wo"] = Sharding.split(2, 1, "t")
    seeds["x"] = Sharding.split(3, 1, "t")
    return b.build([b.add_node("add", [y, x]).out(0)]), seeds


def _reduction(d: int) -> tuple[Graph, dict[str, Sharding]]:
    b = GraphBuilder("reduction")
    x = b.input("x", (2 * d, 4))
    s = b.add_node("sum", [x], {"dims": (0,)}).out(0)
    m = b.add_node("mean", [x], {"dims": (1,), "keepdim": True}).out(0)
    sm = b.add_node("softmax", [x], {"dim": 0}).out(0)
    return b.build([s, m, sm]), {"x": Sharding.split(2, 0, "t")}


def _embedding(d: int) -> tuple[Graph, dict[str, Sharding]]:
    b = GraphBuilder("embedding")
    ids = b.input("ids", (1, 3), "int64")
    w = b.param("w", (2 * d, 4))
    out = b.add_node("embedding", [w, ids]).out(0)
    return b.build([b.add_node("mul", [out, out]).out(0)]), {"w": Sharding.split(2, 0, "t")}


def _matmul(d: int) -> tuple[Graph, dict[str, Sharding]]:
    b = GraphBuilder("matmul")
    x = b.input("x", (2, 3, 2 * d))
    y = b.input("y", (2, 2 * d, 2))
    return b.build([b.add_node("matmul", [x, y]).out(0)]), {
        "x": Sharding.split(3, 2, "t"), "y": Sharding.split(3, 1, "t")
    }  # fmt: skip


def _views(d: int) -> tuple[Graph, dict[str, Sharding]]:
    b = GraphBuilder("views")
    x = b.input("x", (2 * d, 2, 3))
    y = b.add_node("reshape", [x], {"shape": (2 * d, 6)}).out(0)
    y = b.add_node("transpose", [y], {"dim0": 0, "dim1": 1}).out(0)
    y = b.add_node("slice", [y], {"dim": 0, "start": 0, "end": 4}).out(0)
    c = b.add_node("concat", [y, y], {"dim": 0}).out(0)
    e = b.add_node("expand", [b.add_node("reshape", [c], {"shape": (1, 8, 2 * d)}).out(0)],
                   {"shape": (2, 8, 2 * d)}).out(0)  # fmt: skip
    return b.build([e]), {"x": Sharding.split(3, 0, "t")}


#: Sample graphs per rule family, with the seeds that exercise the family's splits.
SAMPLES: dict[str, Callable[[int], tuple[Graph, dict[str, Sharding]]]] = {
    "linear_megatron": _linear,
    "linear_sequence_parallel": _sequence,
    "norm_attention": _norm_attention,
    "reduction": _reduction,
    "embedding": _embedding,
    "matmul": _matmul,
    "views": _views,
}


def verify_rule_samples(n: int = 2, tests: int = 2, seed: int = 0) -> dict[str, object]:
    """Lower every sample of `SAMPLES` over ``n`` devices and check it against the original.

    Returns:
        Per sample, the `rewrite.verify.CheckResult`.
    """
    from rewrite.verify import Verifier

    verifier = Verifier(tests=tests, seed=seed)
    out: dict[str, object] = {}
    rng = np.random.default_rng(seed)
    for name, make in SAMPLES.items():
        graph, seeds = make(int(rng.integers(1, 3)) * n // 2 or 1)
        prop = propagate(graph, {"t": n}, seeds)
        out[name] = verifier.check(graph, lower(prop))
    return out
