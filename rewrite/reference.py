"""Reference evaluation of graphs with numpy (or any numpy-like namespace such as cupy).

Each node runs its op's reference implementation (`rewrite.ops.OpDef.impl`) in topological
order; results are cast to the node's declared dtype (bfloat16 is computed in float32).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rewrite.errors import EvaluationError
from rewrite.ir import Graph, TensorType, numpy_dtype
from rewrite.ops import get_op

__all__ = ["evaluate", "evaluate_nodes", "random_inputs", "random_params"]


def evaluate(
    graph: Graph,
    inputs: Mapping[str, Any] | Sequence[Any],
    params: Mapping[str, Any] | None = None,
    *,
    xp: Any = np,
) -> list[Any]:
    """Run ``graph`` on concrete arrays.

    Args:
        graph: The graph.
        inputs: Arrays for the graph inputs, by name or in order; shapes must match.
        params: Arrays for the ``param`` nodes by name (see `random_params`).
        xp: Array namespace (``numpy`` by default, ``cupy`` on a GPU).

    Returns:
        One array per graph output.

    Raises:
        EvaluationError: On a missing or mis-shaped input or param, or an opaque node.
    """
    env = evaluate_nodes(graph, inputs, params, xp=xp)
    return [env[v.node][v.index] for v in graph.outputs]


def evaluate_nodes(
    graph: Graph,
    inputs: Mapping[str, Any] | Sequence[Any],
    params: Mapping[str, Any] | None = None,
    *,
    xp: Any = np,
) -> dict[int, tuple[Any, ...]]:
    """Like `evaluate`, but the outputs of every node: ``{node id: (array per output)}``."""
    if not isinstance(inputs, Mapping):
        if len(inputs) != len(graph.inputs):
            raise EvaluationError(
                f"graph {graph.name!r} takes {len(graph.inputs)} inputs, but got {len(inputs)}."
            )
        inputs = dict(zip(graph.input_names, inputs))
    params = params or {}
    env: dict[int, tuple[Any, ...]] = {}
    for node in graph:
        if node.op in ("input", "param"):
            source = inputs if node.op == "input" else params
            env[node.id] = (_source(node.op, node.attrs["name"], source, node.type, xp),)
            continue
        args = [env[v.node][v.index] for v in node.inputs]
        if node.op == "fused":  # a group means its body
            outs: Sequence[Any] = evaluate(node.attrs["body"], args, xp=xp)
        else:
            outs = get_op(node.op).impl(xp, args, node.attrs)
        env[node.id] = tuple(
            xp.asarray(o).astype(numpy_dtype(t.dtype), copy=False) for o, t in zip(outs, node.types)
        )
    return env


def _source(op: str, name: str, source: Mapping[str, Any], t: TensorType, xp: Any) -> Any:
    if name not in source:
        raise EvaluationError(
            f"{op} {name!r} needs a value; pass it in the {op}s mapping "
            f"(rewrite.random_{op}s(graph) makes random ones)."
        )
    arr = xp.asarray(source[name])
    if tuple(arr.shape) != t.shape:
        raise EvaluationError(
            f"{op} {name!r} must have shape {t.shape}, but got {tuple(arr.shape)}."
        )
    return arr.astype(numpy_dtype(t.dtype), copy=False)


def _random(t: TensorType, rng: np.random.Generator, int_high: int) -> np.ndarray:
    if t.dtype == "bool":
        return rng.random(t.shape) < 0.5
    if t.dtype in ("float16", "bfloat16", "float32", "float64"):
        return rng.standard_normal(t.shape).astype(numpy_dtype(t.dtype))
    return rng.integers(0, int_high, size=t.shape).astype(numpy_dtype(t.dtype))


def random_inputs(graph: Graph, seed: int = 0, int_high: int = 2) -> dict[str, np.ndarray]:
    """Seeded random arrays for every graph input (standard normal floats, ints in
    ``[0, int_high)``: pass the vocabulary size for token ids)."""
    rng = np.random.default_rng(seed)
    return {
        graph.node(i).attrs["name"]: _random(graph.node(i).type, rng, int_high)
        for i in graph.inputs
    }


def random_params(graph: Graph, seed: int = 0, scale: float = 0.1) -> dict[str, np.ndarray]:
    """Seeded random arrays for every ``param`` node: normal with std ``scale``, except
    batch-norm running variances, uniform in ``[0.5, 1.5)``."""
    rng = np.random.default_rng(seed)
    variances = {bn.inputs[4].node for bn in graph if bn.op == "batch_norm"}
    out = {}
    for n in graph.params():
        arr = _random(n.type, rng, 2)
        if n.id in variances:  # running variances must be positive
            arr = rng.uniform(0.5, 1.5, n.type.shape).astype(arr.dtype)
        elif arr.dtype.kind == "f":
            arr = (arr * scale).astype(arr.dtype)
        out[n.attrs["name"]] = arr
    return out
