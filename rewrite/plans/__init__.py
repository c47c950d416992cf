"""Plans for many devices: search and expert plans for training on a device mesh, and their hand-back.

`search` and `expert` cost training steps of a model on a mesh (`rewrite.plans.step`) and return
`ParallelPlan` objects keyed by the model's module names; `load` reads a saved plan back.
"""

from __future__ import annotations

from rewrite.plans.api import expert, search
from rewrite.plans.plan import (
    CHECKPOINTING,
    SCHEDULES,
    TP_STYLES,
    ModulePlan,
    ParallelPlan,
    PipelineSpec,
    TensorParallel,
    load,
)

__all__ = [
    "CHECKPOINTING",
    "SCHEDULES",
    "TP_STYLES",
    "ModulePlan",
    "ParallelPlan",
    "PipelineSpec",
    "TensorParallel",
    "expert",
    "load",
    "search",
]
