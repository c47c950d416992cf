"""A parallel plan: what each module of a model gets on a named device mesh, and what it costs.

This is the contract between the planner (`rewrite.plans.search`, `rewrite.plans.expert`, which
produce plans and cost them) and the hand-back (`ParallelPlan.apply`, which applies a plan inside
each rank with ``parallelize_module``, ``fully_shard`` and activation checkpointing). A plan is
data: it saves to JSON and loads back.

Placements are written as strings, one per mesh axis of the tensor-parallel axis' sub-mesh, as
DTensor spells them: ``"R"`` (replicate), ``"S(d)"`` (shard tensor dimension ``d``), ``"P"``
(partial sum, pending a reduction).

File format (``format_version`` 1)::

    {
      "format": "rewrite-parallel-plan",
      "format_version": 1,
      "mesh": {"dp": 8, "tp": 8},            # ordered: outermost axis first
      "axes": {"tp": "tp", "fsdp": ["dp"], "replicate": [], "cp": null},
      "modules": {"layers.*.attention.wq": {"tp": {"style": "colwise", ...},
                                             "fsdp": false, "checkpoint": "none"}, ...},
      "pipeline": null | {"axis": "pp", "stages": [[...fqns...], ...], "schedule": "1F1B",
                          "microbatches": 8, "virtual_stages": 1},
      "problems": {"transformer.h.*.attn.c_attn": "why DTensor cannot express it"},
      "training": true, "precision": "bf16",
      "cost": {"step_time": ..., "tokens_per_second": ..., "peak_memory": ..., ...},
      "collectives": {"all_gather": 4, "reduce_scatter": 2, "all_reduce": 3},
      "baselines": {"fsdp": {...a plan document...}, ...},
      "provenance": {...}
    }
"""

from __future__ import annotations

import json
import math
import os
import re
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rewrite.errors import PlanError

__all__ = [
    "CHECKPOINTING",
    "FORMAT_VERSION",
    "ModulePlan",
    "ParallelPlan",
    "PipelineSpec",
    "SCHEDULES",
    "TP_STYLES",
    "TensorParallel",
    "load",
]

FORMAT_VERSION = 1
_KIND = "rewrite-parallel-plan"

#: Tensor-parallel styles, as `torch.distributed.tensor.parallel` names them.
TP_STYLES = ("colwise", "rowwise", "sequence", "prepare_input", "prepare_output")
#: Activation checkpointing per module.
CHECKPOINTING = ("none", "selective", "full")
#: Pipeline schedules.
SCHEDULES = ("gpipe", "1F1B", "interleaved_1F1B")
_PRECISIONS = ("bf16", "fp32")
_PLACEMENT = re.compile(r"^(R|P|S\(-?\d+\))$")
_TUPLE_LAYOUTS = (
    "input_layouts",
    "output_layouts",
    "desired_input_layouts",
    "desired_output_layouts",
)
_KWARG_LAYOUTS = ("input_kwarg_layouts", "desired_input_kwarg_layouts")


def _placements(value: Any, what: str) -> tuple[str, ...] | None:
    if value is None:
        return None
    items = (value,) if isinstance(value, str) else tuple(value)
    for p in items:
        if not isinstance(p, str) or not _PLACEMENT.match(p):
            raise PlanError(
                f"{what} must be placements 'R', 'P' or 'S(d)', but got {value!r}; write "
                "for example ['S(1)'] for a sequence-sharded input."
            )
    return items


@dataclass(frozen=True)
class TensorParallel:
    """One module's tensor-parallel style (a `torch.distributed.tensor.parallel` ParallelStyle).

    Attributes:
        style: One of `TP_STYLES`.
        input_layouts: Placements the module's inputs arrive in (None: the style's default).
        output_layouts: Placements its outputs leave in (None: the style's default).
        desired_input_layouts: For ``prepare_input``: the placements to redistribute inputs to.
        use_local_output: Whether outputs are handed on as local tensors.
        input_kwarg_layouts: For ``prepare_input``: placements of keyword inputs, by name (Hugging
            Face layers call their attention with ``hidden_states=...``).
        desired_input_kwarg_layouts: For ``prepare_input``: what keyword inputs are
            redistributed to, by name.
        desired_output_layouts: For ``prepare_output``: the placements to redistribute outputs to.
    """

    style: str
    input_layouts: tuple[str, ...] | None = None
    output_layouts: tuple[str, ...] | None = None
    desired_input_layouts: tuple[str, ...] | None = None
    use_local_output: bool = True
    input_kwarg_layouts: dict[str, str] | None = None
    desired_input_kwarg_layouts: dict[str, str] | None = None
    desired_output_layouts: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.style not in TP_STYLES:
            raise PlanError(
                f"A tensor-parallel style must be one of {TP_STYLES}, but got {self.style!r}."
            )
        for name in _TUPLE_LAYOUTS:
            object.__setattr__(self, name, _placements(getattr(self, name), name))
        for name in _KWARG_LAYOUTS:
            value = getattr(self, name)
            if value is None:
                continue
            if not isinstance(value, dict):
                raise PlanError(
                    f"{name} maps keyword names to placements, e.g. {{'hidden_states': 'S(1)'}}, "
                    f"but got {value!r}."
                )
            for key, placement in value.items():
                if not isinstance(placement, str):
                    raise PlanError(
                        f"{name}[{key!r}] must be one placement string, got {placement!r}."
                    )
                _placements(placement, f"{name}[{key!r}]")
            object.__setattr__(self, name, {str(k): str(v) for k, v in value.items()})

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"style": self.style, "use_local_output": self.use_local_output}
        for name in _TUPLE_LAYOUTS:
            value = getattr(self, name)
            if value is not None:
                out[name] = list(value)
        for name in _KWARG_LAYOUTS:
            value = getattr(self, name)
            if value is not None:
                out[name] = dict(value)
        return out

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> TensorParallel:
        return cls(
            style=doc["style"],
            input_layouts=doc.get("input_layouts"),
            output_layouts=doc.get("output_layouts"),
            desired_input_layouts=doc.get("desired_input_layouts"),
            use_local_output=bool(doc.get("use_local_output", True)),
            input_kwarg_layouts=doc.get("input_kwarg_layouts"),
            desired_input_kwarg_layouts=doc.get("desired_input_kwarg_layouts"),
            desired_output_layouts=doc.get("desired_output_layouts"),
        )


@dataclass(frozen=True)
class ModulePlan:
    """What one module gets: a tensor-parallel style, parameter sharding and checkpointing.

    Attributes:
        tp: Its tensor-parallel style, or None.
        fsdp: Whether ``fully_shard`` wraps it (over the plan's FSDP axes).
        checkpoint: Activation checkpointing of its forward, one of `CHECKPOINTING`.
        reshard_after_forward: With ``fsdp``, ``fully_shard``'s ``reshard_after_forward``
            (False keeps the gathered parameters from forward to backward, as torchtitan does
            under pipelining).
    """

    tp: TensorParallel | None = None
    fsdp: bool = False
    checkpoint: str = "none"
    reshard_after_forward: bool = True

    def __post_init__(self) -> None:
        if self.checkpoint not in CHECKPOINTING:
            raise PlanError(
                f"checkpoint must be one of {CHECKPOINTING}, but got {self.checkpoint!r}."
            )

    def to_dict(self) -> dict[str, Any]:
        return {
            "tp": None if self.tp is None else self.tp.to_dict(),
            "fsdp": self.fsdp,
            "checkpoint": self.checkpoint,
            "reshard_after_forward": self.reshard_after_forward,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ModulePlan:
        tp = doc.get("tp")
        return cls(
            tp=None if tp is None else TensorParallel.from_dict(tp),
            fsdp=bool(doc.get("fsdp", False)),
            checkpoint=doc.get("checkpoint", "none"),
            reshard_after_forward=bool(doc.get("reshard_after_forward", True)),
        )


@dataclass(frozen=True)
class PipelineSpec:
    """A cut of the layer sequence into stages along a mesh axis.

    Attributes:
        axis: The mesh axis the stages lie along.
        stages: Per stage, the fully qualified names of the modules it holds, in order.
            ``len(stages)`` is ``mesh[axis] * virtual_stages``.
        schedule: One of `SCHEDULES`.
        microbatches: Microbatches per step.
        virtual_stages: Stages per rank (above 1 only for ``interleaved_1F1B``).
    """

    axis: str
    stages: tuple[tuple[str, ...], ...]
    schedule: str = "1F1B"
    microbatches: int = 1
    virtual_stages: int = 1

    def __post_init__(self) -> None:
        if self.schedule not in SCHEDULES:
            raise PlanError(f"schedule must be one of {SCHEDULES}, but got {self.schedule!r}.")
        if self.microbatches < 1 or self.virtual_stages < 1:
            raise PlanError(
                "microbatches and virtual_stages must be >= 1, but got "
                f"({self.microbatches=}, {self.virtual_stages=})."
            )
        object.__setattr__(self, "stages", tuple(tuple(s) for s in self.stages))

    def to_dict(self) -> dict[str, Any]:
        return {
            "axis": self.axis,
            "stages": [list(s) for s in self.stages],
            "schedule": self.schedule,
            "microbatches": self.microbatches,
            "virtual_stages": self.virtual_stages,
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> PipelineSpec:
        return cls(
            axis=doc["axis"],
            stages=tuple(tuple(s) for s in doc["stages"]),
            schedule=doc.get("schedule", "1F1B"),
            microbatches=int(doc.get("microbatches", 1)),
            virtual_stages=int(doc.get("virtual_stages", 1)),
        )


@dataclass(frozen=True)
class ParallelPlan:
    """A plan for running a model on a named device mesh, with its modeled cost.

    Attributes:
        mesh: Ordered mesh axes and sizes, outermost first, e.g. ``{"dp": 8, "tp": 8}``.
        modules: Per module (fully qualified name; ``*`` matches one name component, as in
            ``parallelize_module``), what it gets. Applied in order.
        tp_axis: The mesh axis tensor parallelism runs on, or None.
        fsdp_axes: The mesh axes parameters are sharded over (FSDP / ZeRO-3), or empty.
        replicate_axes: The mesh axes parameters are replicated over, gradients all-reduced
            (DDP, or the replicate part of HSDP).
        pipeline: The pipeline cut, or None.
        cp_axis: The mesh axis the sequence is split over (context parallelism, which the
            training loop applies with ``torch.distributed.tensor.experimental.context_parallel``
            around forward and backward), or None.
        problems: Why DTensor cannot express the plan as it stands, by module name (or
            ``"plan"``); empty when it can. A plan with problems is costed but must not be applied.
        training: Whether the plan is for a training step (forward, backward, optimizer).
        precision: ``"bf16"`` (bf16 compute, fp32 master weights and optimizer states) or
            ``"fp32"``.
        name: A label, e.g. ``"fsdp+tp"`` for an expert plan or ``"search"``.
        cost: The modeled cost: at least ``step_time`` (seconds), ``tokens_per_second`` (per
            device) and ``peak_memory`` (bytes, maximum over devices).
        collectives: Modeled collectives per rank in one step, by kind (``all_gather``,
            ``reduce_scatter``, ``all_reduce``, ``all_to_all``, ``send_recv``).
        baselines: Expert plans costed the same way, by name.
        provenance: How the plan was made (model, device profile, batch, search steps and
            seconds, seed, versions).
    """

    mesh: dict[str, int]
    modules: dict[str, ModulePlan] = field(default_factory=dict)
    tp_axis: str | None = None
    fsdp_axes: tuple[str, ...] = ()
    replicate_axes: tuple[str, ...] = ()
    pipeline: PipelineSpec | None = None
    cp_axis: str | None = None
    problems: dict[str, str] = field(default_factory=dict)
    training: bool = True
    precision: str = "bf16"
    name: str = "plan"
    cost: dict[str, float] = field(default_factory=dict)
    collectives: dict[str, int] = field(default_factory=dict)
    baselines: dict[str, ParallelPlan] = field(default_factory=dict)
    provenance: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        mesh = dict(self.mesh)
        for axis, size in mesh.items():
            if not isinstance(axis, str) or not axis or not isinstance(size, int) or size < 1:
                raise PlanError(
                    "A mesh maps axis names to sizes >= 1, e.g. {'dp': 8, 'tp': 8}, but got "
                    f"{self.mesh!r}."
                )
        object.__setattr__(self, "mesh", mesh)
        object.__setattr__(self, "fsdp_axes", tuple(self.fsdp_axes))
        object.__setattr__(self, "replicate_axes", tuple(self.replicate_axes))
        named = [a for a in (self.tp_axis, *self.fsdp_axes, *self.replicate_axes) if a]
        if self.cp_axis is not None:
            named.append(self.cp_axis)
        if self.pipeline is not None:
            named.append(self.pipeline.axis)
        unknown = [a for a in named if a not in mesh]
        if unknown:
            raise PlanError(
                f"The plan names mesh axes {unknown} that its mesh {mesh} lacks; add them to "
                "the mesh or drop them from the plan."
            )
        if len(set(named)) != len(named):
            raise PlanError(
                f"Each mesh axis plays one role (tp, fsdp, replicate, pp or cp), but got {named}."
            )
        if self.precision not in _PRECISIONS:
            raise PlanError(f"precision must be one of {_PRECISIONS}, but got {self.precision!r}.")
        for key, value in self.cost.items():
            if not isinstance(value, int | float) or not math.isfinite(value):
                raise PlanError(f"cost[{key!r}] must be a finite number, but got {value!r}.")

    @property
    def n_devices(self) -> int:
        """The number of devices the mesh spans."""
        return math.prod(self.mesh.values())

    @property
    def microbatches(self) -> int:
        """Microbatches per step: the pipeline's, else gradient accumulation's (provenance)."""
        if self.pipeline is not None:
            return self.pipeline.microbatches
        return int(self.provenance.get("microbatches", 1))

    @property
    def defers_gradient_sync(self) -> bool:
        """Whether gradient accumulation syncs gradients on the last microbatch only.

        True for a plan that only replicates (DDP: its gradients are whole on every rank, so
        deferring costs no memory, as with DDP's ``no_sync``); FSDP (and HSDP) reduce-scatter
        after every microbatch (FSDP2's default: gradients stay sharded between microbatches).
        `rewrite.plans.step.collectives_of` models the same.
        """
        return bool(self.replicate_axes) and not self.fsdp_axes and self.pipeline is None

    @property
    def expressible(self) -> bool:
        """Whether DTensor can express the plan (no `problems`)."""
        return not self.problems

    def apply(self, model: Any, device_mesh: Any) -> Any:
        """Apply the plan to ``model`` inside this rank (see `rewrite.plans.apply.apply_plan`)."""
        from rewrite.plans.apply import apply_plan

        return apply_plan(self, model, device_mesh)

    def with_cost(self, **cost: float) -> ParallelPlan:
        """A copy whose cost is updated with ``cost``."""
        return replace(self, cost={**self.cost, **cost})

    def to_dict(self) -> dict[str, Any]:
        """The plan as a JSON-ready document (see the module docstring)."""
        return {
            "format": _KIND,
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "mesh": dict(self.mesh),
            "axes": {
                "tp": self.tp_axis,
                "fsdp": list(self.fsdp_axes),
                "replicate": list(self.replicate_axes),
                "cp": self.cp_axis,
            },
            "modules": {fqn: mp.to_dict() for fqn, mp in self.modules.items()},
            "pipeline": None if self.pipeline is None else self.pipeline.to_dict(),
            "problems": dict(self.problems),
            "training": self.training,
            "precision": self.precision,
            "cost": dict(self.cost),
            "collectives": dict(self.collectives),
            "baselines": {k: b.to_dict() for k, b in self.baselines.items()},
            "provenance": dict(self.provenance),
        }

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> ParallelPlan:
        """Read a document written by `to_dict`.

        Raises:
            PlanError: On another ``format``, a newer ``format_version`` or a malformed field.
        """
        if not isinstance(doc, dict) or doc.get("format") != _KIND:
            got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
            raise PlanError(f"Not a parallel plan: expected format {_KIND!r}, got {got!r}.")
        version = doc.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise PlanError(
                f"This plan has format_version {version!r}; this version of rewrite reads up to "
                f"{FORMAT_VERSION}. Upgrade rewrite-tuner to load it."
            )
        try:
            axes = doc.get("axes", {})
            pipeline = doc.get("pipeline")
            return cls(
                mesh={str(k): int(v) for k, v in doc["mesh"].items()},
                modules={k: ModulePlan.from_dict(v) for k, v in doc.get("modules", {}).items()},
                tp_axis=axes.get("tp"),
                fsdp_axes=tuple(axes.get("fsdp", ())),
                replicate_axes=tuple(axes.get("replicate", ())),
                pipeline=None if pipeline is None else PipelineSpec.from_dict(pipeline),
                cp_axis=axes.get("cp"),
                problems={str(k): str(v) for k, v in doc.get("problems", {}).items()},
                training=bool(doc.get("training", True)),
                precision=doc.get("precision", "bf16"),
                name=doc.get("name", "plan"),
                cost={k: float(v) for k, v in doc.get("cost", {}).items()},
                collectives={k: int(v) for k, v in doc.get("collectives", {}).items()},
                baselines={k: cls.from_dict(v) for k, v in doc.get("baselines", {}).items()},
                provenance=dict(doc.get("provenance", {})),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, PlanError):
                raise
            raise PlanError(f"A malformed parallel plan: {exc!r}.") from exc

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the plan to ``path`` as JSON, atomically. Returns the path."""
        path = Path(path)
        text = json.dumps(self.to_dict(), indent=1, sort_keys=False) + "\n"
        fd, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


def load(path: str | os.PathLike[str]) -> ParallelPlan:
    """Load a plan saved by `ParallelPlan.save`.

    Raises:
        PlanError: If the file is missing, not JSON, or not a readable plan.
    """
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise PlanError(f"No parallel plan at {str(path)!r}: the file does not exist.") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PlanError(f"{str(path)!r} is not a JSON parallel plan: {exc}.") from exc
    return ParallelPlan.from_dict(doc)
