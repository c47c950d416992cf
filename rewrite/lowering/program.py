"""Lowering of IR graphs to PyTorch programs.

`lower(graph, device)` turns a `Graph` into a `Program`: a list of steps, one per node in the
graph's topological order, each calling a PyTorch kernel. The semantics stay those of the op
registry (`rewrite.ops`): ops with a direct PyTorch equivalent run it (`TORCH_KERNELS`, read
from `rewrite.lowering.kernels`, the table `rewrite.to_module` emits from too: the op's meaning is
the registry's, checked against `rewrite.evaluate` by the tests); any other registered op runs its
own reference implementation (`OpDef.impl`) on ``torch._numpy``, numpy's API over torch tensors,
so an op registered by another package lowers without a second copy of its semantics. Only
``opaque`` nodes (no semantics) cannot lower.

Kernels match what the cost model charges for: ``permute`` and ``transpose`` materialize a copy
(``permute_copy``), ``sdpa`` is PyTorch's fused attention, views stay views. A ``fused`` group
runs its body as a sub-program, kernel by kernel (eager PyTorch has no fused kernels but one: a
convolution with its epilogue, `rewrite.epilogue`, is one oneDNN call on a CPU; to time a graph
as a compiler runs it, `rewrite.measurement.measure` compiles the whole graph as a module with
``compile=True``). Sharded graphs run every device's piece on the one device; collectives are
their sums and concatenations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewrite.epilogue import conv_epilogue
from rewrite.errors import MeasureError
from rewrite.ir import Graph, Node
from rewrite.lowering.kernels import (
    conv_epilogue_call,
    has_torch_call,
    scalar_operand,
    torch_call,
    torch_dtype,
    torch_ops,
)
from rewrite.ops import get_op

__all__ = ["TORCH_KERNELS", "Program", "lower", "torch_dtype"]

Kernel = Callable[[Sequence[Any], Mapping[str, Any]], tuple[Any, ...]]


def _kernel_of(op: str) -> Kernel:
    def kernel(a: Sequence[Any], at: Mapping[str, Any]) -> tuple[Any, ...]:
        return torch_call(op, a, at, [tuple(x.shape) for x in a])()

    return kernel


class _TorchKernels(Mapping[str, Kernel]):
    """Read-only view of the op -> PyTorch kernel table (`rewrite.lowering.kernels`)."""

    def __getitem__(self, key: str) -> Kernel:
        if not has_torch_call(key):
            raise KeyError(key)
        return _kernel_of(key)

    def __iter__(self) -> Any:
        return iter(sorted(torch_ops()))

    def __len__(self) -> int:
        return len(torch_ops())


#: Op name -> PyTorch kernel ``(tensors, attrs) -> tuple of tensors`` for the ops with a direct
#: PyTorch equivalent (`rewrite.lowering.kernels`); other ops run their reference implementation
#: on ``torch._numpy``.
TORCH_KERNELS: Mapping[str, Kernel] = _TorchKernels()


def _reference_kernel(op: str) -> Kernel:
    import torch._numpy as tnp

    impl = get_op(op).impl

    def kernel(a: Sequence[Any], at: Mapping[str, Any]) -> tuple[Any, ...]:
        outs = impl(tnp, [tnp.asarray(x) for x in a], at)
        return tuple(
            o.tensor if isinstance(o, tnp.ndarray) else tnp.asarray(o).tensor for o in outs
        )

    return kernel


@dataclass(frozen=True)
class _Step:
    node: Node
    kernel: Kernel
    args: tuple[tuple[int, int] | int | float, ...]  # (producing step, output) or a number
    frees: tuple[int, ...]  # positions whose outputs nobody reads after this step


class Program:
    """A lowered graph: call it with torch tensors to run the graph.

    Args:
        graph: The graph.
        device: A torch device (``"cpu"``, ``"cuda"``) the constants are placed on.

    Raises:
        MeasureError: If a node cannot be lowered (an ``opaque`` op, or an op without a
            PyTorch kernel and without a reference implementation).
    """

    def __init__(self, graph: Graph, device: Any = "cpu") -> None:
        self.graph, self.device = graph, device
        order = graph.topo_order()
        pos = {nid: i for i, nid in enumerate(order)}
        last: dict[int, int] = {}
        for i, nid in enumerate(order):
            for v in graph.node(nid).inputs:
                last[pos[v.node]] = i
        for v in graph.outputs:
            last[pos[v.node]] = len(order)
        frees: dict[int, list[int]] = {}
        for p, i in last.items():
            frees.setdefault(i, []).append(p)

        def arg(node: Node, v: Any) -> tuple[int, int] | int | float:
            number = scalar_operand(node.op, graph.node(v.node))  # as `to_module` emits it
            return (pos[v.node], v.index) if number is None else number

        self.steps = [
            _Step(
                graph.node(nid),
                self._kernel(graph.node(nid)),
                tuple(arg(graph.node(nid), v) for v in graph.node(nid).inputs),
                tuple(frees.get(i, ())),
            )
            for i, nid in enumerate(order)
        ]
        self.outputs = tuple((pos[v.node], v.index) for v in graph.outputs)
        self.sources = {nid: pos[nid] for nid in order if graph.node(nid).op in ("input", "param")}

    def _kernel(self, node: Node) -> Kernel:
        op = node.op
        if op in ("input", "param"):
            return _no_kernel
        if op == "const":
            import torch

            value = torch.as_tensor(node.attrs["value"].array.copy(), device=self.device)
            value = value.to(torch_dtype(node.types[0].dtype))
            return _constant(value)
        if op == "fused" and (ep := conv_epilogue(node.attrs["body"])) is not None:
            return lambda a, at: conv_epilogue_call(ep, a)()
        if op == "fused":
            body = Program(node.attrs["body"], self.device)
            return lambda a, at: tuple(body.run(list(a)))
        if op == "opaque":
            raise MeasureError(
                f"node {node.id} is opaque op {node.attrs['target']!r}, which has no semantics "
                "and cannot run; register it in rewrite.ops (or map it in rewrite.torch_import)."
            )
        if has_torch_call(op):
            shapes = [t.shape for t in node.in_types]
            return lambda a, at: torch_call(op, a, at, shapes)()
        return _reference_kernel(op)

    def run(
        self,
        args: Sequence[Any],
        params: Mapping[str, Any] | None = None,
        hook: Callable[[int, Node, list[tuple[Any, ...] | None]], None] | None = None,
    ) -> list[Any]:
        """Run the program.

        Args:
            args: One tensor per graph input, in order.
            params: Tensors of the ``param`` nodes by name.
            hook: Called as ``hook(position, node, env)`` after every step (``env[i]`` holds
                the outputs of step ``i`` while some later step still reads them).

        Returns:
            One tensor per graph output.

        Raises:
            MeasureError: Naming the node and op whose kernel failed.
        """
        env: list[tuple[Any, ...] | None] = [None] * len(self.steps)
        inputs = dict(zip(self.graph.inputs, args))
        for i, step in enumerate(self.steps):
            node = step.node
            if node.op == "input":
                env[i] = (inputs[node.id],)
            elif node.op == "param":
                env[i] = (_param(params, node),)
            else:
                ins = [env[a[0]][a[1]] if isinstance(a, tuple) else a for a in step.args]  # type: ignore[index]
                try:
                    env[i] = _cast(step.kernel(ins, node.attrs), node)
                except Exception as e:
                    raise MeasureError(
                        f"node {node.id} (op {node.op!r}, output {node.types}) failed to run in "
                        f"PyTorch: {type(e).__name__}: {e}"
                    ) from e
            if hook is not None:
                hook(i, node, env)
            for p in step.frees:
                env[p] = None
        return [env[p][j] for p, j in self.outputs]  # type: ignore[index]


def _constant(value: Any) -> Kernel:
    return lambda a, at: (value,)


def _no_kernel(a: Sequence[Any], at: Mapping[str, Any]) -> tuple[Any, ...]:
    raise AssertionError("sources are bound by Program.run")


def _param(params: Mapping[str, Any] | None, node: Node) -> Any:
    name = node.attrs["name"]
    if params is None or name not in params:
        raise MeasureError(
            f"param {name!r} needs a tensor; pass params={{{name!r}: ...}} "
            "(rewrite.measure makes seeded random ones when params is None)."
        )
    return params[name]


def _cast(outs: tuple[Any, ...], node: Node) -> tuple[Any, ...]:
    if len(outs) != len(node.types):
        raise MeasureError(
            f"op {node.op!r} returned {len(outs)} outputs, but node {node.id} declares "
            f"{len(node.types)}."
        )
    return tuple(
        o if str(o.dtype) == f"torch.{t.dtype}" else o.to(torch_dtype(t.dtype))
        for o, t in zip(outs, node.types)
    )


def lower(graph: Graph, device: Any = "cpu") -> Program:
    """Lower ``graph`` to a `Program` on ``device`` (see the module docstring).

    Raises:
        MeasureError: If a node cannot be lowered.
    """
    if not isinstance(graph, Graph):
        raise MeasureError(f"lower needs a rewrite Graph, but got {type(graph).__name__}.")
    return Program(graph, device)
