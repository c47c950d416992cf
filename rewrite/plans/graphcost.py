"""Per-device cost of one graph (a block, or the rest of a model) under a sharding.

`graph_cost(graph, prop, profile, options)` turns a `Propagation` into the numbers a training
step is assembled from (`rewrite.plans.step`), per device and per microbatch:

* **Compute**, forward: every kernel node at its per-device types by the profile's roofline
  (`rewrite.costmodel.kernel_terms` and `kernel_time`): GEMMs and attention on the matmul unit at the
  profile's matmul efficiency, float8 linears (``options.float8``) at the float8 peak times the
  profile's ``training.float8_efficiency``, causal attention at half its FLOPs (the kernels skip
  the masked half), other kernels memory- or vector-bound. Views and ``transpose``/``permute``
  (views in PyTorch) are free. Eager (``compile=False``) runs every other kernel on its own; with
  ``compile=True`` the kernels between two library calls (GEMM, attention, convolution) that are
  connected form one generated kernel that reads its inputs and writes its outputs once
  (Inductor's fusion).
* **Compute**, backward: a linear costs one forward per gradient it produces (input, weight),
  a matmul two, attention ``training.backward_attention`` forwards (FlashAttention's backward
  recomputes the scores), every other kernel twice its forward (it reads the saved tensors and the
  output gradient and writes the input gradient). Nodes no gradient flows through cost nothing.
* **Recompute** by checkpointing mode: ``full`` re-runs the forward (its collectives included);
  ``selective`` is torchtitan's op-level policy (every second GEMM's output, attention's output
  and reduce-scatters' outputs are kept; everything else, all-gathers included, is re-run).
* **Communication**: the propagation's forward moves, its backward moves, and per parameter the
  axes its gradient is partial along.
* **Memory**: bytes saved for backward by mode (``none``: the tensors autograd keeps, per op;
  ``selective``: the block's input and the kept outputs; ``full``: the block's input), the
  forward's transient peak (liveness over the graph), the parameters' per-device elements.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rewrite.costmodel import kernel_terms, kernel_time
from rewrite.devices import DeviceProfile
from rewrite.ir import Graph, Node, TensorType, Value
from rewrite.ops.base import get_op
from rewrite.plans.propagate import Propagation
from rewrite.plans.sharding import Axes, Collective

__all__ = ["CHECKPOINT_MODES", "GraphCost", "Options", "graph_cost"]

#: Activation checkpointing modes.
CHECKPOINT_MODES = ("none", "selective", "full")
_EXTERN = frozenset({"matmul", "attention", "conv"})
_VIEWS = frozenset({"reshape", "expand", "slice", "split", "transpose", "permute"})
_SAVE_OUTPUT = frozenset({"rsqrt", "sqrt", "exp", "sigmoid", "tanh", "softmax", "log_softmax"})
_SAVE_NOTHING = frozenset(
    {"add", "sub", "neg", "cast", "mean", "sum", "concat", "reshape", "expand", "slice", "split",
     "transpose", "permute", "all_gather", "all_reduce", "reduce_scatter"}
)  # fmt: skip


@dataclass(frozen=True)
class Options:
    """How kernels run (numerics and compilation).

    Attributes:
        precision: ``"bf16"`` (the graph's bfloat16 values as they are) or ``"fp32"`` (every
            bfloat16 value costed as float32).
        float8: Linears with a weight parameter run their GEMMs in float8 (torchao's dynamic
            scaling), casts included.
        compile: Kernels between library calls are fused (see the module docstring).
        causal: Attention is causal.
    """

    precision: str = "bf16"
    float8: bool = False
    compile: bool = False
    causal: bool = False


@dataclass(frozen=True)
class GraphCost:
    """Per-device, per-microbatch cost of one graph (see the module docstring).

    Attributes:
        fwd: Forward compute seconds.
        bwd: Backward compute seconds.
        recompute: Extra forward seconds per checkpointing mode.
        matmul: Forward seconds in GEMMs (what asynchronous tensor parallelism overlaps).
        fwd_comm: Forward collectives.
        bwd_comm: Backward collectives.
        recompute_comm: Collectives re-run per checkpointing mode.
        grad_partial: Per parameter name, ``(per-device elements, axes its gradient is partial
            along)``.
        saved: Bytes kept for backward per checkpointing mode.
        transient: Peak bytes alive in the forward beyond what is kept.
        recompute_peak: Bytes a checkpointed graph's recomputation holds while its backward runs
            (its full saved set).
        param_numel: Per-device parameter elements.
        param_bytes: Per-device parameter bytes in the graph's dtypes.
        out_bytes: Per-device bytes of the graph's first output (what a pipeline stage sends).
        flops: Per-device forward FLOPs (causal attention halved).
        kernels: Forward kernel launches.
    """

    fwd: float
    bwd: float
    recompute: Mapping[str, float]
    matmul: float
    fwd_comm: tuple[Collective, ...]
    bwd_comm: tuple[Collective, ...]
    recompute_comm: Mapping[str, tuple[Collective, ...]]
    grad_partial: Mapping[str, tuple[int, Axes]]
    saved: Mapping[str, int]
    transient: int
    recompute_peak: int
    param_numel: int
    param_bytes: int
    out_bytes: int
    flops: float
    kernels: int


def _dtype(t: TensorType, options: Options) -> TensorType:
    if options.precision == "fp32" and t.dtype in ("bfloat16", "float16"):
        return TensorType(t.shape, "float32")
    return t


class _Local:
    """Per-device node types and kernel times of one propagated graph."""

    def __init__(self, prop: Propagation, p: DeviceProfile, options: Options) -> None:
        self.prop, self.p, self.options = prop, p, options
        self.types: dict[Value, TensorType] = {}
        for v, s in prop.out.items():
            self.types[v] = _dtype(s.local_type(prop.graph.type_of(v), prop.mesh), options)

    def node(self, node: Node) -> Node:
        ins, outs = self.prop.local_types(node)
        ins = tuple(_dtype(t, self.options) for t in ins)
        outs = tuple(_dtype(t, self.options) for t in outs)
        return Node(node.id, node.op, node.attrs, node.inputs, ins, outs)

    def seconds(self, node: Node) -> tuple[float, float]:
        """``(seconds, flops)`` of one kernel at its local types."""
        local = self.node(node)
        unit, family, work, iflops, nbytes = kernel_terms(local, self.p)
        flops = float(iflops)
        eta = self.p.efficiency[unit] * self.p.family_efficiency.get(family, 1.0)
        if node.op == "sdpa" and (self.options.causal or node.attrs.get("is_causal")):
            work, flops = work / 2, flops / 2
        if self.options.float8 and node.op == "linear" and self._has_weight(node):
            work *= self.p.peak("matmul", "bfloat16") / self.p.peak("matmul", "float8")
            eta = float(self.p.training.get("float8_efficiency", self.p.efficiency["matmul"]))
            x, w = local.in_types[0], local.in_types[1]
            nbytes += 2 * (x.numel + w.numel)  # amax and cast of both operands
        t = kernel_time(
            work,
            nbytes,
            eta,
            self.p.efficiency["memory"] * self.p.family_efficiency.get(family, 1.0),
            self.p.memory_bandwidth,
            self.p.launch_overhead + self.p.device_overhead,
        )
        return t, flops

    def _has_weight(self, node: Node) -> bool:
        return self.prop.graph.node(node.inputs[1].node).op == "param"

    def nbytes(self, v: Value) -> int:
        return self.types[v].nbytes


def _is_kernel(node: Node) -> bool:
    return node.op not in _VIEWS and get_op(node.op).kind == "kernel"


def _fused_regions(graph: Graph) -> list[list[Node]]:
    """Connected groups of non-library kernels (and views) between library calls."""
    parent: dict[int, int] = {}

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    members = [
        n for n in graph if get_op(n.op).kind != "source" and get_op(n.op).family not in _EXTERN
    ]
    for n in members:
        parent[n.id] = n.id
    for n in members:
        for v in n.inputs:
            if v.node in parent:
                parent[find(v.node)] = find(n.id)
    groups: dict[int, list[Node]] = {}
    for n in members:
        groups.setdefault(find(n.id), []).append(n)
    return list(groups.values())


def _region_seconds(region: list[Node], graph: Graph, local: _Local) -> tuple[float, float]:
    ids = {n.id for n in region}
    p = local.p
    flops = 0.0
    for n in region:
        if _is_kernel(n):
            ln = local.node(n)
            flops += get_op(n.op).flops(ln.in_types, ln.types, ln.attrs)
    ins: dict[tuple[Value, str], int] = {}
    for n in region:
        for i, v in enumerate(n.inputs):
            if v.node not in ids:
                want = local.prop.wanted[(n.id, i)]
                t = _dtype(want.local_type(n.in_types[i], local.prop.mesh), local.options)
                ins[(v, str(want))] = t.nbytes
    outs = {
        v
        for n in region
        for v in n.outs
        if any(u not in ids for u in graph.users(n.id)) or v in graph.outputs
    }
    nbytes = sum(ins.values()) + sum(local.nbytes(v) for v in outs)
    if not any(_is_kernel(n) for n in region):
        return 0.0, 0.0
    dtype = next(iter(local.types[v] for v in outs), TensorType((), "float32")).dtype
    work = flops / p.peak("vector", dtype)
    t = kernel_time(
        work,
        nbytes,
        p.efficiency["vector"],
        p.efficiency["memory"],
        p.memory_bandwidth,
        p.launch_overhead,
    )
    return t, flops


def _bwd_factor(node: Node, prop: Propagation, p: DeviceProfile) -> float:
    if not any(v in prop.grad for v in node.outs):
        return 0.0
    if node.op == "linear":
        grads = sum(1 for v in node.inputs[:2] if v in prop.grad)
        return float(grads)
    if node.op == "sdpa":
        return float(p.training.get("backward_attention", 2.5))
    return 2.0


def _saved_values(node: Node, prop: Propagation) -> list[int]:
    """Which tensors autograd keeps for ``node``'s backward (see the module docstring): input
    indices, or ``-1`` for the output."""
    if not node.inputs or node.op in _SAVE_NOTHING or not any(v in prop.grad for v in node.outs):
        return []
    ins = list(node.inputs)
    if node.op == "linear":
        return [0] if ins[1] in prop.grad else []
    if node.op in ("mul", "div", "matmul", "mm", "bmm"):
        return [i for i, other in ((0, ins[1]), (1, ins[0])) if other in prop.grad]
    if node.op == "sdpa":
        return [0, 1, 2, -1]
    if node.op in _SAVE_OUTPUT:
        return [-1]
    if node.op in ("layer_norm", "rms_norm", "batch_norm", "conv2d", "embedding", "where"):
        return [1 if node.op == "embedding" else 0]
    return [0]


def _base(v: Value, graph: Graph) -> Value:
    node = graph.node(v.node)
    while node.op in _VIEWS:
        v = node.inputs[0]
        node = graph.node(v.node)
    return v


def _transient(graph: Graph, local: _Local, internal: frozenset[int] = frozenset()) -> int:
    """Peak bytes of the forward's intermediates alive at once (sources, and values a fused
    kernel keeps in registers, excluded)."""
    last_use: dict[Value, int] = {}
    order = list(graph)
    for i, n in enumerate(order):
        for v in n.inputs:
            last_use[_base(v, graph)] = i
    live: dict[Value, int] = {}
    peak = 0
    for i, n in enumerate(order):
        if get_op(n.op).kind == "source" or n.op in _VIEWS or n.id in internal:
            continue
        for v in n.outs:
            live[v] = local.nbytes(v)
        peak = max(peak, sum(live.values()))
        for v in [v for v in live if last_use.get(v, -1) <= i and v not in graph.outputs]:
            del live[v]
    return peak


def _internal(graph: Graph) -> frozenset[int]:
    """Nodes of fused regions whose outputs never leave their region (compiled code keeps them
    in registers; Inductor's partitioner recomputes them in backward rather than saving them)."""
    out: set[int] = set()
    for region in _fused_regions(graph):
        ids = {n.id for n in region}
        for n in region:
            users = graph.users(n.id)
            if users and all(u in ids for u in users) and n.out(0) not in graph.outputs:
                out.add(n.id)
    return frozenset(out)


def _recomputed_moves(prop: Propagation) -> set[tuple[Value, Any]]:
    """Forward moves a checkpointed graph's recomputation runs again: PyTorch's non-reentrant
    checkpoint stops recomputing once the last tensor backward needs is back, so a move whose
    consumers all come after the last node keeping a tensor is not re-run (a block's closing
    all-reduce or reduce-scatter)."""
    order = {n.id: i for i, n in enumerate(prop.graph)}
    last = max((order[n.id] for n in prop.graph if _saved_values(n, prop)), default=-1)
    first: dict[tuple[Value, Any], int] = {}
    for v, consumer, _, want in prop.moves:
        key = (v, want)
        first[key] = min(first.get(key, order[consumer]), order[consumer])
    return {k for k, i in first.items() if i <= last}


def _selective_kept(graph: Graph) -> set[int]:
    """Node ids whose outputs torchtitan's op-level selective checkpointing keeps."""
    kept, mm = set(), 0
    for n in graph:
        if n.op in ("linear", "mm", "matmul", "bmm", "addmm"):
            mm += 1
            if mm % 2 == 1:
                kept.add(n.id)
        elif n.op in ("sdpa", "reduce_scatter"):
            kept.add(n.id)
    return kept


def graph_cost(
    prop: Propagation, p: DeviceProfile, options: Options, grad_input: str | None = None
) -> GraphCost:
    """The per-device cost of the propagated graph (see the module docstring).

    Args:
        prop: The graph's propagation.
        p: The device profile.
        options: Numerics and kernels.
        grad_input: Name of the input the graph's gradient flows back to (a block's hidden
            state), kept by checkpointing; None for none.
    """
    graph = prop.graph
    local = _Local(prop, p, options)
    times: dict[int, float] = {}
    fwd = matmul = flops = 0.0
    kernels = 0
    for n in graph:
        if not _is_kernel(n):
            continue
        kernels += 1
        fam = get_op(n.op).family
        if options.compile and fam not in _EXTERN:
            continue
        t, f = local.seconds(n)
        times[n.id] = t
        fwd += t
        flops += f
        if fam == "matmul":
            matmul += t
    bwd = sum(t * _bwd_factor(graph.node(i), prop, p) for i, t in times.items())
    if options.compile:
        for region in _fused_regions(graph):
            t, f = _region_seconds(region, graph, local)
            fwd += t
            flops += f
            if any(v in prop.grad for n in region for v in n.outs):
                bwd += 2 * t
            for n in region:
                times[n.id] = t / len(region)
    kept = _selective_kept(graph)
    fwd_comm = tuple(c for _, _, cs in prop.forward for c in cs)
    moves, partial = prop.backward()
    again = _recomputed_moves(prop)
    full_comm = tuple(c for v, w, cs in prop.forward if (v, w) in again for c in cs)
    sel_comm = tuple(c for c in full_comm if c.kind != "reduce_scatter")
    internal = _internal(graph) if options.compile else frozenset()
    saved_all: dict[tuple[Value, str], int] = {}
    for n in graph:
        for i in _saved_values(n, prop):
            v = n.out(0) if i < 0 else n.inputs[i]
            b = _base(v, graph)
            if (
                b.node in internal
                or graph.node(b.node).op in ("param", "const")
                or (
                    graph.node(b.node).op == "input"
                    and graph.node(b.node).attrs["name"] != grad_input
                )
            ):
                continue
            if i < 0:
                saved_all[(b, "out")] = local.nbytes(b)
            else:
                want = prop.wanted[(n.id, i)]
                lt = _dtype(want.local_type(n.in_types[i], prop.mesh), options)
                saved_all[(b, str(want))] = lt.nbytes
    inp = [v for v in graph.inputs if graph.node(v).attrs.get("name") == grad_input]
    in_bytes = sum(local.nbytes(Value(i)) for i in inp)
    kept_bytes = sum(local.nbytes(Value(i)) for i in kept)
    params = graph.params()
    grad_partial = {
        n.attrs["name"]: (local.types[n.out(0)].numel, partial.get(n.id, ())) for n in params
    }
    return GraphCost(
        fwd=fwd,
        bwd=bwd,
        recompute={
            "none": 0.0,
            "selective": sum(t for i, t in times.items() if i not in kept),
            "full": fwd,
        },
        matmul=matmul,
        fwd_comm=fwd_comm,
        bwd_comm=tuple(c for _, cs in moves for c in cs),
        recompute_comm={"none": (), "selective": sel_comm, "full": full_comm},
        grad_partial=grad_partial,
        saved={
            "none": sum(saved_all.values()),
            "selective": in_bytes + kept_bytes,
            "full": in_bytes,
        },
        transient=_transient(graph, local, internal),
        recompute_peak=sum(saved_all.values()),
        param_numel=sum(local.types[n.out(0)].numel for n in params),
        param_bytes=sum(local.types[n.out(0)].nbytes for n in params),
        out_bytes=local.nbytes(graph.outputs[0]),
        flops=flops,
        kernels=kernels,
    )
