"""Ground truth for the cost model: run IR graphs in PyTorch, time them, fit device profiles.

* `lower` turns a `Graph` into a PyTorch `Program` (every registered op but ``opaque``).
* `measure` times a graph on CUDA when present, else the CPU, and reports its peak memory.
* `node_times` times every node on its own (on CUDA: device and host time apart).
* `measure_front` pairs predicted with measured speedups of a search's Pareto graphs.
* `calibrate` fits a device profile's free constants to such measurements of zoo graphs and
  writes a versioned profile JSON that `rewrite.costmodel` loads.

Importing this package does not import torch; its functions do.
"""

from __future__ import annotations

from rewrite.lowering.program import TORCH_KERNELS, Program, lower
from rewrite.measurement.calibration import Calibration, calibrate, write_profile
from rewrite.measurement.front import MeasuredSolution, format_front, measure_front
from rewrite.measurement.timing import (
    Measurement,
    NodeTimes,
    default_device,
    measure,
    node_times,
    random_tensors,
    time_callables,
)

__all__ = [
    "TORCH_KERNELS",
    "Calibration",
    "MeasuredSolution",
    "calibrate",
    "format_front",
    "measure_front",
    "write_profile",
    "Measurement",
    "NodeTimes",
    "Program",
    "default_device",
    "lower",
    "measure",
    "node_times",
    "random_tensors",
    "time_callables",
]
