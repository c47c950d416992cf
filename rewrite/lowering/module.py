"""Graphs back as PyTorch modules: `to_module(graph, params)`.

The module is a ``torch.fx.GraphModule`` whose code calls one PyTorch function per IR node (the
table of `rewrite.lowering.kernels`, the one the timing programs run too), so it runs eagerly,
exports with ``torch.export`` and compiles with ``torch.compile`` like any model:

* graph inputs are the module's positional arguments, in the graph's order and with its names;
* ``param`` nodes read the original module's parameters and buffers, *shared* (the same tensor
  objects, no copy) and registered under their ``state_dict`` names, so
  ``module.state_dict()`` keys are the original's and ``load_state_dict`` works on both;
* with ``fold=True`` (the default) every computation on weights and constants alone (a
  concatenation of the Q, K, V weights a merge introduced, a convolution folded with its batch
  norm) runs once, when the module is built, and is kept as a non-persistent buffer, as a
  compiler's freezing pass would: the rewritten module then costs what the cost model charged for
  its per-call nodes. Such buffers do not follow later changes of the original weights: build the
  module again after loading new weights;
* a ``fused`` group's body is emitted inline (eager PyTorch runs it op by op; a compiler fuses it
  by itself), except a convolution with its epilogue (`rewrite.epilogue`), which is one call
  (`rewrite.lowering.kernels.conv_with_epilogue`: oneDNN's fused kernel when run eagerly on a
  CPU, the plain calls when traced by a compiler or ``torch.export``);
* when the graph was imported by `rewrite.from_torch`, the outputs keep the original module's
  structure (a ``ModelOutput``, a tuple, a tensor); otherwise they are a tuple of tensors.

Before it is returned the module is checked (`rewrite.lowering.check`): run on seeded random inputs (or the ``inputs``
given), its outputs must match the original module's (or, when the weights come as a mapping,
the numpy reference semantics of the graph) within the tolerance of the graph's dtype
(`TOLERANCES`; for float32, ``max |got - want| <= 1e-5 + 1e-4 * max |want|`` per output: normwise,
as rewrites such as folding a batch norm into a convolution reorder float sums and move values
that cancel to near zero by more than any elementwise relative bound). A mismatch raises `ModuleMismatchError` with the largest absolute and relative differences and the
first node whose value differs from the graph's numpy reference; when no node does, the
difference lies in the graph itself (the rewrites or the import), and the message says so.
"""

from __future__ import annotations

import keyword
import logging
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rewrite.epilogue import ConvEpilogue, conv_epilogue
from rewrite.errors import ModuleError
from rewrite.ir import Graph, Node, Value
from rewrite.lowering.check import TOLERANCES, check_module
from rewrite.lowering.kernels import (
    TorchCall,
    conv_epilogue_call,
    has_torch_call,
    scalar_operand,
    torch_call,
    torch_dtype,
)
from rewrite.lowering.source import TorchSource, source_of

__all__ = ["TOLERANCES", "check_module", "to_module"]

logger = logging.getLogger(__name__)


def to_module(
    graph: Graph,
    params: Any = None,
    *,
    origin: Graph | None = None,
    fold: bool = True,
    check: bool = True,
    inputs: Sequence[Any] | None = None,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
) -> Any:
    """A ``torch.fx.GraphModule`` computing ``graph`` with real weights (see the module doc).

    Args:
        graph: The graph, e.g. a `rewrite.Solution`'s ``graph`` (no ``opaque`` node).
        params: Where the weights come from: the ``torch.nn.Module`` the graph was imported from
            (its parameters and buffers by ``state_dict`` name), a mapping of name to tensor, or
            None for the module `rewrite.from_torch` imported ``graph`` (or ``origin``) from.
        origin: The imported graph ``graph`` was rewritten from (a `SearchResult`'s
            ``input_graph``): its import record gives the module to check against, how to call
            it, and the structure of its outputs.
        fold: Compute subgraphs of weights and constants alone once, at build time.
        check: Compare the module's outputs with the original module's (or the graph's numpy
            reference) before returning it.
        inputs: The inputs to check on (the graph's inputs, in order); None: seeded random
            ones (token ids below the vocabulary size).
        seed: Seed of the random check inputs.
        rtol: Relative tolerance of the check (default: `TOLERANCES` by output dtype).
        atol: Absolute tolerance of the check (default: `TOLERANCES` by output dtype).

    Returns:
        The ``torch.fx.GraphModule``.

    Raises:
        ModuleError: On a graph that cannot run (an ``opaque`` node), weights that are missing,
            on the ``meta`` device or of the wrong shape or dtype.
        ModuleMismatchError: If the check finds outputs outside the tolerance.
    """
    if not isinstance(graph, Graph):
        raise ModuleError(f"to_module needs a rewrite Graph, but got {type(graph).__name__}.")
    source = _source_for(origin if origin is not None else graph, params)
    state = _state(graph, params, source)
    gm = _Emitter(graph, state, fold, source.out_spec if source else None).module()
    if check:
        check_module(gm, graph, source, state, inputs=inputs, seed=seed, rtol=rtol, atol=atol)
    return gm


# ---------------------------------------------------------------- weights
def _source_for(graph: Graph, params: Any) -> TorchSource | None:
    """The module to take weights from and check against, with how to call it (None: the
    weights are a mapping; the check then uses the graph's numpy reference)."""
    import torch

    src = source_of(graph)
    if params is None:
        if src is None:
            raise ModuleError(
                f"graph {graph.name!r} has no weights: it was not imported by rewrite.from_torch "
                "in this process (or its module is gone). Fix: pass params=<the torch.nn.Module "
                "it came from> or a dict of tensors by parameter name."
            )
        return src
    if isinstance(params, torch.nn.Module):
        return src if src is not None and src.module is params else TorchSource.of(params)
    return None


def _state(graph: Graph, params: Any, source: TorchSource | None) -> dict[str, Any]:
    """Tensor by name for every ``param`` node of ``graph`` (checked against its type)."""
    import torch

    module = source.module if source is not None else None
    if module is not None:
        state = dict(module.named_parameters(remove_duplicate=False))
        state.update(module.named_buffers(remove_duplicate=False))
    elif isinstance(params, Mapping):
        state = dict(params)
    else:
        raise ModuleError(
            f"params must be a torch.nn.Module, a mapping of name to tensor or None, but got "
            f"{type(params).__name__}."
        )
    out = {}
    for node in graph.params():
        name, t = node.attrs["name"], node.type
        if name not in state:
            import difflib

            close = difflib.get_close_matches(name, list(state), n=1)
            raise ModuleError(
                f"param {name!r} of graph {graph.name!r} has no tensor in params"
                + (f" (did you mean {close[0]!r}?)" if close else "")
                + ". Fix: pass the module the graph was imported from, or a dict holding every "
                "name of graph.params()."
            )
        value = state[name]
        if not isinstance(value, torch.Tensor):
            raise ModuleError(f"param {name!r} must be a tensor, but got {type(value).__name__}.")
        if value.device.type == "meta":
            raise ModuleError(
                f"param {name!r} is on the 'meta' device (a model built without weights, such as "
                "a full-size zoo model): it cannot run. Fix: build the model on a real device "
                "(zoo.model(..., device='cpu')) or load its weights first."
            )
        if tuple(value.shape) != t.shape or value.dtype != torch_dtype(t.dtype):
            raise ModuleError(
                f"param {name!r} must be a {t.dtype} tensor of shape {t.shape}, but got "
                f"{str(value.dtype).removeprefix('torch.')} {tuple(value.shape)}."
            )
        out[name] = value
    return out


def _install(root: Any, name: str, value: Any, persistent: bool) -> None:
    """Set ``value`` at the dotted path ``name`` of ``root`` (shared, not copied)."""
    import torch

    *path, leaf = name.split(".")
    mod = root
    for part in path:
        if not hasattr(mod, part):
            mod.add_module(part, torch.nn.Module())
        mod = getattr(mod, part)
    if isinstance(value, torch.nn.Parameter):
        mod.register_parameter(leaf, value)
    else:
        mod.register_buffer(leaf, value, persistent=persistent)


# ---------------------------------------------------------------- emission
@dataclass
class _Slot:
    """How the emitted code reads one IR value."""

    fx: Any  # the fx node, or a Python number (an inlined 0-d constant)
    meta: Any  # a tensor on the 'meta' device with the value's shape and dtype (or the number)


@dataclass
class _Scope:
    """The values of one graph being emitted (the top graph, or a fused group's body)."""

    graph: Graph
    slots: dict[Value, _Slot]
    static: set[int]  # nodes folded at build time (top graph only)
    values: dict[Value, Any]  # the folded values (real tensors)


class _Emitter:
    """Builds the fx graph of an IR graph, node by node in topological order."""

    def __init__(self, graph: Graph, state: dict[str, Any], fold: bool, out_spec: Any) -> None:
        import torch
        import torch.fx

        self.graph, self.state, self.out_spec = graph, state, out_spec
        self.fx = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.device = next(iter(state.values())).device if state else torch.device("cpu")
        self.fold = fold
        self.n_buffers = 0
        self.scratch: list[str] = []  # names of the non-persistent buffers (constants, folds)
        self.node_of: dict[str, int] = {}  # fx node name -> IR node id (top graph; diagnostics)

    def module(self) -> Any:
        import torch.fx

        g = self.graph
        names = _arg_names(g)
        scope = _Scope(g, {}, _static_nodes(g) if self.fold else set(), {})
        for nid, name in zip(g.inputs, names):
            scope.slots[g.node(nid).out(0)] = _Slot(
                self.fx.placeholder(name), _meta(g.node(nid).type)
            )
        self.emit_graph(scope, top=True)
        self.fx.output(tuple(self.read(scope, v).fx for v in g.outputs))
        if self.out_spec is not None:
            self._structured_outputs(names)
        gm = torch.fx.GraphModule(self.root, self.fx, class_name=_class_name(g.name))
        gm._non_persistent_buffers_set.update(self.scratch)  # GraphModule copies them persistent
        gm.meta["rewrite_nodes"] = dict(self.node_of)
        return gm

    def _structured_outputs(self, names: list[str]) -> None:
        import torch.utils._pytree as pytree
        from torch.fx.graph import _PyTreeCodeGen, _PyTreeInfo

        if self.out_spec.num_leaves != len(self.graph.outputs):
            return  # the module returns leaves the graph has not (ints, ...): keep a flat tuple
        in_spec = pytree.tree_flatten(list(range(len(names))))[1]
        self.fx._codegen = _PyTreeCodeGen(_PyTreeInfo(names, in_spec, self.out_spec))

    # -------------------------------------------------------------- values
    def read(self, scope: _Scope, v: Value) -> _Slot:
        """The slot of ``v``; a folded value becomes an attribute on its first read (a weight
        under its own name, anything else as a non-persistent buffer)."""
        slot = scope.slots.get(v)
        if slot is None:
            node = scope.graph.node(v.node)
            if node.op == "param":
                name = node.attrs["name"]
                slot = self._attr(name, self.state[name], persistent=True)
            else:
                slot = self._buffer("_const" if node.op == "const" else "_folded", scope.values[v])
            scope.slots[v] = slot
        return slot

    def _buffer(self, prefix: str, value: Any) -> _Slot:
        name = f"{prefix}_{self.n_buffers}"
        self.n_buffers += 1
        self.scratch.append(name)
        return self._attr(name, value, persistent=False)

    def _attr(self, name: str, value: Any, persistent: bool) -> _Slot:
        _install(self.root, name, value, persistent)
        return _Slot(self.fx.get_attr(name), value.to("meta"))

    def emit_graph(self, scope: _Scope, top: bool = False) -> None:
        """Emit every node of ``scope.graph`` but its inputs (already in ``scope.slots``)."""
        for node in scope.graph:
            if node.op == "input":
                continue
            if node.op == "param" and node.id not in scope.static:
                name = node.attrs["name"]
                scope.slots[node.out(0)] = self._attr(name, self.state[name], persistent=True)
            elif node.op == "const" and node.id not in scope.static:
                scope.values[node.out(0)] = _const_tensor(
                    node, self.device
                )  # read() makes a buffer
            elif node.id in scope.static:
                self._fold(scope, node)
            else:
                ins = [self._operand(scope, v, node.op) for v in node.inputs]
                scope.slots.update(zip(node.outs, self._call(node, ins, top)))

    def _operand(self, scope: _Scope, v: Value, op: str) -> _Slot:
        """The slot of input ``v`` of an ``op`` node: a 0-d numeric constant read by an
        arithmetic op is a Python number in the code (a compiler specializes ``x ** 2``, not a
        read of a 0-d tensor), everything else `read`."""
        value = scalar_operand(op, scope.graph.node(v.node))
        if value is not None:
            return _Slot(value, value)
        return self.read(scope, v)

    def _fold(self, scope: _Scope, node: Node) -> None:
        """Compute a node of weights and constants alone now."""
        if node.op == "param":
            scope.values[node.out(0)] = self.state[node.attrs["name"]]
            return
        if node.op == "const":
            scope.values[node.out(0)] = _const_tensor(node, self.device)
            return
        args = [scope.values[v] for v in node.inputs]
        if node.op == "fused":
            outs = _run_body(node.attrs["body"], args)
        else:
            outs = torch_call(node.op, args, node.attrs, [t.shape for t in node.in_types])()
        for v, o, t in zip(node.outs, outs, node.types):
            scope.values[v] = o if o.dtype == torch_dtype(t.dtype) else o.to(torch_dtype(t.dtype))

    def _call(self, node: Node, ins: list[_Slot], top: bool) -> list[_Slot]:
        if node.op == "opaque":
            raise ModuleError(
                f"node %{node.id} is opaque op {node.attrs['target']!r}, which has no semantics "
                "in rewrite and cannot run. Fix: register the op in rewrite.ops (or map it in "
                "rewrite.torch_converters) and import the model again."
            )
        ep = conv_epilogue(node.attrs["body"]) if node.op == "fused" else None
        if node.op == "fused" and ep is None:
            body = node.attrs["body"]
            inner = _Scope(
                body, {body.node(b).out(0): s for b, s in zip(body.inputs, ins)}, set(), {}
            )
            self.emit_graph(inner)
            return [self.read(inner, v) for v in body.outputs]
        if node.op != "fused" and not has_torch_call(node.op):
            raise ModuleError(
                f"op {node.op!r} (node %{node.id}) has no PyTorch call in "
                "rewrite.lowering.kernels; add one to run graphs using it as modules."
            )
        call, metas = self._torch_call(node, ins, ep)
        fx_node = self.fx.call_function(call.fn, call.args, dict(call.kwargs))
        if top:
            self.node_of[fx_node.name] = node.id
        if len(node.types) == 1:
            return [self._typed(fx_node, metas[0], node, 0)]
        return [
            self._typed(self.fx.call_function(operator.getitem, (fx_node, i)), metas[i], node, i)
            for i in range(len(node.types))
        ]

    @staticmethod
    def _torch_call(
        node: Node, ins: list[_Slot], ep: ConvEpilogue | None
    ) -> tuple[TorchCall, tuple[Any, ...]]:
        """The node's call on fx nodes, and its outputs computed on meta tensors (``ep``: the
        fused group is a convolution with its epilogue, one call)."""
        if ep is not None:
            return (
                conv_epilogue_call(ep, [s.fx for s in ins]),
                conv_epilogue_call(ep, [s.meta for s in ins])(),
            )
        shapes = [t.shape for t in node.in_types]
        return (
            torch_call(node.op, [s.fx for s in ins], node.attrs, shapes),
            torch_call(node.op, [s.meta for s in ins], node.attrs, shapes)(),
        )

    def _typed(self, fx_node: Any, meta: Any, node: Node, i: int) -> _Slot:
        """Check the call's shape and cast to the node's dtype where PyTorch's differs."""
        import torch

        t = node.types[i]
        if tuple(meta.shape) != t.shape:
            raise ModuleError(
                f"node %{node.id} (op {node.op!r}) gives shape {tuple(meta.shape)} in PyTorch but "
                f"{t.shape} in the IR: a bug of rewrite.lowering.kernels; please report it."
            )
        want = torch_dtype(t.dtype)
        if meta.dtype != want:
            fx_node = self.fx.call_function(torch.Tensor.to, (fx_node, want))
            meta = meta.to(want)
        return _Slot(fx_node, meta)


def _static_nodes(graph: Graph) -> set[int]:
    """Ids of nodes computed from weights and constants alone (params and consts included)."""
    static: set[int] = set()
    for node in graph:
        if node.op in ("param", "const") or (
            node.op not in ("input", "opaque")
            and node.inputs
            and all(v.node in static for v in node.inputs)
        ):
            static.add(node.id)
    return static


def _run_body(body: Graph, args: list[Any]) -> tuple[Any, ...]:
    from rewrite.lowering.program import Program

    return tuple(Program(body, args[0].device if args else "cpu").run(args))


def _const_tensor(node: Node, device: Any) -> Any:
    import torch

    value = torch.as_tensor(node.attrs["value"].array.copy(), device=device)
    return value.to(torch_dtype(node.types[0].dtype))


def _meta(t: Any) -> Any:
    import torch

    return torch.empty(t.shape, dtype=torch_dtype(t.dtype), device="meta")


def _arg_names(graph: Graph) -> list[str]:
    """Python identifiers for the graph's inputs (their names where those are identifiers)."""
    out: list[str] = []
    for name in graph.input_names:
        ident = "".join(c if c.isalnum() or c == "_" else "_" for c in name) or "x"
        if ident[0].isdigit() or keyword.iskeyword(ident):
            ident = f"x_{ident}"
        while ident in out:
            ident += "_"
        out.append(ident)
    return out


def _class_name(name: str) -> str:
    parts = "".join(c if c.isalnum() else " " for c in name).split()
    return "".join(p[:1].upper() + p[1:] for p in parts) + "Rewritten" if parts else "Rewritten"
