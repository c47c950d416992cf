"""Which link a mesh axis runs on, and the alpha-beta time of a collective on it.

Devices are numbered row-major over the mesh (its first axis outermost, its last innermost and
contiguous), ``devices_per_node`` consecutive devices to a node, as ``init_device_mesh`` lays a
mesh over ``torchrun`` ranks. A collective along a set of axes runs among the devices that differ
only in those axes. When they all sit in one node it runs on the intra-node link (NVLink). When
they span nodes, with ``m`` of them in each node, the ring's traffic crosses the nodes' network
interfaces, ``m`` of which (one per device) carry it in parallel: the bandwidth is
``min(intra, m * inter)`` (NCCL's rings over one NIC per GPU), the latency the inter-node one.

Ring formulas (NCCL's performance notes), ``n`` devices, per-rank buffer ``S`` (see
`rewrite.plans.sharding.Collective`), bandwidth ``B`` times the profile's ``link_efficiency``,
latency ``alpha``::

    all_gather, reduce_scatter, all_to_all:  (n - 1) alpha + (n - 1) / n * S / B
    all_reduce:                              2 (n - 1) alpha + 2 (n - 1) / n * S / B
    send_recv:                               alpha + S / B
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache

from rewrite.devices import DeviceProfile
from rewrite.errors import PlanError

__all__ = ["Link", "collective_time", "link_of"]


@dataclass(frozen=True)
class Link:
    """The link a group of devices communicates over.

    Attributes:
        bandwidth: Bytes/s per device and direction (before the link efficiency).
        latency: Seconds per step.
        n: Devices in the group.
        kind: ``"intra"`` (one node) or ``"inter"`` (across nodes).
    """

    bandwidth: float
    latency: float
    n: int
    kind: str


@cache
def _nodes_spanned(sizes: tuple[int, ...], picked: tuple[bool, ...], per_node: int) -> int:
    strides = [math.prod(sizes[i + 1 :]) for i in range(len(sizes))]
    ranks = [0]
    for size, stride, on in zip(sizes, strides, picked):
        if on:
            ranks = [r + k * stride for r in ranks for k in range(size)]
    return len({r // per_node for r in ranks})


def link_of(mesh: Mapping[str, int], axes: Sequence[str], profile: DeviceProfile) -> Link:
    """The link a collective along ``axes`` of ``mesh`` runs on (see the module docstring).

    Raises:
        PlanError: If an axis is not in the mesh.
    """
    missing = [a for a in axes if a not in mesh]
    if missing:
        raise PlanError(f"Axes {missing} are not in the mesh {dict(mesh)}.")
    per_node, intra, inter = profile.links()
    names = list(mesh)
    sizes = tuple(mesh[a] for a in names)
    picked = tuple(a in axes for a in names)
    n = math.prod(mesh[a] for a in axes)
    nodes = _nodes_spanned(sizes, picked, per_node)
    if nodes <= 1:
        return Link(float(intra["bandwidth"]), float(intra.get("latency", 0.0)), n, "intra")
    m = n // nodes
    bw = min(float(intra["bandwidth"]), m * float(inter["bandwidth"]))
    return Link(bw, float(inter.get("latency", 0.0)), n, "inter")


def collective_time(kind: str, nbytes: float, link: Link, efficiency: float = 1.0) -> float:
    """Alpha-beta time of one collective (see the module docstring)."""
    n = link.n
    if n <= 1 or nbytes <= 0:
        return 0.0
    bw = link.bandwidth * efficiency
    if kind == "send_recv":
        return link.latency + nbytes / bw
    steps = 2 * (n - 1) if kind == "all_reduce" else n - 1
    return steps * link.latency + steps / n * nbytes / bw
