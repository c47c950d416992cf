"""Rewritten graphs back in PyTorch: modules, one-call optimization and a torch.compile backend.

* `to_module(graph, params)`: a ``torch.fx.GraphModule`` computing a graph with a model's real
  weights (shared), checked against the original before it is returned.
* `optimize_module(module, example_inputs)`: import, search, build the most promising graphs,
  time them against the original on its device and return the fastest with a report.
* `backend(...)`: the ``torch.compile`` backend (``backend="rewrite"`` names it with defaults):
  the verified search on every captured graph, then Inductor.
* `TorchCall` / `torch_call`: the PyTorch call of every IR op (`rewrite.lowering.kernels`), read by
  `to_module` and by the timing programs of `rewrite.measurement`.
"""

from __future__ import annotations

from rewrite.lowering.check import TOLERANCES, check_module
from rewrite.lowering.kernels import TorchCall, torch_call, torch_dtype
from rewrite.lowering.module import to_module
from rewrite.lowering.source import TorchSource, source_of
from rewrite.pytorch.dynamo import backend
from rewrite.pytorch.optimize import Candidate, OptimizeReport, default_profile, optimize_module

__all__ = [
    "TOLERANCES",
    "Candidate",
    "OptimizeReport",
    "default_profile",
    "optimize_module",
    "TorchCall",
    "TorchSource",
    "backend",
    "check_module",
    "source_of",
    "to_module",
    "torch_call",
    "torch_dtype",
]
