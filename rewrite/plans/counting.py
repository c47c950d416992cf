"""Counting one rank's collectives by kind, in the vocabulary of `ParallelPlan.collectives`.

`CollectiveCounter` is ``torch.distributed.tensor.debug.CommDebugMode``'s count, which in torch
2.13 sees both DTensor's functional collectives (tensor parallelism) and the c10d ops that FSDP2
and ``replicate`` issue outside DTensor dispatch (``_allgather_base_``, ``_reduce_scatter_base_``,
``allreduce_``), plus a count of the Python-level ``torch.distributed`` calls made meanwhile: a
cross-check, and the only place point-to-point ``send``/``recv`` (pipelining) show up, since
CommDebugMode does not list them. Under activation checkpointing with FSDP2, CommDebugMode's
module tracker raises ``KeyError`` when a module is recomputed, so the counter uses a dispatch
mode that counts the same ops without the tracker (``use_comm_debug_mode=True`` uses
CommDebugMode itself).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

__all__ = ["COLLECTIVE_KINDS", "CollectiveCounter", "collective_kind"]

COLLECTIVE_KINDS = (
    "all_gather",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "broadcast",
    "send_recv",
)
_API = (
    "all_gather_single",
    "all_gather_into_tensor",
    "all_gather",
    "reduce_scatter_single",
    "reduce_scatter_tensor",
    "reduce_scatter",
    "all_reduce",
    "all_to_all",
    "all_to_all_single",
    "broadcast",
    "send",
    "recv",
    "isend",
    "irecv",
)


def collective_kind(op: str) -> str:
    """The kind of a collective from its op or function name (``c10d._allgather_base_`` ->
    ``all_gather``); an unknown name comes back unchanged."""
    name = op.replace("_", "").lower()
    for key, kind in (
        ("reducescatter", "reduce_scatter"),
        ("allgather", "all_gather"),
        ("allreduce", "all_reduce"),
        ("alltoall", "all_to_all"),
        ("broadcast", "broadcast"),
        ("send", "send_recv"),
        ("recv", "send_recv"),
    ):
        if key in name:
            return kind
    return op


def _collective_ops() -> set[Any]:
    """The op packets ``CommDebugMode`` counts as collectives (functional and c10d)."""
    ops: set[Any] = set()
    for namespace, names in (
        (
            "_c10d_functional",
            (
                "all_gather_into_tensor",
                "all_gather_into_tensor_coalesced",
                "all_reduce",
                "all_reduce_coalesced",
                "all_to_all_single",
                "broadcast",
                "reduce_scatter_tensor",
                "reduce_scatter_tensor_coalesced",
            ),
        ),
        ("_c10d_functional_autograd", ("all_to_all_single",)),
        (
            "c10d",
            (
                "_allgather_base_",
                "_reduce_scatter_base_",
                "allgather_",
                "allgather_coalesced_",
                "allgather_into_tensor_coalesced_",
                "allreduce_",
                "allreduce_coalesced_",
                "alltoall_",
                "alltoall_base_",
                "broadcast_",
                "gather_",
                "scatter_",
                "reduce_",
                "reduce_scatter_",
                "reduce_scatter_tensor_coalesced_",
            ),
        ),
        ("_dtensor", ("shard_dim_alltoall",)),
    ):
        space = getattr(torch.ops, namespace)
        ops.update(getattr(space, n) for n in names if hasattr(space, n))
    return ops


class _CountingMode(TorchDispatchMode):
    """``CommDebugMode``'s counting without its module tracker.

    In torch 2.13 ``CommDebugMode`` raises a ``KeyError`` from its module tracker when activation
    checkpointing recomputes a module under FSDP2; this mode counts the same ops (DTensor ops
    are let through first, so only their desugared collectives are seen) and nothing else.
    """

    def __init__(self, counts: Counter[str], ops: set[Any]) -> None:
        super().__init__()
        self.counts, self.ops = counts, ops

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from torch.distributed.tensor import DTensor

        if isinstance(func, torch._ops.HigherOrderOperator):
            return func(*args, **(kwargs or {}))
        if any(t is DTensor for t in types):
            return NotImplemented
        out = func(*args, **(kwargs or {}))
        packet = func._overloadpacket
        if packet in self.ops:
            self.counts[collective_kind(str(packet))] += 1
        return out


class CollectiveCounter:
    """Counts one rank's collectives by kind while active (a context manager; not re-entrant).

    Attributes:
        counts: Collectives seen at dispatch (DTensor's and c10d's), by kind: what
            ``CommDebugMode`` counts; plus point-to-point ``send_recv`` from the Python count.
        api_counts: Python ``torch.distributed`` calls made meanwhile (FSDP2's, point-to-point).
        use_comm_debug_mode: Count with ``CommDebugMode`` itself (it fails under activation
            checkpointing with FSDP2 in torch 2.13) instead of the equivalent `_CountingMode`.
    """

    def __init__(self, use_comm_debug_mode: bool = False) -> None:
        self.counts: Counter[str] = Counter()
        self.api_counts: Counter[str] = Counter()
        self.use_comm_debug_mode = use_comm_debug_mode

    @contextmanager
    def __call__(self) -> Iterator[CollectiveCounter]:
        import torch.distributed as dist
        import torch.distributed.distributed_c10d as c10d
        from torch.distributed.tensor.debug import CommDebugMode

        # Both namespaces: P2POp accepts only c10d's own isend/irecv, and c10d functions call
        # each other (send -> isend); a depth guard counts the outermost call only.
        saved = {n: getattr(dist, n) for n in _API if hasattr(dist, n)}
        depth = [0]

        def wrap(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
            def counted(*args: Any, **kwargs: Any) -> Any:
                if depth[0] == 0:
                    self.api_counts[collective_kind(name)] += 1
                depth[0] += 1
                try:
                    return fn(*args, **kwargs)
                finally:
                    depth[0] -= 1

            return counted

        spaces = (dist, c10d)
        for name, fn in saved.items():
            wrapped = wrap(name, fn)
            for space in spaces:
                if getattr(space, name, None) is fn:
                    setattr(space, name, wrapped)
        debug = CommDebugMode() if self.use_comm_debug_mode else None
        mode = debug if debug is not None else _CountingMode(self.counts, _collective_ops())
        try:
            with mode:
                yield self
        finally:
            for name, fn in saved.items():
                for space in spaces:
                    setattr(space, name, fn)
        if debug is not None:
            for op, n in debug.get_comm_counts().items():
                self.counts[collective_kind(str(op))] += n
        if self.api_counts["send_recv"]:  # point-to-point: not dispatched as collectives
            self.counts["send_recv"] += self.api_counts["send_recv"]
