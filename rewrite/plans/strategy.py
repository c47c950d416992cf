"""A strategy: the planner's decision vector for one training job (what `ParallelPlan` records).

A `Strategy` names the mesh and the role of each axis (tensor parallel, pipeline, context
parallel, data parallel with sharded or replicated parameters), the tensor-parallel layout of a
block (`TPLayout`: which dimension of each parameter the tensor-parallel axis splits, and whether
the residual stream is split along the sequence), checkpointing per block, the pipeline schedule
and microbatches, and the numerics. `rewrite.plans.step.step_cost` costs it;
`rewrite.plans.convert.to_plan` writes it as a `ParallelPlan` keyed by the model's module names.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from rewrite.errors import PlanError
from rewrite.plans.graphcost import CHECKPOINT_MODES
from rewrite.plans.plan import SCHEDULES

__all__ = ["Strategy", "TPLayout"]


@dataclass(frozen=True)
class TPLayout:
    """Which dimension the tensor-parallel axis splits, per parameter.

    Attributes:
        block: Per block parameter (relative name, e.g. ``self_attn.q_proj.weight``), the split
            dimension; parameters left out are replicated.
        rest: The same for the parameters outside the blocks (model-level names).
        sequence_parallel: The residual stream between blocks is split along the sequence.
    """

    block: Mapping[str, int] = field(default_factory=dict)
    rest: Mapping[str, int] = field(default_factory=dict)
    sequence_parallel: bool = False

    def key(self) -> tuple[object, ...]:
        """A hashable identity."""
        return (
            tuple(sorted(self.block.items())),
            tuple(sorted(self.rest.items())),
            self.sequence_parallel,
        )


@dataclass(frozen=True)
class Strategy:
    """A training job's decisions (see the module docstring).

    Attributes:
        mesh: Ordered axes and sizes, outermost first (devices are numbered row-major, so the
            last axis is contiguous and inside a node when it fits).
        tp: The tensor-parallel axis, or None.
        pp: The pipeline axis, or None.
        cp: The context-parallel axis (splits the sequence), or None.
        fsdp: Axes parameters, gradients and optimizer states are sharded over (FSDP2).
        replicate: Axes parameters are replicated over, gradients all-reduced (DDP; with
            ``fsdp`` too, HSDP). Every mesh axis other than tp, pp and cp must be in one of them.
        layout: The tensor-parallel layout (None: everything replicated on ``tp``).
        checkpoint: Per block, one of ``CHECKPOINT_MODES`` (a single mode is expanded).
        microbatches: Microbatches per step (pipeline microbatches, or gradient accumulation).
        schedule: Pipeline schedule, one of `SCHEDULES`.
        virtual_stages: Stages per pipeline rank (interleaved 1F1B).
        reshard_after_forward: FSDP frees gathered parameters after each block's forward.
        precision: ``"bf16"`` (bf16 compute, fp32 master weights, fp32 gradient reduction) or
            ``"fp32"``.
        float8: Linears in float8 (torchao), with float8 parameter all-gathers.
        compile: Blocks compiled (``torch.compile``): generated kernels fused.
        async_tp: Tensor-parallel collectives overlapped with their GEMMs.
        overlap: FSDP and DDP collectives overlap compute (FSDP2 prefetching, DDP buckets).
        loss_parallel: With a column-parallel head, the loss is computed on vocabulary shards.
    """

    mesh: Mapping[str, int]
    tp: str | None = None
    pp: str | None = None
    cp: str | None = None
    fsdp: tuple[str, ...] = ()
    replicate: tuple[str, ...] = ()
    layout: TPLayout | None = None
    checkpoint: tuple[str, ...] = ("none",)
    microbatches: int = 1
    schedule: str = "1F1B"
    virtual_stages: int = 1
    reshard_after_forward: bool = True
    precision: str = "bf16"
    float8: bool = False
    compile: bool = False
    async_tp: bool = False
    overlap: bool = True
    loss_parallel: bool = True

    def __post_init__(self) -> None:
        mesh = dict(self.mesh)
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "fsdp", tuple(self.fsdp))
        object.__setattr__(self, "replicate", tuple(self.replicate))
        object.__setattr__(self, "checkpoint", tuple(self.checkpoint))
        roles = [a for a in (self.tp, self.pp, self.cp) if a] + [*self.fsdp, *self.replicate]
        if len(roles) != len(set(roles)) or any(a not in mesh for a in roles):
            raise PlanError(
                f"Each axis of the mesh {mesh} plays one role, but got tp={self.tp}, pp={self.pp}, "
                f"cp={self.cp}, fsdp={self.fsdp}, replicate={self.replicate}."
            )
        loose = [a for a in mesh if a not in roles and mesh[a] > 1]
        if loose:
            raise PlanError(f"Mesh axes {loose} have no role; put them in fsdp or replicate.")
        bad = [c for c in self.checkpoint if c not in CHECKPOINT_MODES]
        if bad or not self.checkpoint:
            raise PlanError(f"checkpoint modes must be in {CHECKPOINT_MODES}, got {bad}.")
        if self.schedule not in SCHEDULES or self.microbatches < 1 or self.virtual_stages < 1:
            raise PlanError(
                f"schedule must be one of {SCHEDULES} with microbatches, virtual_stages >= 1, got "
                f"({self.schedule!r}, {self.microbatches}, {self.virtual_stages})."
            )

    @property
    def n_devices(self) -> int:
        """Devices in the mesh."""
        return math.prod(self.mesh.values())

    def size(self, axis: str | None) -> int:
        """The size of ``axis`` (1 for None)."""
        return 1 if axis is None else self.mesh[axis]

    @property
    def dp_axes(self) -> tuple[str, ...]:
        """Axes the batch is split over (replicate and fsdp axes, in mesh order)."""
        return tuple(a for a in self.mesh if a in self.fsdp or a in self.replicate)

    @property
    def dp(self) -> int:
        """Data-parallel degree (the batch is split this many ways)."""
        return math.prod(self.mesh[a] for a in self.dp_axes)

    @property
    def grad_axes(self) -> tuple[str, ...]:
        """Axes parameter gradients are summed over (data parallel and context parallel)."""
        return tuple(a for a in self.mesh if a in self.dp_axes or a == self.cp)

    @property
    def shard_axes(self) -> tuple[str, ...]:
        """Axes parameters are sharded over by FSDP (the fsdp axes, and cp when FSDP is on,
        as torchtitan shards over ``dp_shard_cp``)."""
        if not self.fsdp:
            return ()
        return tuple(a for a in self.mesh if a in self.fsdp or a == self.cp)

    def checkpoints(self, n_blocks: int) -> tuple[str, ...]:
        """The checkpointing mode of each of ``n_blocks`` blocks.

        Raises:
            PlanError: If the strategy lists another number of modes than 1 or ``n_blocks``.
        """
        if len(self.checkpoint) == 1:
            return self.checkpoint * n_blocks
        if len(self.checkpoint) != n_blocks:
            raise PlanError(
                f"checkpoint lists {len(self.checkpoint)} modes for a model of {n_blocks} blocks; "
                "give one mode, or one per block."
            )
        return self.checkpoint

    def with_(self, **changes: object) -> Strategy:
        """A copy with ``changes``."""
        return replace(self, **changes)  # type: ignore[arg-type]
