"""Pipeline plans: cut a model into stage modules and run them with ``torch.distributed.pipelining``.

A `PipelineSpec` lists, per stage, the model's units it holds, in order: the token embedding,
the blocks, the final norm and the head. Each rank on the pipeline axis keeps its stages (rank
``r`` of ``P`` holds stages ``r``, ``r + P``, ...: torchtitan's loop order), with the other
units removed (so their memory is freed), and runs them with a schedule (``gpipe``: GPipe,
``1F1B``, ``interleaved_1F1B``: ``ScheduleInterleaved1F1B`` with several stages per rank).

A stage module is the pruned Hugging Face model itself, its forward replaced by the stage's part
of the model's forward (embedding, rotary position embeddings, blocks with causal attention,
norm, head), so parameter names stay those of the model and the rest of the plan (tensor
parallelism, checkpointing, FSDP over the other axes) applies to each stage as to a model.
Supported: Llama- and GPT-NeoX-style causal LMs whose attention runs with ``sdpa`` (a missing
mask means causal); sequence parallelism inside a pipeline plan is not (stages hand plain tensors
to each other).

`PipelinedModel` is what `apply_plan` returns for a pipeline plan: ``step(inputs, targets)``
runs one schedule step (forward and backward of every microbatch; gradients are averaged over
microbatches), ``parameters()``/``named_parameters()`` are this rank's.
"""

from __future__ import annotations

import copy
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rewrite.errors import PlanError

if TYPE_CHECKING:
    from rewrite.plans.plan import ParallelPlan

__all__ = ["STAGE_ARCHS", "PipelinedModel", "StageArch", "check_pipeline", "stage_forward", "units"]


@dataclass(frozen=True)
class StageArch:
    """Where a causal LM's units are, by name."""

    embed: str
    dropout: str | None
    layers: str
    rotary: str
    norm: str
    head: str


#: Architectures (by model class name) whose forward a stage can run in parts.
STAGE_ARCHS: dict[str, StageArch] = {
    "LlamaForCausalLM": StageArch(
        "model.embed_tokens", None, "model.layers", "model.rotary_emb", "model.norm", "lm_head"
    ),
    "GPTNeoXForCausalLM": StageArch(
        "gpt_neox.embed_in",
        "gpt_neox.emb_dropout",
        "gpt_neox.layers",
        "gpt_neox.rotary_emb",
        "gpt_neox.final_layer_norm",
        "lm_head",
    ),
}

_SCHEDULES = {
    "gpipe": "ScheduleGPipe",
    "1F1B": "Schedule1F1B",
    "interleaved_1F1B": "ScheduleInterleaved1F1B",
}


def units(model: nn.Module) -> list[str]:
    """The model's pipeline units in forward order: embedding, each block, norm, head."""
    a = STAGE_ARCHS[type(model).__name__]
    n = len(list(model.get_submodule(a.layers).children()))
    return [a.embed, *(f"{a.layers}.{i}" for i in range(n)), a.norm, a.head]


def check_pipeline(
    plan: ParallelPlan, model: nn.Module, targets: list[str], problems: list[str]
) -> None:
    """Append why ``plan``'s pipeline cannot run on ``model`` to ``problems``.

    Args:
        plan: The plan.
        model: The model.
        targets: The concrete module names the plan's entries resolve to.
        problems: Where problems go.
    """
    spec = plan.pipeline
    if spec is None:
        return
    name = type(model).__name__
    if name not in STAGE_ARCHS:
        problems.append(
            f"the plan pipelines a {name}, and stages can be cut only from {sorted(STAGE_ARCHS)}"
        )
        return
    want = plan.mesh[spec.axis] * spec.virtual_stages
    if len(spec.stages) != want:
        problems.append(
            f"the pipeline has {len(spec.stages)} stages but its axis {spec.axis!r} of size "
            f"{plan.mesh[spec.axis]} with {spec.virtual_stages} stages per rank needs {want}"
        )
    multi = spec.schedule == "interleaved_1F1B"
    if multi != (spec.virtual_stages > 1):
        problems.append(
            f"schedule {spec.schedule!r} with {spec.virtual_stages} stages per rank: "
            "interleaved_1F1B runs several stages per rank, gpipe and 1F1B one"
        )
    listed = [u for stage in spec.stages for u in stage]
    if listed != units(model) or any(not stage for stage in spec.stages):
        problems.append(
            f"the stages must hold the units {units(model)} each once, in this order, none "
            f"empty, but they hold {[list(s) for s in spec.stages]}"
        )
    if any(mp.tp is not None and mp.tp.style == "sequence" for mp in plan.modules.values()):
        problems.append(
            "sequence parallelism inside a pipeline plan is not supported (stages hand plain "
            "tensors to each other); drop the sequence styles"
        )
    tied = [n for n, p in model.named_parameters(remove_duplicate=False)]
    if len(tied) != len(set(map(id, model.parameters()))):
        problems.append("the model ties parameters across units; a pipeline cannot split them")
    held = units(model)
    outside = [n for n in targets if not any(n == u or n.startswith(u + ".") for u in held)]
    if outside:
        problems.append(
            f"entries {outside[:3]} lie outside the pipeline's units {held[0]!r} ... "
            f"{held[-1]!r}; a pipeline plan gives styles, FSDP and checkpointing inside units"
        )


def _stage_units(plan: ParallelPlan, stage: int) -> tuple[str, ...]:
    assert plan.pipeline is not None
    return plan.pipeline.stages[stage]


def stage_forward(arch: StageArch, held: tuple[str, ...]) -> Callable[..., torch.Tensor]:
    """The forward of a stage holding ``held`` units: token ids or hidden states in, hidden
    states or logits out (a ``batch x seq_len`` or ``batch x seq_len x hidden`` Tensor)."""
    first, last = arch.embed in held, arch.head in held
    layers = [u for u in held if u.startswith(arch.layers + ".")]

    def forward(self: nn.Module, x: torch.Tensor) -> torch.Tensor:
        h = self.get_submodule(arch.embed)(x) if first else x
        if first and arch.dropout:
            h = self.get_submodule(arch.dropout)(h)
        positions = torch.arange(h.shape[1], device=h.device).unsqueeze(0)
        rope = self.get_submodule(arch.rotary)(h, position_ids=positions)
        for name in layers:
            h = self.get_submodule(name)(
                h, attention_mask=None, position_ids=positions, position_embeddings=rope
            )
        if arch.norm in held:
            h = self.get_submodule(arch.norm)(h)
        return self.get_submodule(arch.head)(h) if last else h

    return forward


def cut_stage(model: nn.Module, held: tuple[str, ...], *, copy_model: bool) -> nn.Module:
    """``model`` (or a copy) with the units it does not hold removed and a stage forward."""
    arch = STAGE_ARCHS[type(model).__name__]
    stage = copy.deepcopy(model) if copy_model else model
    for unit in units(model):
        if unit in held:
            continue
        parent, _, child = unit.rpartition(".")
        owner = stage.get_submodule(parent)
        if isinstance(owner, nn.ModuleList):
            owner[int(child)] = nn.Identity()
        else:
            setattr(owner, child, None)
    object.__setattr__(stage, "forward", types.MethodType(stage_forward(arch, held), stage))
    return stage


class PipelinedModel:
    """This rank's stages of a pipeline plan and the schedule that runs them.

    Stages are built lazily on the first `step` (their input and output shapes come from the
    batch, so no shapes are exchanged between ranks).
    """

    def __init__(
        self,
        plan: ParallelPlan,
        stages: dict[int, nn.Module],
        arch: StageArch,
        group: Any,
        config: Any,
    ) -> None:
        self.plan, self.stages, self.arch, self.group, self.config = (
            plan,
            stages,
            arch,
            group,
            config,
        )
        self.schedule: Any = None
        self._loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None

    @property
    def is_last(self) -> bool:
        """Whether this rank runs the last stage (it gets the loss and the output)."""
        assert self.plan.pipeline is not None
        return len(self.plan.pipeline.stages) - 1 in self.stages

    def named_parameters(self) -> Iterator[tuple[str, nn.Parameter]]:
        """This rank's parameters, by their names in the model."""
        for stage in self.stages.values():
            yield from stage.named_parameters()

    def parameters(self) -> Iterator[nn.Parameter]:
        """This rank's parameters."""
        for _, p in self.named_parameters():
            yield p

    def _build(
        self, inputs: torch.Tensor, loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    ) -> None:
        from torch.distributed import pipelining

        spec = self.plan.pipeline
        assert spec is not None
        if inputs.shape[0] % spec.microbatches:
            raise PlanError(
                f"This rank's batch of {inputs.shape[0]} rows does not split into "
                f"{spec.microbatches} microbatches; use a multiple of {spec.microbatches}."
            )
        rows, seq = inputs.shape[0] // spec.microbatches, inputs.shape[1]
        dtype = next(self.parameters()).dtype
        hidden = torch.empty(  # requires grad: the stage sends its input's gradient back
            rows, seq, int(self.config.hidden_size), dtype=dtype, device="meta", requires_grad=True
        )
        logits = torch.empty(rows, seq, int(self.config.vocab_size), dtype=dtype, device="meta")
        ids = torch.empty(rows, seq, dtype=inputs.dtype, device="meta")
        n = len(spec.stages)
        built = [
            pipelining.PipelineStage(
                module,
                index,
                n,
                torch.device("cpu"),
                input_args=ids if index == 0 else hidden,
                output_args=logits if index == n - 1 else hidden,
                group=self.group,
            )
            for index, module in sorted(self.stages.items())
        ]
        cls = getattr(pipelining, _SCHEDULES[spec.schedule])
        kwargs = {"n_microbatches": spec.microbatches, "loss_fn": loss}
        self.schedule = cls(built if spec.virtual_stages > 1 else built[0], **kwargs)
        self._loss = loss

    def step(
        self,
        inputs: torch.Tensor,
        targets: torch.Tensor,
        loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """One schedule step on this rank's rows (every rank passes them).

        Args:
            inputs: ``batch x seq_len`` token ids (this rank's data-parallel rows).
            targets: Their targets.
            loss: ``(logits, targets) -> scalar`` per microbatch, a mean over its rows.

        Returns:
            On the last stage's ranks, the mean of the microbatch losses and the ``batch x
            seq_len x vocab`` logits; elsewhere ``(None, None)``.
        """
        if self.schedule is None:
            self._build(inputs, loss)
        losses: list[torch.Tensor] = []
        first = 0 in self.stages
        args = (inputs,) if first else ()
        out = self.schedule.step(*args, target=targets if self.is_last else None, losses=losses)
        if not self.is_last:
            return None, None
        return torch.stack([x.detach() for x in losses]).mean(), out.detach()


def build_pipeline(
    plan: ParallelPlan,
    model: nn.Module,
    mesh: Any,
    apply_stage: Callable[[nn.Module, tuple[str, ...]], None],
) -> PipelinedModel:
    """Cut ``model`` into this rank's stages, apply the rest of the plan to each, and wrap them.

    Args:
        plan: A checked pipeline plan.
        model: The model (pruned in place for this rank's first stage; later stages are copies).
        mesh: The device mesh.
        apply_stage: Applies the plan's other parts to one stage module given its units.
    """
    spec = plan.pipeline
    assert spec is not None
    rank = mesh.get_coordinate()[list(plan.mesh).index(spec.axis)]
    size = plan.mesh[spec.axis]
    mine = [s for s in range(len(spec.stages)) if s % size == rank]
    config = getattr(model, "config", None)
    arch = STAGE_ARCHS[type(model).__name__]  # before fully_shard renames the class
    stages: dict[int, nn.Module] = {}
    for k, index in enumerate(mine):
        held = spec.stages[index]
        stage = cut_stage(model, held, copy_model=k < len(mine) - 1)
        apply_stage(stage, held)
        stages[index] = stage
    group = mesh.get_group(spec.axis)
    return PipelinedModel(plan, stages, arch, group, config)
