"""Multi-objective analytic cost model.

`cost(graph, device)` returns a `CostVector`:

* ``flops``: sum of op FLOPs (`rewrite.ops`; a GEMM ``[M, K] @ [K, N]`` is ``2 M N K``).
* ``bytes``: sum of bytes moved by kernels: every input read once and every output written once
  (`OpDef.bytes`). Views (reshape, expand, slice, split) and sources move nothing; a fused group
  moves only its external inputs and outputs; an embedding reads only the gathered rows; an
  opaque node is charged twice its input and output bytes.
* ``kernels``: number of kernel launches (every node except sources and views).
* ``latency`` (seconds): a single-stream schedule. On a profile with ``dispatch: "serial"`` (the
  default, a CPU) it is the sum over kernels of::

      t = max(F' / (eta_f * phi * peak_f(dtype)), B / (eta_m * phi * bandwidth))
          + launch_overhead + device_overhead

  where ``F'`` is the kernel's FLOPs with GEMM dims rounded up to the profile's
  ``matmul_tile`` (``F' = F`` for other ops), ``peak_f`` is the ``matmul`` unit for GEMMs,
  attention, convolution and fused groups containing one, and the ``vector`` unit otherwise
  (pooling, reductions, elementwise ops), at the dtype of output 0 (input 0 for bool outputs),
  and the ``eta`` are the profile's efficiencies and ``phi`` its ``family_efficiency`` of the
  op's family (1 unless the profile was fitted by `rewrite.measurement.calibrate`). On a
  profile with ``element_time`` (measured by `rewrite.measurement.calibrate` on a CPU) an
  element-wise op's ``F' / peak_f`` is its measured seconds per element times its output's
  elements instead (`rewrite.devices`: a ``tanh`` is not 4 ``add`` s). A profile's
  ``view_overhead`` (default 0) is charged per view node. A fused group runs at the efficiency
  of its body's family with the most FLOPs. On a profile with ``fusion: "eager"`` (a backend
  that runs a fused group's body op by op, e.g. eager PyTorch) a fused group costs the sum of its
  body's nodes plus one launch, unless the profile has ``fused_epilogues`` and the group is a
  convolution with an epilogue its library runs in the same call (`rewrite.epilogue`): one
  kernel. `kernel_time` is this formula, the only copy of it. On a profile with ``dispatch: "async"`` (a GPU, whose host queues launches
  while the device runs earlier kernels) the host's and the device's seconds are summed apart,
  ``host_time`` (``launch_overhead`` per kernel, ``view_overhead`` per view) and ``device_time``
  (``t`` without ``launch_overhead``), and ``latency = max(host_time, device_time)``: a graph of many
  small kernels is bound by its launches, one of large kernels by the device.
* On a profile with ``fold_weights`` a node computed from weights and constants alone (a weight
  concatenation a merge introduced, a convolution weight scaled by its batch norm) costs nothing:
  it runs once, when the model is loaded. On a profile with ``fusion: "compiled"`` a kernel
  outside the matmul, convolution and attention families is charged its arithmetic alone (no
  launch, no memory traffic), as the compiler generates it fused with its neighbours. A GEMM whose
  output columns are not a multiple of the profile's ``matmul_align`` runs at
  ``unaligned_efficiency`` of its efficiency.
* ``peak_memory`` (bytes): liveness over the deterministic topological order: parameters and
  constants resident for the whole run (on a ``fold_weights`` profile also the folded values a
  per-call node reads, which the module keeps beside the weights they came from; the folding's
  intermediates take nothing); each kernel output allocated when its node runs and freed
  after its last reader (graph outputs live to the end); a view aliases its input's buffer and
  extends its lifetime; graph inputs are allocated first. At each node the peak is taken after its
  outputs are allocated and before its inputs are freed.
* ``communication`` (seconds): collective time; 0 for the unsharded graphs of this version.

Incremental costing: a graph made by `GraphEditor` records its `Graph.delta`. `cost(child,
device, base=parent_cost)` then updates ``latency``, ``flops``, ``bytes`` and ``kernels`` from the
removed and added nodes only, and computes ``peak_memory`` lazily on first access. Per-node costs
are cached on the (shared, immutable) node objects and by content signature.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rewrite.devices import DeviceProfile, load_device
from rewrite.epilogue import conv_epilogue
from rewrite.ir import Graph, Node, Value
from rewrite.ops import get_op

__all__ = [
    "COST_FIELDS",
    "EXTERN_FAMILIES",
    "CostVector",
    "NodeCost",
    "clear_caches",
    "cost",
    "kernel_terms",
    "kernel_time",
    "node_cost",
    "peak_memory",
]

#: Names of the cost vector's entries, in `CostVector.as_tuple` order.
COST_FIELDS = ("latency", "peak_memory", "flops", "bytes", "kernels", "communication")

#: Per-node cost: ``(device seconds, flops, bytes, kernels, host seconds)``; on a serial profile
#: the device seconds hold the launch and view overheads and the host seconds are 0.
NodeCost = tuple[float, int, int, int, float]

_ZERO: NodeCost = (0.0, 0, 0, 0, 0.0)
_MATMUL_OPS = frozenset({"mm", "bmm", "matmul", "linear", "addmm"})
_MATMUL_FAMILIES = frozenset({"matmul", "attention", "conv"})
#: Families a compiler calls a library kernel for instead of generating code (``fusion:
#: "compiled"``); the fused groups that hold one are charged as such a kernel.
EXTERN_FAMILIES = _MATMUL_FAMILIES
_SIG_CACHE: dict[tuple[str, bytes, Any], NodeCost] = {}  # (profile digest, node signature)
_SIG_CACHE_MAX = 1_000_000  # bounded: emptied when full


class CostVector:
    """Named cost vector of one graph on one device (see the module docstring).

    Attributes:
        latency: Estimated seconds on one stream: ``max(host_time, device_time)``.
        device_time: Seconds of the kernels (launch and view overheads included on a serial
            profile).
        host_time: Seconds of the host's launches and views on an async profile (else 0).
        flops: Total FLOPs.
        bytes: Total bytes moved.
        kernels: Kernel launches.
        communication: Collective seconds (0 for unsharded graphs).
        device: Profile name.
        graph_uid: `Graph.uid` of the costed graph (links incremental updates).
    """

    __slots__ = (
        "_fold",
        "_graph",
        "_peak",
        "_profile",
        "bytes",
        "communication",
        "device",
        "device_time",
        "flops",
        "graph_uid",
        "host_time",
        "kernels",
        "latency",
    )

    def __init__(
        self,
        device_time: float,
        flops: int,
        bytes: int,
        kernels: int,
        communication: float,
        device: str,
        graph: Graph,
        peak: int | None = None,
        host_time: float = 0.0,
        fold: bool = False,
        profile: str = "",
    ) -> None:
        self.device_time, self.host_time = device_time, host_time
        self._fold, self._profile = fold, profile
        self.latency = max(device_time, host_time)
        self.flops, self.bytes, self.kernels = flops, bytes, kernels
        self.communication, self.device, self.graph_uid = communication, device, graph.uid
        self._peak = peak
        self._graph: Graph | None = graph if peak is None else None

    @property
    def peak_memory(self) -> int:
        """Peak bytes in use (computed on first access after an incremental update)."""
        if self._peak is None:
            assert self._graph is not None
            self._peak = peak_memory(self._graph, fold=self._fold)
            self._graph = None
        return self._peak

    def as_dict(self) -> dict[str, float]:
        """``{name: value}`` over `COST_FIELDS`."""
        return {k: float(getattr(self, k)) for k in COST_FIELDS}

    def as_tuple(self) -> tuple[float, ...]:
        """Values in `COST_FIELDS` order (for vector comparisons)."""
        return tuple(float(getattr(self, k)) for k in COST_FIELDS)

    def __repr__(self) -> str:
        split = (
            f" (host {self.host_time * 1e3:.4f}, device {self.device_time * 1e3:.4f})"
            if self.host_time
            else ""
        )
        return (
            f"CostVector(latency={self.latency * 1e3:.4f} ms{split}, "
            f"peak_memory={self.peak_memory / 2**20:.2f} MiB, "
            f"flops={self.flops:.4g}, bytes={self.bytes:.4g}, kernels={self.kernels}, "
            f"communication={self.communication}, device={self.device!r})"
        )


def clear_caches() -> None:
    """Empty the process-wide node-cost cache (keyed by profile digest and node signature; it
    also empties itself when it reaches `_SIG_CACHE_MAX` entries). The costs memoized on nodes
    go with their graphs."""
    _SIG_CACHE.clear()


def _tile_factor(node: Node, tile: tuple[int, int, int]) -> float:
    out = node.types[0]
    n = out.shape[-1] if out.rank >= 1 else 1
    m = out.shape[-2] if out.rank >= 2 else 1
    k = node.in_types[1].shape[1] if node.op == "addmm" else node.in_types[0].shape[-1]
    if not (m and n and k):
        return 1.0
    tm, tn, tk = tile
    padded = math.ceil(m / tm) * tm * math.ceil(n / tn) * tn * math.ceil(k / tk) * tk
    return padded / (m * n * k)


def kernel_time(
    work: Any,
    nbytes: Any,
    eta_compute: Any,
    eta_memory: Any,
    bandwidth: float,
    launch: Any,
    maximum: Callable[[Any, Any], Any] = max,
) -> Any:
    """The roofline time of kernels, the one formula of the model (see the module docstring).

    Args:
        work: Seconds the kernel's (tile-padded) FLOPs take at the unit's peak, ``F' / peak_f``.
        nbytes: Bytes moved.
        eta_compute: Achieved fraction of the compute peak (unit efficiency x family factor).
        eta_memory: Achieved fraction of the bandwidth (memory efficiency x family factor).
        bandwidth: Memory bandwidth, bytes/s.
        launch: Seconds added per kernel.
        maximum: ``max`` for scalars; ``numpy.maximum`` to evaluate arrays of kernels at once
            (as `rewrite.measurement.calibrate` does).

    Returns:
        Seconds (a scalar or an array like the inputs).
    """
    return maximum(work / eta_compute, nbytes / (eta_memory * bandwidth)) + launch


def kernel_terms(node: Node, p: DeviceProfile) -> tuple[str, str, float, int, int]:
    """What the roofline needs of one kernel node, apart from the fitted constants.

    Returns:
        ``(unit, family, work, flops, bytes)``: the unit (``matmul`` or ``vector``), the op
        family (keys `DeviceProfile.family_efficiency`), seconds of the tile-padded FLOPs at the
        unit's peak for the output dtype, FLOPs and bytes moved.
    """
    opdef = get_op(node.op)
    flops = opdef.flops(node.in_types, node.types, node.attrs)
    nbytes = opdef.bytes(node.in_types, node.types, node.attrs)
    family = opdef.family
    if node.op == "fused":
        body = node.attrs["body"]
        unit = (
            "matmul"
            if any(get_op(n.op).family in _MATMUL_FAMILIES for n in body.nodes.values())
            else "vector"
        )
        family = _lead_family(body)
    else:
        unit = "matmul" if family in _MATMUL_FAMILIES else "vector"
    dtype = node.types[0].dtype if node.types else "float32"
    if dtype == "bool" and node.in_types:
        dtype = node.in_types[0].dtype
    eff_flops = flops * _tile_factor(node, p.matmul_tile) if node.op in _MATMUL_OPS else flops
    per_element = _element_time(node, p.element_time) if p.element_time else None
    if per_element is not None:  # measured per element (`DeviceProfile.element_time`)
        scale = p.peak("vector", "float32") / p.peak("vector", dtype)
        return unit, family, node.types[0].numel * per_element * scale, flops, nbytes
    return unit, family, eff_flops / p.peak(unit, dtype), flops, nbytes


def _element_time(node: Node, table: Mapping[str, float]) -> float | None:
    """Seconds per element of an element-wise ``node`` from a profile's ``element_time``: the
    ``"<op>.scalar"`` entry when a binary op reads a 0-d operand, else the op's (None if
    absent)."""
    if len(node.in_types) == 2 and any(t.rank == 0 for t in node.in_types):
        hit = table.get(f"{node.op}.scalar")
        if hit is not None:
            return hit
    return table.get(node.op)


def _lead_family(body: Graph) -> str:
    """The family of a fused body's node with the most FLOPs (a conv with its epilogue runs at
    the conv's efficiency); nested groups are looked into."""
    best, fam = -1, "elementwise"
    for n in body.nodes.values():
        if get_op(n.op).kind != "kernel":
            continue
        f = get_op(n.op).flops(n.in_types, n.types, n.attrs)
        if f > best:
            best = f
            fam = _lead_family(n.attrs["body"]) if n.op == "fused" else get_op(n.op).family
    return fam


def _unaligned(node: Node, align: int) -> bool:
    """Whether a GEMM's output columns are not a multiple of ``align``."""
    out = node.types[0]
    return align > 1 and out.rank >= 1 and out.shape[-1] % align != 0


def _compute_node_cost(node: Node, p: DeviceProfile) -> NodeCost:
    kind = get_op(node.op).kind
    if kind == "source":
        return _ZERO
    serial = p.dispatch == "serial"
    if kind == "view":
        if not p.view_overhead:
            return _ZERO
        return (p.view_overhead, 0, 0, 0, 0.0) if serial else (0.0, 0, 0, 0, p.view_overhead)
    launch = p.launch_overhead if serial else 0.0
    host = 0.0 if serial else p.launch_overhead
    if node.op == "fused" and p.fusion == "compiled":  # the compiler sees through the group
        lat, fl, by, ke, host = 0.0, 0, 0, 0, 0.0
        for n in node.attrs["body"].nodes.values():
            c = _compute_node_cost(n, p)
            lat, fl, by, ke, host = lat + c[0], fl + c[1], by + c[2], ke + c[3], host + c[4]
        return (lat, fl, by, ke, host)
    if (
        node.op == "fused"
        and p.fusion == "eager"
        and not (p.fused_epilogues and conv_epilogue(node.attrs["body"]) is not None)
    ):  # the group's call, then its body's kernels
        lat, fl, by, ke = launch, 0, 0, 0
        for n in node.attrs["body"].nodes.values():
            c = _compute_node_cost(n, p)
            lat, fl, by, ke, host = lat + c[0], fl + c[1], by + c[2], ke + c[3], host + c[4]
        return (lat, fl, by, ke, host)
    unit, family, work, flops, nbytes = kernel_terms(node, p)
    if p.fusion == "compiled" and family not in EXTERN_FAMILIES:
        # generated and fused by the compiler: its arithmetic only (see the module docstring)
        eta = p.efficiency["vector"] * p.family_efficiency.get(family, 1.0)
        return (work / eta, flops, 0, 0, 0.0)
    f = p.family_efficiency.get(family, 1.0)
    if node.op in _MATMUL_OPS and _unaligned(node, p.matmul_align):
        f *= p.unaligned_efficiency
    t = kernel_time(
        work,
        nbytes,
        p.efficiency[unit] * f,
        p.efficiency["memory"] * f,
        p.memory_bandwidth,
        launch + p.device_overhead,
    )
    return (t, flops, nbytes, 1, host)


def node_cost(node: Node, device: str | Path | DeviceProfile = "h100") -> NodeCost:
    """`NodeCost` ``(device seconds, flops, bytes, kernels, host seconds)`` of one node on
    ``device`` (cached)."""
    p = load_device(device)
    return _cached_node_cost(node, p, p.digest)


def _cached_node_cost(node: Node, p: DeviceProfile, pkey: str) -> NodeCost:
    cache = node._cost
    if cache is not None:
        hit = cache.get(pkey)
        if hit is not None:
            return hit
    else:
        cache = node._cost = {}
    sig = (pkey, node.local_key, node.in_types)
    c = _SIG_CACHE.get(sig)
    if c is None:
        c = _compute_node_cost(node, p)
        if len(_SIG_CACHE) >= _SIG_CACHE_MAX:
            _SIG_CACHE.clear()
        _SIG_CACHE[sig] = c
    cache[pkey] = c
    return c


def _is_static(node: Node, graph: Graph | None) -> bool:
    """Whether ``node`` computes from weights and constants alone (memoized on the node, which
    a rewritten graph shares with its parent; ``graph`` None: the memo or False)."""
    cache = node._cost
    if cache is None:
        cache = node._cost = {}
    hit = cache.get("static")
    if hit is not None:
        return bool(hit)
    if graph is None:
        return False
    if node.op in ("param", "const"):
        static = True
    elif node.op in ("input", "opaque") or not node.inputs:
        static = False
    else:
        static = all(_is_static(graph.node(v.node), graph) for v in node.inputs)
    cache["static"] = static
    return static


def _sum_costs(
    nodes: Iterable[Node], p: DeviceProfile, pkey: str, graph: Graph | None = None
) -> NodeCost:
    """Summed costs of ``nodes``; on a ``fold_weights`` profile a node of ``graph`` computed from
    weights alone costs nothing (removed nodes, ``graph`` None, read the memo of when they were
    costed)."""
    lat, fl, by, ke, host = 0.0, 0, 0, 0, 0.0
    fold = p.fold_weights
    for n in nodes:
        if fold and _is_static(n, graph):
            continue
        c = _cached_node_cost(n, p, pkey)
        lat += c[0]
        fl += c[1]
        by += c[2]
        ke += c[3]
        host += c[4]
    return lat, fl, by, ke, host


def cost(
    graph: Graph, device: str | Path | DeviceProfile = "h100", *, base: CostVector | None = None
) -> CostVector:
    """The cost vector of ``graph`` on ``device``.

    Args:
        graph: The graph.
        device: A built-in profile name (``h100``, ``h200``, ``a100``, ``cpu``), a profile JSON
            path or a `DeviceProfile`.
        base: The cost of ``graph``'s parent on the same device. When ``graph`` was produced from
            that parent by one `GraphEditor` edit, only the changed nodes are visited and
            ``peak_memory`` is computed lazily; otherwise a full pass runs.

    Returns:
        A `CostVector`.

    Raises:
        CostModelError: If the device is unknown.
    """
    p = load_device(device)
    pkey = p.digest
    delta = graph.delta
    if (
        base is not None
        and delta is not None
        and delta.parent_uid == base.graph_uid
        and base._profile == pkey
    ):
        rl, rf, rb, rk, rh = _sum_costs(delta.removed, p, pkey)
        al, af, ab, ak, ah = _sum_costs(delta.added, p, pkey, graph)
        return CostVector(
            base.device_time - rl + al,
            base.flops - rf + af,
            base.bytes - rb + ab,
            base.kernels - rk + ak,
            base.communication,
            p.name,
            graph,
            host_time=base.host_time - rh + ah,
            fold=p.fold_weights,
            profile=pkey,
        )
    nodes = graph._nodes
    order = [nodes[i] for i in graph.topo_order()] if p.fold_weights else nodes.values()
    lat, fl, by, ke, host = _sum_costs(order, p, pkey, graph)
    peak = peak_memory(graph, fold=p.fold_weights)
    return CostVector(lat, fl, by, ke, 0.0, p.name, graph, peak=peak, host_time=host, profile=pkey)


_ALLOC, _VIEW, _RESIDENT = 0, 1, 2
_IDX_BITS = 32  # value key = node id << _IDX_BITS | output index (split may have > 256 outputs)


def _mem_info(node: Node) -> tuple[int, tuple[int, ...]]:
    cache = node._cost
    if cache is None:
        cache = node._cost = {}
    info = cache.get("mem")
    if info is None:
        kind = get_op(node.op).kind
        code = (
            _VIEW
            if kind == "view"
            else (_RESIDENT if kind == "source" and node.op != "input" else _ALLOC)
        )
        info = cache["mem"] = (code, tuple(t.nbytes for t in node.types))
    return info


def peak_memory(
    graph: Graph,
    *,
    holds: Callable[[Value], bool] | None = None,
    resident_bytes: Callable[[Node], int] | None = None,
    fold: bool = False,
) -> int:
    """Peak bytes in use over the topological schedule (see the module docstring).

    Args:
        graph: The graph.
        holds: Whether the device being costed holds a value; values it does not hold take no
            memory (`rewrite.shard_cost` counts one device of a sharded graph this way). Default:
            every value.
        resident_bytes: Bytes a ``param`` or ``const`` node keeps resident for the whole run.
            Default: the size of its output.
        fold: Whether nodes computed from weights and constants alone run once, when the model
            is built (a ``fold_weights`` profile): the outputs of those a per-call node reads are
            resident, the others take nothing.

    Returns:
        The peak bytes.
    """
    nodes = graph._nodes
    order = graph.topo_order()
    n = len(order)
    resident = 0
    owner: dict[int, int] = {}  # value key (id << _IDX_BITS | index) -> buffer key (owning value)
    last: dict[int, int] = {}  # buffer -> position of its last reader
    born: dict[int, tuple[int, int]] = {}  # buffer -> (position, bytes)
    alloc = [0] * n
    kept = _kept_folds(graph) if fold else {}
    for i, nid in enumerate(order):
        node = nodes[nid]
        code, sizes = _mem_info(node)
        if fold and node.op not in ("param", "const") and _is_static(node, graph):
            resident += kept.get(nid, 0)  # computed once, at build time
            continue
        for v in node.inputs:
            b = owner.get((v[0] << _IDX_BITS) | v[1])
            if b is not None:
                last[b] = i
        if code == _ALLOC:
            for j, size in enumerate(sizes):
                if holds is not None and not holds(Value(nid, j)):
                    size = 0
                k = (nid << _IDX_BITS) | j
                owner[k] = k
                born[k] = (i, size)
                alloc[i] += size
        elif code == _VIEW:
            v0 = node.inputs[0]
            base = owner.get((v0[0] << _IDX_BITS) | v0[1])
            if base is not None:
                for j in range(len(sizes)):
                    owner[(nid << _IDX_BITS) | j] = base
        else:
            resident += sizes[0] if resident_bytes is None else resident_bytes(node)
    for v in graph.outputs:
        b = owner.get((v[0] << _IDX_BITS) | v[1])
        if b is not None:
            last[b] = n
    frees = [0] * (n + 1)
    for k, (pos, size) in born.items():
        frees[last.get(k, pos)] += size  # a buffer nobody reads is freed right away
    live = peak = 0
    for i in range(n):
        live += alloc[i]
        if live > peak:
            peak = live
        live -= frees[i]
    return resident + peak


def _kept_folds(graph: Graph) -> dict[int, int]:
    """Bytes of each folded node's outputs that a per-call node (or the graph's output) reads,
    by node id: what the module keeps as buffers (`rewrite.to_module`)."""
    kept: dict[int, set[int]] = {}
    reads: list[tuple[Value, Node | None]] = [
        (v, n) for n in graph._nodes.values() for v in n.inputs
    ]
    reads += [(v, None) for v in graph.outputs]
    for v, reader in reads:
        src = graph.node(v.node)
        if src.op in ("param", "const") or not _is_static(src, graph):
            continue
        if get_op(src.op).kind == "view" and all(
            graph.node(u.node).op in ("param", "const") for u in src.inputs
        ):
            continue  # a view of a weight shares its memory
        if reader is None or not _is_static(reader, graph):
            kept.setdefault(src.id, set()).add(v.index)
    return {nid: sum(graph.node(nid).types[j].nbytes for j in outs) for nid, outs in kept.items()}
