"""The check of a rebuilt module against the original (`check_module`), run by `to_module`.

The module runs on seeded random inputs (or the inputs given) and its outputs must match the
original module's (or, when the weights come as a mapping, the numpy reference semantics of the
graph) within the tolerance of the graph's dtype (`TOLERANCES`, normwise), both sides computed in
full float32 on CUDA (`exact_float32`). A mismatch raises `ModuleMismatchError` naming the largest
differences and the first node whose PyTorch value differs from the graph's numpy reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rewrite.errors import ModuleError, ModuleMismatchError
from rewrite.ir import Graph
from rewrite.lowering.source import TorchSource

__all__ = ["TOLERANCES", "check_module", "exact_float32"]

#: ``(rtol, atol)`` of the check by the dtype of the graph's floating outputs: a module passes
#: where ``max |got - want| <= atol + rtol * max |want|`` for every output (normwise: see
#: `check_module`).
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-7, 1e-9),
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (5e-2, 1e-2),
}
#: ``(rtol, atol)`` above which a node's PyTorch value is taken for a kernel bug rather than the
#: rounding of another summation order (the diagnosis of a failed check).
_KERNEL_BUG = (1e-2, 1e-4)


def check_module(
    gm: Any,
    graph: Graph,
    source: TorchSource | None,
    state: Mapping[str, Any],
    *,
    inputs: Sequence[Any] | None = None,
    seed: int = 0,
    rtol: float | None = None,
    atol: float | None = None,
) -> None:
    """Compare ``gm`` with the original module (or the graph's numpy reference) on ``inputs``, or
    seeded random inputs when None (see `to_module`); ``state`` holds the weights of the graph's
    ``param`` nodes by name.

    Raises:
        ModuleMismatchError: On outputs outside the tolerance.
    """
    import torch

    from rewrite.lowering.tensors import random_tensors

    if inputs is None:
        device = next((t.device for t in gm.state_dict().values()), torch.device("cpu"))
        cases = [random_tensors(graph, device, seed)[0]]
    else:
        cases = [list(inputs)]
    tol = _tolerance(graph, rtol, atol)
    with torch.inference_mode(), exact_float32():
        for args in cases:
            got = _flat(gm(*args))
            want = _reference(graph, source, state, args)
            bad = _worst(got, want, tol)
            if bad is not None:
                raise _mismatch(gm, graph, state, args, bad, tol, source)


@contextlib.contextmanager
def exact_float32() -> Iterator[None]:
    """float32 computed as float32 on CUDA while the block runs: TF32 off for cuBLAS and cuDNN.
    cuDNN convolutions run in TF32 unless told otherwise (PyTorch's default), a relative rounding
    near 1e-3 that differs between two equal graphs whose convolutions are fed differently (a
    folded batch norm) and says nothing about whether a rewrite is right; the check compares
    both sides at full precision."""
    import torch

    cudnn, matmul = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        yield
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = cudnn, matmul


def _tolerance(graph: Graph, rtol: float | None, atol: float | None) -> tuple[float, float]:
    dtypes = [t.dtype for t in graph.output_types if t.dtype in TOLERANCES]
    loosest = max((TOLERANCES[d] for d in dtypes), default=TOLERANCES["float32"])
    return (loosest[0] if rtol is None else rtol, loosest[1] if atol is None else atol)


def _flat(out: Any) -> list[Any]:
    import torch
    import torch.utils._pytree as pytree

    return [x for x in pytree.tree_leaves(out) if isinstance(x, torch.Tensor)]


def _reference(
    graph: Graph, source: TorchSource | None, state: Mapping[str, Any], args: list[Any]
) -> list[Any]:
    """The outputs ``gm`` must match: the original module's, else the numpy reference's."""
    import torch

    if source is not None and source.module is not None:
        want = _flat(source.call(args))
        if len(want) != len(graph.outputs):
            raise ModuleError(
                f"the original module returns {len(want)} tensors where graph {graph.name!r} has "
                f"{len(graph.outputs)} outputs: the graph was not imported from this module "
                "with these arguments. Fix: pass the module rewrite.from_torch imported it from."
            )
        return want
    from rewrite.reference import evaluate

    ref = evaluate(graph, _numpy(args), _numpy_state(state))
    return [torch.as_tensor(np.asarray(r)) for r in ref]


def _numpy(tensors: Sequence[Any]) -> list[np.ndarray]:
    return [
        t.detach().cpu().float().numpy() if t.is_floating_point() else t.detach().cpu().numpy()
        for t in tensors
    ]


def _numpy_state(state: Mapping[str, Any]) -> dict[str, np.ndarray]:
    return dict(zip(state, _numpy(list(state.values()))))


@dataclass(frozen=True)
class _Diff:
    output: int
    max_abs: float
    max_rel: float


def _worst(got: list[Any], want: list[Any], tol: tuple[float, float]) -> _Diff | None:
    """The output furthest outside the tolerance, or None when every output is within.

    The test is normwise, per output: ``max |got - want| <= atol + rtol * max |want|`` over its
    finite elements (an elementwise relative test fails on values that cancel to near zero,
    which any reordering of float sums moves); infinities and NaNs must sit in the same places.
    """
    import torch

    if len(got) != len(want):
        return _Diff(-1, float("inf"), float("inf"))
    worst: _Diff | None = None
    rtol, atol = tol
    for i, (g, w) in enumerate(zip(got, want)):
        g, w = g.detach().double().cpu(), w.detach().double().cpu()
        if g.shape != w.shape:
            return _Diff(i, float("inf"), float("inf"))
        if g.numel() == 0:
            continue
        finite = torch.isfinite(w)
        same_special = bool(
            (torch.isnan(g) == torch.isnan(w)).all()
            and (g[~finite & ~torch.isnan(w)] == w[~finite & ~torch.isnan(w)]).all()
        )
        diff = (g - w).abs()[finite]
        scale = w.abs()[finite].max().item() if diff.numel() else 0.0
        max_abs = diff.max().item() if diff.numel() else 0.0
        if not same_special or not max_abs <= atol + rtol * scale:
            d = _Diff(i, max_abs if same_special else float("inf"), max_abs / max(scale, 1e-30))
            if worst is None or d.max_rel > worst.max_rel:
                worst = d
    return worst


def _mismatch(
    gm: Any,
    graph: Graph,
    state: Mapping[str, Any],
    args: list[Any],
    bad: _Diff,
    tol: tuple[float, float],
    source: TorchSource | None,
) -> ModuleMismatchError:
    where = _first_divergence(gm, graph, state, args, tol)
    against = "the original module" if source is not None else "the graph's numpy reference"
    head = (
        f"the rewritten module of graph {graph.name!r} differs from {against}: output "
        f"{bad.output} max abs difference {bad.max_abs:.3g}, {bad.max_rel:.3g} of the output's "
        f"largest magnitude (allowed: atol {tol[1]:g} + rtol {tol[0]:g} x that magnitude)."
    )
    if where is not None:
        tail = (
            f" The first node whose value differs from the graph's numpy reference is {where}: "
            "its PyTorch call in rewrite.lowering.kernels does not compute the op; please report it."
        )
    else:
        tail = (
            " Every node agrees with the graph's own numpy reference, so the graph itself computes "
            "something else than the module (its rewrites, or the import); pass a looser "
            "rtol/atol if the difference is rounding, else report the graph (rewrite.save)."
        )
    return ModuleMismatchError(head + tail, bad.max_abs, bad.max_rel, where)


def _first_divergence(
    gm: Any, graph: Graph, state: Mapping[str, Any], args: list[Any], tol: tuple[float, float]
) -> str | None:
    """``"%<id> (<op>)"`` of the first node (in the emitted order) whose PyTorch value differs
    from the numpy reference, or None."""
    import torch
    import torch.fx

    from rewrite.reference import evaluate_nodes

    try:
        ref = evaluate_nodes(graph, _numpy(args), _numpy_state(state))
    except Exception:  # the reference cannot run this graph (a huge model): no diagnosis
        return None
    seen: dict[str, Any] = {}

    class _Record(torch.fx.Interpreter):
        def run_node(self, n: Any) -> Any:
            out = super().run_node(n)
            seen[n.name] = out
            return out

    with torch.inference_mode():
        _Record(gm).run(*args)
    ids = gm.meta.get("rewrite_nodes", {})
    for name, nid in ids.items():
        node = graph.nodes.get(nid)
        if node is None or nid not in ref:
            continue
        outs = seen[name]
        outs = outs if isinstance(outs, tuple | list) else (outs,)
        want = [torch.as_tensor(np.asarray(r)) for r in ref[nid]]
        if _worst([o for o in outs if isinstance(o, torch.Tensor)], want, _KERNEL_BUG) is not None:
            return f"%{nid} ({node.op})"
    return None
