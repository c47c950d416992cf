"""The rewrite search being tuned: tensor-graph IR, rules, verification, cost model and search."""

from __future__ import annotations

from rewrite import ops
from rewrite.builder import GraphBuilder, GraphEditor
from rewrite.cost import COST_FIELDS, CostVector, cost, node_cost, peak_memory
from rewrite.devices import DeviceProfile, device_names, load_device
from rewrite.errors import (
    CostModelError,
    EvaluationError,
    GraphError,
    OpaqueOpWarning,
    RewriteError,
    SerializationError,
    ShapeError,
    TorchImportError,
    UnknownOpError,
)
from rewrite.evaluate import evaluate, random_inputs, random_params
from rewrite.ir import ConstArray, Graph, GraphDelta, Node, TensorType, Value
from rewrite.serialize import from_json, load, save, to_json, to_text

__all__ = [
    # IR
    "ConstArray",
    "Graph",
    "GraphBuilder",
    "GraphDelta",
    "GraphEditor",
    "Node",
    "TensorType",
    "Value",
    "ops",
    # persistence and display
    "from_json",
    "load",
    "save",
    "to_json",
    "to_text",
    # reference semantics
    "evaluate",
    "random_inputs",
    "random_params",
    # cost model
    "COST_FIELDS",
    "CostVector",
    "DeviceProfile",
    "cost",
    "device_names",
    "load_device",
    "node_cost",
    "peak_memory",
    # import
    "from_torch",
    "zoo",
    # errors
    "CostModelError",
    "EvaluationError",
    "GraphError",
    "OpaqueOpWarning",
    "RewriteError",
    "SerializationError",
    "ShapeError",
    "TorchImportError",
    "UnknownOpError",
]


def __getattr__(name: str) -> object:
    # torch and transformers are heavy: import them only when the importer is used.
    if name == "from_torch":
        from rewrite.torch_import import from_torch

        return from_torch
    if name == "zoo":
        import importlib

        return importlib.import_module("rewrite.zoo")
    raise AttributeError(f"module 'rewrite' has no attribute {name!r}")
