"""Plans for many devices: a parallel plan's data model (search, costing and hand-back build on it)."""

from __future__ import annotations

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
    "load",
]
