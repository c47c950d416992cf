"""Torch tensors for a graph's inputs and weights: seeded random ones, or arrays converted."""

from __future__ import annotations

from typing import Any

import numpy as np

from rewrite.ir import Graph, Node
from rewrite.lowering.kernels import torch_dtype
from rewrite.reference import random_inputs, random_params

__all__ = ["random_tensors", "tensor_for"]


def random_tensors(
    graph: Graph, device: Any = "cpu", seed: int = 0
) -> tuple[list[Any], dict[str, Any]]:
    """Seeded random inputs and weights for ``graph`` as torch tensors on ``device``.

    Floats are standard normal (weights scaled by 0.1, batch-norm variances in ``[0.5, 1.5)``);
    integer inputs used as indices (token ids) are drawn below the size of what they index, other
    integers in ``[0, 2)``; bfloat16 tensors are drawn in float32 and rounded.

    Returns:
        ``(inputs, params)``: one tensor per graph input in order, and ``{name: tensor}`` per
        ``param`` node.
    """
    from rewrite.verify.sources import index_bounds

    bounds = index_bounds(graph)
    high = min((n for (op, _), n in bounds.items() if op == "input"), default=2)
    arrays = random_inputs(graph, seed, int_high=max(high, 1))
    weights = random_params(graph, seed + 1)
    nodes = {n.attrs["name"]: n for n in graph if n.op in ("input", "param")}
    inputs = [
        tensor_for(arrays[name], graph.node(i), device)
        for i, name in zip(graph.inputs, graph.input_names)
    ]
    params = {name: tensor_for(a, nodes[name], device) for name, a in weights.items()}
    return inputs, params


def tensor_for(a: Any, node: Node, device: Any) -> Any:
    """``a`` (an array or tensor) as a tensor of ``node``'s output dtype on ``device``."""
    import torch

    t = torch.as_tensor(np.ascontiguousarray(a)).to(device)
    return t.to(torch_dtype(node.types[0].dtype))
