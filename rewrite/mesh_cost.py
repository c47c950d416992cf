"""Cost of sharded graphs: per-device latency and peak memory, alpha-beta collectives.

Composes with `rewrite.cost`: per-node kernel costs come from `rewrite.costmodel.node_cost` (same
roofline and device profile); this module adds placement and communication.

Placement (see `rewrite.ops.collective`): sources are replicated; output ``i`` of ``shard`` and
of ``reduce_scatter`` lives on device ``i``; ``all_reduce``/``all_gather`` outputs are
replicated; any other node lives where its non-replicated inputs live (a node reading two
different devices is an error). A replicated node runs on every device.

Formulas, for a collective over ``n`` devices moving ``S`` bytes (the full tensor) on a link of
bandwidth ``B`` and latency ``alpha`` (the profile's ``interconnect``), ring algorithms as in
NCCL's performance notes::

    all_reduce:                 2 (n - 1) alpha + 2 (n - 1) / n * S / B
    all_gather, reduce_scatter:   (n - 1) alpha +   (n - 1) / n * S / B

* ``latency`` = max over devices of the device's kernel time, plus the sum of collective times
  (one stream, no overlap of compute and communication);
* ``peak_memory[d]``: `rewrite.costmodel.peak_memory` (same liveness, views aliasing their input's
  buffer) over the values device ``d`` holds, with parameters resident (a parameter read only
  through ``shard`` counts ``1/n`` of its bytes); on an unsharded graph it equals
  ``cost(graph).peak_memory``;
* ``communication`` = the sum of collective times; ``comm_bytes`` their ``S``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rewrite.costmodel import node_cost, peak_memory
from rewrite.devices import DeviceProfile, load_device
from rewrite.errors import GraphError
from rewrite.ir import Graph, Node, Value
from rewrite.ops.collective import COLLECTIVES

__all__ = ["ShardedCost", "collective_time", "placement", "shard_cost"]

_REPL = -1


@dataclass(frozen=True)
class ShardedCost:
    """Cost of a sharded graph (see the module docstring).

    Attributes:
        latency: Seconds: slowest device's compute plus all communication.
        device_latency: Compute seconds per device.
        peak_memory: Peak bytes per device.
        communication: Seconds spent in collectives.
        comm_bytes: Bytes moved by collectives (full-tensor sizes).
        n_devices: Number of devices.
    """

    latency: float
    device_latency: tuple[float, ...]
    peak_memory: tuple[int, ...]
    communication: float
    comm_bytes: int
    n_devices: int


def collective_time(op: str, nbytes: int, n: int, profile: DeviceProfile) -> float:
    """Alpha-beta time of collective ``op`` over ``n`` devices moving ``nbytes``."""
    if n <= 1:
        return 0.0
    link = profile.interconnect
    alpha, bw = float(link.get("latency", 0.0)), float(link["bandwidth"])
    steps = 2 * (n - 1) if op == "all_reduce" else n - 1
    return steps * alpha + steps / n * nbytes / bw


def placement(graph: Graph) -> dict[Value, int]:
    """Device of every value (``-1`` = replicated).

    Raises:
        GraphError: If a node reads values living on two different devices.
    """
    where: dict[Value, int] = {}
    for node in graph:
        outs = node.outs
        if node.op == "shard" or node.op == "reduce_scatter":
            where.update(zip(outs, range(len(outs))))
            continue
        if node.op in ("all_reduce", "all_gather") or not node.inputs:
            where.update(dict.fromkeys(outs, _REPL))
            continue
        devs = {where[v] for v in node.inputs} - {_REPL}
        if len(devs) > 1:
            raise GraphError(
                f"a node must read values of one device (or replicated ones), but {node!r} reads devices "
                f"{sorted(devs)}; insert a collective (all_gather / all_reduce) first."
            )
        where.update(dict.fromkeys(outs, devs.pop() if devs else _REPL))
    return where


def _n_devices(graph: Graph, where: dict[Value, int]) -> int:
    return max((d for d in where.values()), default=_REPL) + 1 or 1


def _param_bytes(graph: Graph, node: Node, n: int) -> int:
    users = graph.users(node.id)
    if users and all(graph.node(u).op == "shard" for u in users):
        return node.type.nbytes // max(n, 1)
    return node.type.nbytes


def _peak(graph: Graph, where: dict[Value, int], dev: int, n: int) -> int:
    return peak_memory(
        graph,
        holds=lambda v: where[v] in (dev, _REPL),
        resident_bytes=lambda node: _param_bytes(graph, node, n),
    )


def shard_cost(graph: Graph, device: str | Path | DeviceProfile = "h100") -> ShardedCost:
    """The sharded cost of ``graph`` on devices of profile ``device``.

    Args:
        graph: A graph, sharded with `rewrite.ops.collective` ops (an unsharded graph is one
            device).
        device: Device profile name, JSON path or `DeviceProfile`.

    Raises:
        GraphError: On an inconsistent placement.
        CostModelError: On an unknown device.
    """
    p = load_device(device)
    where = placement(graph)
    n = _n_devices(graph, where)
    lat, host = [0.0] * n, [0.0] * n
    comm, comm_bytes = 0.0, 0
    for node in graph:
        if node.op in COLLECTIVES:
            size = node.types[0].nbytes * (len(node.inputs) if node.op == "reduce_scatter" else 1)
            comm += collective_time(node.op, size, len(node.inputs), p)
            comm_bytes += size
            continue
        c = node_cost(node, p)
        d = where[node.outs[0]] if node.types else _REPL
        for k in range(n) if d == _REPL else (d,):
            lat[k] += c[0]
            host[k] += c[4]
    lat = [max(t, h) for t, h in zip(lat, host)]  # each device's own host (see rewrite.cost)
    peaks = tuple(_peak(graph, where, d, n) for d in range(n))
    return ShardedCost(max(lat) + comm, tuple(lat), peaks, comm, comm_bytes, n)
