"""Apply a `ParallelPlan` inside each rank: tensor parallelism, checkpointing, FSDP, HSDP, DDP.

The order is torchtitan's (``parallelize_llama``): exact module rewrites tensor parallelism needs
(`rewrite.plans.modules`), then ``parallelize_module`` with the plan's styles on the plan's
tensor-parallel axis, then activation checkpointing per module, then ``fully_shard`` on the
modules marked ``fsdp`` (innermost first) and on the root, over the FSDP axes (HSDP when the plan
also replicates), or ``replicate`` on the root for a plan that only replicates (DDP).

Nothing is applied half-way: `check_plan` validates the whole plan against the model and the
mesh first and reports every problem at once; then the plan is rehearsed on a copy of the model
whose tensors live on the ``meta`` device (no memory, no communication); only then is the model
itself changed. A plan DTensor cannot express raises `PlanError` and leaves the model as it was.

Conventions, stated so the planner's collective counts can follow them:

- FSDP passes each module's ``reshard_after_forward``: True leaves ``fully_shard`` its default
  (non-root modules reshard after forward and are all-gathered again in backward; the root does
  not), False keeps the module's parameters gathered from forward to backward.
  torchtitan additionally keeps the last block unsharded (one all-gather fewer per step); plans
  here do not.
- ``replicate`` is the FSDP2-based one (``torch.distributed._composable.replicate_with_fsdp``):
  one gradient all-reduce per replicated module group.
- ``checkpoint="full"`` recomputes the module's forward in backward; ``"selective"`` is
  torchtitan's op-level policy: save the outputs of matmuls (every other one), attention and
  reduce-scatters, recompute the rest. On the CPU, a linear layer with a bias runs as ``addmm``,
  which is treated as a matmul here.
- Every rank must hold the same model (seeded, or loaded from one checkpoint): ``fully_shard``
  and ``replicate`` take each rank's own copy; ``parallelize_module`` scatters rank 0's.
"""

from __future__ import annotations

import copy
import fnmatch
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from rewrite.errors import PlanError
from rewrite.plans import modules as arch
from rewrite.plans.checkpointing import apply_checkpoint

if TYPE_CHECKING:  # plan.py imports this module in ParallelPlan.apply
    from rewrite.plans.plan import ModulePlan, ParallelPlan, TensorParallel

__all__ = [
    "CheckedPlan",
    "Target",
    "apply_plan",
    "check_plan",
    "init_mesh",
    "placement",
    "tp_style",
]


@dataclass(frozen=True)
class Target:
    """What one concrete module gets, all plan entries that match it merged."""

    tp: TensorParallel | None
    fsdp: bool
    checkpoint: str
    reshard_after_forward: bool = True


@dataclass(frozen=True)
class CheckedPlan:
    """A plan checked against one model: the concrete modules it touches and the rewrites needed.

    Attributes:
        plan: The plan.
        targets: Per concrete module name (model order), what it gets (wildcards expanded and
            entries merged).
        conv1d: Modules to convert from ``Conv1D`` to ``nn.Linear`` first.
        fused: Attention units whose fused QKV projection is regrouped first.
        tp_degree: The tensor-parallel degree (1 without tensor parallelism).
    """

    plan: ParallelPlan
    targets: dict[str, Target]
    conv1d: tuple[str, ...]
    fused: tuple[str, ...]
    tp_degree: int


def apply_plan(plan: ParallelPlan, model: nn.Module, device_mesh: Any) -> Any:
    """Apply ``plan`` to ``model`` in place, inside this rank, and return it.

    Args:
        plan: The plan; its ``mesh`` must equal ``device_mesh``'s names and sizes.
        model: The model, identical on every rank.
        device_mesh: A ``DeviceMesh`` from ``init_device_mesh(device, shape,
            mesh_dim_names=names)`` with the plan's axes in the plan's order.

    Returns:
        ``model``, parallelized; for a pipeline plan, a `rewrite.plans.pipeline.PipelinedModel`
        holding this rank's stages (``model`` pruned to the first of them). Parameters touched
        by a layout rewrite can be read back in the original layout with
        `rewrite.plans.modules.original_layout`.

    Raises:
        PlanError: If the plan does not fit the model or the mesh, or DTensor cannot express it;
            the model is then unchanged.
    """
    checked = check_plan(plan, model, device_mesh)
    rehearsal = _meta_copy(model)
    try:
        _apply(checked, rehearsal, device_mesh, src_data_rank=None)
    except PlanError:
        raise
    except Exception as exc:  # what torch refuses, found on the copy: the model is untouched
        raise PlanError(
            f"PyTorch refused plan {plan.name!r} while rehearsing it on a meta copy of the model "
            f"(the model itself is unchanged): {type(exc).__name__}: {exc}"
        ) from exc
    del rehearsal
    return _apply(checked, model, device_mesh, src_data_rank=0)


def init_mesh(plan: ParallelPlan, device_type: str = "cpu") -> Any:
    """The ``DeviceMesh`` a plan runs on: its axes' names and sizes, in order (after
    ``torch.distributed.init_process_group``, with as many ranks as the mesh has devices)."""
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(device_type, tuple(plan.mesh.values()), mesh_dim_names=tuple(plan.mesh))


def check_plan(plan: ParallelPlan, model: nn.Module, device_mesh: Any = None) -> CheckedPlan:
    """Check ``plan`` against ``model`` (and ``device_mesh`` when given) without changing either.

    Raises:
        PlanError: Listing every problem found.
    """
    problems = [
        f"the planner found DTensor cannot express {k!r}: {v}" for k, v in plan.problems.items()
    ]
    if plan.cp_axis is not None:
        problems.append(
            f"context parallelism (cp_axis {plan.cp_axis!r}) is applied by the training loop "
            "(torch.distributed.tensor.experimental.context_parallel), not by apply_plan"
        )
    if device_mesh is not None:
        _check_mesh(plan, device_mesh, problems)
    _check_axes(plan, problems)
    targets = _resolve(plan, model, problems)
    tp_degree = plan.mesh[plan.tp_axis] if plan.tp_axis else 1
    conv1d, fused = _check_tp(plan, model, targets, tp_degree, problems)
    _check_checkpointing(targets, problems)
    _check_data_parallel(plan, model, targets, problems)
    if plan.pipeline is not None:
        from rewrite.plans.pipeline import check_pipeline

        check_pipeline(plan, model, list(targets), problems)
    if problems:
        listed = "\n".join(f"- {p}" for p in problems)
        raise PlanError(f"Plan {plan.name!r} cannot be applied to this model:\n{listed}")
    return CheckedPlan(plan, targets, tuple(conv1d), tuple(fused), tp_degree)


# --- checks -------------------------------------------------------------------------------------


def _check_mesh(plan: ParallelPlan, mesh: Any, problems: list[str]) -> None:
    names = tuple(getattr(mesh, "mesh_dim_names", None) or ())
    shape = tuple(int(s) for s in getattr(mesh, "shape", ()))
    if names != tuple(plan.mesh) or shape != tuple(plan.mesh.values()):
        problems.append(
            f"the device mesh has axes {names} of sizes {shape} but the plan's mesh is "
            f"{plan.mesh}; build it with init_device_mesh(device, {tuple(plan.mesh.values())}, "
            f"mesh_dim_names={tuple(plan.mesh)})"
        )


def _check_axes(plan: ParallelPlan, problems: list[str]) -> None:
    roles = {plan.tp_axis, *plan.fsdp_axes, *plan.replicate_axes}
    if plan.pipeline is not None:
        roles.add(plan.pipeline.axis)
    idle = [a for a, n in plan.mesh.items() if n > 1 and a not in roles]
    if idle:
        problems.append(
            f"mesh axes {idle} have no role (tensor parallel, FSDP, replicate or pipeline): ranks "
            "along them would train apart; give each a role or make its size 1"
        )
    if (
        plan.fsdp_axes
        and plan.replicate_axes
        and len(plan.fsdp_axes) + len(plan.replicate_axes) > 2
    ):
        problems.append(
            f"HSDP takes one replicate axis and one FSDP axis, but the plan has replicate "
            f"{list(plan.replicate_axes)} and FSDP {list(plan.fsdp_axes)}"
        )
    order = list(plan.mesh)
    if (
        plan.fsdp_axes
        and plan.replicate_axes
        and order.index(plan.replicate_axes[0]) > order.index(plan.fsdp_axes[0])
    ):
        problems.append(
            f"HSDP needs the replicate axis {plan.replicate_axes[0]!r} outside (before) the FSDP "
            f"axis {plan.fsdp_axes[0]!r} in the mesh, but the mesh is {plan.mesh}"
        )


def _matches(pattern: str, fqn: str) -> bool:
    if pattern == fqn:
        return True
    pat, name = pattern.split("."), fqn.split(".")
    return len(pat) == len(name) and all(fnmatch.fnmatchcase(n, p) for p, n in zip(pat, name))


def _resolve(plan: ParallelPlan, model: nn.Module, problems: list[str]) -> dict[str, Target]:
    names = [n for n, _ in model.named_modules()]
    hits: dict[str, list[tuple[str, ModulePlan]]] = defaultdict(list)
    for pattern, mp in plan.modules.items():
        matched = [n for n in names if _matches(pattern, n)]
        if not matched:
            near = fnmatch.filter(names, f"*{pattern.rsplit('.', 1)[-1]}*")[:3]
            problems.append(
                f"module {pattern!r} matches no module of {type(model).__name__}"
                + (f"; modules with a similar name: {near}" if near else "")
            )
        for n in matched:
            hits[n].append((pattern, mp))
    targets: dict[str, Target] = {}
    for n in names:
        if n in hits:
            merged = _merge(n, hits[n], problems)
            if merged is not None:
                targets[n] = merged
    return targets


def _merge(fqn: str, entries: list[tuple[str, ModulePlan]], problems: list[str]) -> Target | None:
    tps = {repr(mp.tp): (p, mp.tp) for p, mp in entries if mp.tp is not None}
    cps = {mp.checkpoint: p for p, mp in entries if mp.checkpoint != "none"}
    if len(tps) > 1 or len(cps) > 1:
        clash = [p for p, _ in tps.values()] if len(tps) > 1 else list(cps.values())
        problems.append(
            f"module {fqn!r} is given different {'styles' if len(tps) > 1 else 'checkpointing'} "
            f"by entries {clash}; give each module one"
        )
        return None
    return Target(
        tp=next(iter(tps.values()))[1] if tps else None,
        fsdp=any(mp.fsdp for _, mp in entries),
        checkpoint=next(iter(cps)) if cps else "none",
        reshard_after_forward=all(mp.reshard_after_forward for _, mp in entries if mp.fsdp),
    )


def _check_style_fields(fqn: str, tp: TensorParallel, problems: list[str]) -> None:
    n_in = len(tp.input_layouts or ())
    if tp.style in ("colwise", "rowwise") and (n_in > 1 or len(tp.output_layouts or ()) > 1):
        problems.append(
            f"{tp.style} on {fqn!r} takes one input and one output placement on the 1-D "
            f"tensor-parallel mesh, but got {tp.input_layouts} and {tp.output_layouts}"
        )
    kwargs_differ = set(tp.input_kwarg_layouts or {}) != set(tp.desired_input_kwarg_layouts or {})
    if tp.style == "prepare_input" and (
        n_in != len(tp.desired_input_layouts or ()) or kwargs_differ
    ):
        problems.append(
            f"prepare_input on {fqn!r} needs one desired placement per input placement "
            f"(positional and keyword), but got {tp.input_layouts} -> "
            f"{tp.desired_input_layouts}, {tp.input_kwarg_layouts} -> "
            f"{tp.desired_input_kwarg_layouts}"
        )
    if tp.style == "prepare_output" and (
        not tp.output_layouts or len(tp.output_layouts) != len(tp.desired_output_layouts or ())
    ):
        problems.append(
            f"prepare_output on {fqn!r} needs output_layouts and as many "
            f"desired_output_layouts, but got {tp.output_layouts} -> {tp.desired_output_layouts}"
        )
    if tp.style == "sequence" and tp.input_layouts and not tp.input_layouts[0].startswith("S("):
        problems.append(
            f"sequence on {fqn!r} shards a sequence dimension; its input_layouts must be "
            f"['S(d)'], but got {list(tp.input_layouts)}"
        )


def _check_tp(
    plan: ParallelPlan,
    model: nn.Module,
    targets: dict[str, Target],
    degree: int,
    problems: list[str],
) -> tuple[list[str], list[str]]:
    styled = {n: mp.tp for n, mp in targets.items() if mp.tp is not None}
    if styled and plan.tp_axis is None:
        problems.append(
            f"modules {sorted(styled)[:3]} have tensor-parallel styles but the plan names no "
            "tp_axis; set tp_axis to a mesh axis"
        )
        return [], []
    conv1d: list[str] = []
    units: dict[str, arch.AttentionSpec] = {}
    shared = _shared_params(model)
    for fqn, tp in styled.items():
        _check_style_fields(fqn, tp, problems)
        module = model.get_submodule(fqn)
        if tp.style in ("colwise", "rowwise"):
            if arch.is_conv1d(module):
                conv1d.append(fqn)
            elif not isinstance(module, nn.Linear | nn.Embedding):
                problems.append(
                    f"{tp.style} on {fqn!r}: parallelize_module shards nn.Linear and "
                    f"nn.Embedding only, but this is a {type(module).__name__}"
                )
            unit = arch.attention_unit(fqn, model)
            if isinstance(unit, str):
                problems.append(
                    f"{tp.style} on {fqn!r} inside attention class {unit}, whose head split "
                    f"under tensor parallelism is not known here (supported: "
                    f"{sorted(arch.ATTENTION)}); leave its projections out of the plan"
                )
            elif unit is not None:
                units[unit[0]] = unit[1]
        if tp.style in ("colwise", "rowwise", "sequence"):
            tied = [f"{fqn}.{p}" for p, _ in module.named_parameters() if f"{fqn}.{p}" in shared]
            if tied:
                problems.append(
                    f"{tp.style} on {fqn!r} would shard {tied}, which are tied to "
                    f"{[shared[t] for t in tied]}; tensor parallelism of tied parameters is not "
                    "supported: leave both modules out of tensor parallelism"
                )
    fused = [u for u in units if _check_unit(u, units[u], model, styled, degree, problems)]
    return conv1d, fused


def _check_unit(
    unit: str,
    spec: arch.AttentionSpec,
    model: nn.Module,
    styled: dict[str, TensorParallel],
    degree: int,
    problems: list[str],
) -> bool:
    """Check one attention unit; True when its fused QKV must be regrouped."""
    prefix = f"{unit}." if unit else ""
    proj = [styled.get(prefix + p) for p in spec.projections]
    out = styled.get(prefix + spec.output)
    sharded_out = (None, ("S(-1)",), ("S(2)",))
    ok = all(
        t is not None
        and t.style == "colwise"
        and t.output_layouts in sharded_out
        and t.use_local_output
        for t in proj
    ) and (out is not None and out.style == "rowwise" and out.input_layouts in sharded_out)
    module = model.get_submodule(unit)
    if not ok:
        problems.append(
            f"attention {unit!r} ({type(module).__name__}) must shard {list(spec.projections)} "
            f"column-wise (local, head-sharded outputs) and {spec.output!r} row-wise together, "
            f"so that each rank holds whole heads; got "
            f"{[t.style if t else None for t in proj]} and {out.style if out else None}"
        )
        return False
    why = arch.heads_problem(spec, module, degree)
    if why:
        problems.append(f"attention {unit!r}: {why}")
        return False
    return spec.fused is not None


def _shared_params(model: nn.Module) -> dict[str, list[str]]:
    """Parameter names that share storage with another name, mapped to the other names."""
    by_id: dict[int, list[str]] = defaultdict(list)
    for name, p in model.named_parameters(remove_duplicate=False):
        by_id[id(p)].append(name)
    return {
        n: [o for o in names if o != n] for names in by_id.values() if len(names) > 1 for n in names
    }


def _check_checkpointing(targets: dict[str, Target], problems: list[str]) -> None:
    marked = [n for n, mp in targets.items() if mp.checkpoint != "none"]
    for n in marked:
        outer = [m for m in marked if m != n and (m == "" or n.startswith(m + "."))]
        if outer:
            problems.append(
                f"module {n!r} is checkpointed inside checkpointed {outer[0]!r}; nested "
                "checkpointing recomputes twice: checkpoint one of them"
            )


def _check_data_parallel(
    plan: ParallelPlan, model: nn.Module, targets: dict[str, Target], problems: list[str]
) -> None:
    wrapped = [n for n, mp in targets.items() if mp.fsdp]
    if wrapped and not plan.fsdp_axes:
        problems.append(
            f"modules {wrapped[:3]} are marked fsdp but the plan has no fsdp_axes; name the "
            "mesh axes to shard over, or unmark them"
        )
        return
    if not plan.fsdp_axes:
        return
    groups = sorted(wrapped, key=lambda n: -n.count("."))

    def group_of(param: str) -> str:
        return next((g for g in groups if g == "" or param.startswith(g + ".")), "<root>")

    for name, others in _shared_params(model).items():
        spanned = {group_of(name), *(group_of(o) for o in others)}
        if len(spanned) > 1:
            problems.append(
                f"parameter {name!r} is tied to {others} but they fall in different FSDP groups "
                f"{sorted(spanned)}; wrap a module holding all of them, or leave them to the root"
            )


# --- application --------------------------------------------------------------------------------


def placement(text: str) -> Any:
    """A DTensor placement from its plan spelling: ``"R"``, ``"P"`` or ``"S(d)"``."""
    from torch.distributed.tensor import Partial, Replicate, Shard

    if text == "R":
        return Replicate()
    if text == "P":
        return Partial()
    return Shard(int(text[2:-1]))


def _placements(values: Iterable[str] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(placement(v) for v in values)


def tp_style(tp: TensorParallel) -> Any:
    """The ``torch.distributed.tensor.parallel`` style a `TensorParallel` names."""
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    inputs, outputs = _placements(tp.input_layouts), _placements(tp.output_layouts)
    if tp.style in ("colwise", "rowwise"):
        cls = ColwiseParallel if tp.style == "colwise" else RowwiseParallel
        return cls(
            input_layouts=inputs[0] if inputs else None,
            output_layouts=outputs[0] if outputs else None,
            use_local_output=tp.use_local_output,
        )
    if tp.style == "sequence":
        dim = inputs[0].dim if inputs else 1
        return SequenceParallel(sequence_dim=dim, use_local_output=tp.use_local_output)
    if tp.style == "prepare_input":
        kw = tp.input_kwarg_layouts or {}
        want = tp.desired_input_kwarg_layouts or {}
        return PrepareModuleInput(
            input_layouts=inputs,
            desired_input_layouts=_placements(tp.desired_input_layouts),
            input_kwarg_layouts={k: placement(v) for k, v in kw.items()} or None,
            desired_input_kwarg_layouts={k: placement(v) for k, v in want.items()} or None,
            use_local_output=tp.use_local_output,
        )
    return PrepareModuleOutput(
        output_layouts=outputs or (),
        desired_output_layouts=_placements(tp.desired_output_layouts) or (),
        use_local_output=tp.use_local_output,
    )


def _meta_copy(model: nn.Module) -> nn.Module:
    """A deep copy of ``model`` whose parameters and buffers live on ``meta`` (no data copied)."""
    memo: dict[int, Any] = {}
    for p in model.parameters():
        memo[id(p)] = nn.Parameter(torch.empty_like(p, device="meta"), p.requires_grad)
    for b in model.buffers():
        memo[id(b)] = torch.empty_like(b, device="meta")
    return copy.deepcopy(model, memo)


def _apply(checked: CheckedPlan, model: nn.Module, mesh: Any, *, src_data_rank: int | None) -> Any:
    if checked.plan.pipeline is None:
        return _apply_parts(checked, model, mesh, src_data_rank=src_data_rank)
    from rewrite.plans.pipeline import build_pipeline

    def apply_stage(stage: nn.Module, held: tuple[str, ...]) -> None:
        def inside(name: str) -> bool:
            return any(name == u or name.startswith(u + ".") for u in held)

        part = replace(
            checked,
            targets={n: t for n, t in checked.targets.items() if inside(n)},
            conv1d=tuple(n for n in checked.conv1d if inside(n)),
            fused=tuple(n for n in checked.fused if inside(n)),
        )
        _apply_parts(part, stage, mesh, src_data_rank=src_data_rank)

    return build_pipeline(checked.plan, model, mesh, apply_stage)


def _apply_parts(
    checked: CheckedPlan, model: nn.Module, mesh: Any, *, src_data_rank: int | None
) -> nn.Module:
    plan = checked.plan
    _rewrite_modules(checked, model)
    styles = {n: tp_style(mp.tp) for n, mp in checked.targets.items() if mp.tp is not None}
    if styles:
        from torch.distributed.tensor.parallel import parallelize_module

        parallelize_module(model, mesh[plan.tp_axis], styles, src_data_rank=src_data_rank)
        if not plan.fsdp_axes and not plan.replicate_axes:
            _reduce_partial_grads(model)
    for name, mp in checked.targets.items():
        if mp.checkpoint != "none":
            apply_checkpoint(model.get_submodule(name), mp.checkpoint)
    _data_parallel(checked, model, mesh)
    return model


def _reduce_partial_grads(model: nn.Module) -> None:
    """Reduce each replicated parameter's partial gradient once, as it is accumulated.

    A parameter replicated along the tensor-parallel axis whose activations are sharded (a
    sequence-parallel norm) gets a partial gradient: each rank's sum over its own positions.
    FSDP and ``replicate`` reduce it with the rest; without them, every optimizer op that reads
    the gradient would all-reduce it again. One all-reduce per such parameter, in backward.
    """
    from torch.distributed.tensor import DTensor, Partial

    def reduce(param: Any) -> None:
        grad = param.grad
        if isinstance(grad, DTensor) and any(isinstance(p, Partial) for p in grad.placements):
            param.grad = grad.redistribute(param.device_mesh, param.placements)

    for param in model.parameters():
        if isinstance(param, DTensor) and not any(p.is_shard() for p in param.placements):
            param.register_post_accumulate_grad_hook(reduce)


def _rewrite_modules(checked: CheckedPlan, model: nn.Module) -> None:
    layouts = arch.record_layouts(model) if checked.conv1d or checked.fused else {}
    for fqn in checked.conv1d:
        model.set_submodule(fqn, arch.linear_from_conv1d(model.get_submodule(fqn)))
        layouts.setdefault(f"{fqn}.weight", arch.ParamLayout()).transposed = True
    for unit in checked.fused:
        module = model.get_submodule(unit)
        spec = arch.ATTENTION[type(module).__name__]
        assert spec.fused is not None
        spec.fused(module, checked.tp_degree, layouts, f"{unit}." if unit else "")


def _data_parallel(checked: CheckedPlan, model: nn.Module, mesh: Any) -> None:
    plan = checked.plan
    if not plan.fsdp_axes and not plan.replicate_axes:
        return
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    policy = MixedPrecisionPolicy()
    if plan.precision == "bf16":
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if not plan.fsdp_axes:
        from torch.distributed._composable.replicate_with_fsdp import replicate

        replicate(model, mesh=_submesh(mesh, plan.replicate_axes), mp_policy=policy)
        return
    axes = (*plan.replicate_axes, *plan.fsdp_axes)
    dp_mesh = mesh[axes] if plan.replicate_axes else _submesh(mesh, plan.fsdp_axes)
    wrapped = [n for n, mp in checked.targets.items() if mp.fsdp and n]
    for name in sorted(wrapped, key=lambda n: -n.count(".")):
        again = None if checked.targets[name].reshard_after_forward else False
        fully_shard(
            model.get_submodule(name), mesh=dp_mesh, mp_policy=policy, reshard_after_forward=again
        )
    root = checked.targets.get("")
    again = None if root is None or root.reshard_after_forward else False
    fully_shard(model, mesh=dp_mesh, mp_policy=policy, reshard_after_forward=again)


def _submesh(mesh: Any, axes: tuple[str, ...]) -> Any:
    sub = mesh[axes if len(axes) > 1 else axes[0]]
    return sub._flatten("_".join(axes)) if len(axes) > 1 else sub
