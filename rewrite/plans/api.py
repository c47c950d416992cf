"""The planner's entry points: `search` and `expert` return `ParallelPlan` objects.

Both take the user's model and its global batch, cut the model into its block and the rest
(`rewrite.plans.layout`), cost strategies with the training-step model (`rewrite.plans.step`)
on a device profile, and write the chosen strategy as a plan keyed by the model's module names
(`rewrite.plans.convert`). A plan's ``cost`` holds ``step_time`` (seconds), ``tokens_per_second``
(per device) and ``peak_memory`` (bytes, the maximum over devices) and the breakdowns; its
``collectives`` the modeled collectives per rank in one step, by kind.
"""

from __future__ import annotations

import math
import platform
import weakref
from collections.abc import Mapping
from typing import Any

from rewrite.devices import DeviceProfile, load_device
from rewrite.errors import PlanError
from rewrite.plans.convert import SEQUENCE_PARALLEL, to_plan
from rewrite.plans.experts import STYLES, expert_strategy
from rewrite.plans.graphcost import CHECKPOINT_MODES
from rewrite.plans.layout import ModelLayout, layout_of
from rewrite.plans.plan import ParallelPlan
from rewrite.plans.plan_search import search_strategy
from rewrite.plans.step import step_cost
from rewrite.plans.strategy import Strategy

__all__ = ["expert", "layout_for", "search"]

_LAYOUTS: weakref.WeakKeyDictionary[Any, dict[Any, ModelLayout]] = weakref.WeakKeyDictionary()
_NUMERICS = ("precision", "float8", "compile", "async_tp")


def layout_for(model: Any, example_inputs: Any) -> ModelLayout:
    """`layout_of`, cached per model and input shape (the model is held weakly)."""
    args = example_inputs if isinstance(example_inputs, tuple) else (example_inputs,)
    key = tuple((tuple(a.shape), str(a.dtype)) for a in args if hasattr(a, "shape"))
    per = _LAYOUTS.setdefault(model, {})
    if key not in per:
        per[key] = layout_of(model, args)
    return per[key]


def _numerics(numerics: Mapping[str, Any]) -> dict[str, Any]:
    bad = [k for k in numerics if k not in _NUMERICS]
    if bad:
        raise PlanError(f"Unknown options {bad}; the numerics options are {_NUMERICS}.")
    return dict(numerics)


def _check_training(training: bool) -> None:
    if not training:
        raise PlanError(
            "Only training steps are modeled (forward, backward, gradient synchronisation, "
            "AdamW); pass training=True."
        )


def _devices(mesh: int | Mapping[str, int]) -> int:
    if isinstance(mesh, bool) or not isinstance(mesh, int | Mapping):
        raise PlanError(f"mesh must be a device count or a dict of named axes, got {mesh!r}.")
    n = mesh if isinstance(mesh, int) else math.prod(mesh.values())
    if n < 1:
        raise PlanError(f"mesh must hold at least one device, got {mesh!r}.")
    return n


def _named(mesh: Mapping[str, int], style: str, st: Strategy) -> Strategy:
    """``st`` moved onto the user's named axes: ``tp`` and ``pp`` keep their names' roles."""
    roles = {"tp": st.tp, "pp": st.pp}
    if any(a in mesh for a in ("tp", "pp")) or style in ("ddp", "fsdp"):
        dp = tuple(a for a in mesh if a not in ("tp", "pp"))
        extra = {k: k for k, v in roles.items() if v and k in mesh}
        if style == "ddp":
            return st.with_(mesh=dict(mesh), replicate=dp, fsdp=(), **extra)
        return st.with_(mesh=dict(mesh), fsdp=dp, replicate=(), **extra)
    return st


def _plan(
    layout: ModelLayout, st: Strategy, p: DeviceProfile, name: str, extra: Mapping[str, Any]
) -> ParallelPlan:
    c = step_cost(layout, st, p)
    return to_plan(
        layout, st, c.as_dict(), c.collectives, name,
        {"device": p.name, "python": platform.python_version(), **extra},
    )  # fmt: skip


def expert(
    model: Any,
    example_inputs: Any,
    mesh: int | Mapping[str, int] = 8,
    style: str = "fsdp",
    checkpointing: str = "none",
    device: str | DeviceProfile = "h100-gt",
    training: bool = True,
    sequence_parallel: str = "auto",
    microbatches: int | None = None,
    **numerics: Any,
) -> ParallelPlan:
    """Cost an expert plan (`rewrite.plans.experts`).

    Args:
        model: A ``torch.nn.Module`` (parameters may be on ``meta``).
        example_inputs: The global batch (token ids ``batch x seq`` or images).
        mesh: A device count, or named axes such as ``{"dp": 2, "tp": 2}`` (an axis named
            ``tp`` carries tensor parallelism, ``pp`` the pipeline, the others data).
        style: One of ``"ddp"``, ``"fsdp"``, ``"tp"``, ``"fsdp+tp"``, ``"fsdp+tp+pp"``.
        checkpointing: ``"none"``, ``"selective"`` or ``"full"`` for every block.
        device: Device profile (default ``h100-gt``).
        training: Must be True (training steps are modeled).
        sequence_parallel: ``"auto"`` (where DTensor can express it on the model), ``"always"``
            (also on a model that derives positions from its embedding's output, as Hugging
            Face's do: the plan lists that problem; torchtitan's Llama has none), ``"never"``.
        microbatches: Microbatches per step (gradient accumulation, or the pipeline's); default
            the style's (1, or as many as the pipeline needs).
        **numerics: ``precision`` (``"bf16"``/``"fp32"``), ``float8``, ``compile``, ``async_tp``.

    Raises:
        PlanError: On an unknown style or checkpointing, a mesh the style cannot use, or
            microbatches that do not split the batch.
    """
    _check_training(training)
    if checkpointing not in CHECKPOINT_MODES:
        raise PlanError(f"checkpointing must be one of {CHECKPOINT_MODES}, got {checkpointing!r}.")
    if style not in STYLES:
        raise PlanError(f"style must be one of {STYLES}, got {style!r}.")
    n = _devices(mesh)
    p = load_device(device)
    layout = layout_for(model, example_inputs)
    nums = _numerics(numerics)
    pp = mesh.get("pp") if isinstance(mesh, Mapping) else None
    _check_sp(sequence_parallel)
    st = expert_strategy(layout, n, style, checkpointing, p.links()[0], pp=pp,
                         sequence_parallel=sequence_parallel, **nums)  # fmt: skip
    if isinstance(mesh, Mapping):
        st = _named(mesh, style, st)
    if microbatches is not None:
        if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
            raise PlanError(f"microbatches must be an int >= 1, got {microbatches!r}.")
        st = st.with_(microbatches=microbatches)
    return _plan(layout, st, p, f"{style}/{checkpointing}", {"style": style})


def _check_sp(mode: str) -> None:
    if mode not in SEQUENCE_PARALLEL:
        raise PlanError(f"sequence_parallel must be one of {SEQUENCE_PARALLEL}, got {mode!r}.")


def _baselines(
    layout: ModelLayout, n: int, p: DeviceProfile, nums: Mapping[str, Any], sp: str = "auto"
) -> dict[str, ParallelPlan]:
    out = {}
    for style in STYLES:
        scheds = ("1F1B", "interleaved_1F1B") if style == "fsdp+tp+pp" else ("1F1B",)
        for sched in scheds:
            for ck in CHECKPOINT_MODES:
                try:
                    st = expert_strategy(layout, n, style, ck, p.links()[0], sched,
                                         sequence_parallel=sp, **nums)  # fmt: skip
                    label = style + ("/interleaved" if sched != "1F1B" else "") + f"/{ck}"
                    out[label] = _plan(layout, st, p, label, {"style": style})
                except PlanError:
                    continue
    return out


def search(
    model: Any,
    example_inputs: Any,
    mesh: int | Mapping[str, int] = 8,
    device: str | DeviceProfile = "h100-gt",
    training: bool = True,
    memory_cap: float | None = None,
    priors: Mapping[str, float] | None = None,
    time_budget: float = 60.0,
    seed: int = 0,
    sequence_parallel: str = "auto",
    **numerics: Any,
) -> ParallelPlan:
    """Search a plan from replicated data parallelism (`rewrite.plans.search`).

    Args:
        model: A ``torch.nn.Module`` (parameters may be on ``meta``).
        example_inputs: The global batch (token ids ``batch x seq`` or images).
        mesh: A device count (the search picks how to factor it) or named axes.
        device: Device profile (default ``h100-gt``).
        training: Must be True (training steps are modeled).
        memory_cap: Bytes per device (default the profile's memory).
        priors: Priors of the sharding actions (`rewrite.plans.actions.DEFAULT_PRIORS`).
        time_budget: Seconds of search.
        seed: Seed of the search's sampling.
        sequence_parallel: As for `expert` (the baselines use the same).
        **numerics: ``precision``, ``float8``, ``compile``, ``async_tp`` (every plan, the
            baselines included, uses them).

    Returns:
        The best plan under the cap, its ``baselines`` every expert plan costed the same way,
        its ``provenance`` the search's steps and seconds. When nothing fits the cap, the
        plan's ``problems`` say so and its cost is the search's least-bad state.

    Raises:
        PlanError: On a bad mesh, priors or options.
    """
    _check_training(training)
    n = _devices(mesh)
    p = load_device(device)
    layout = layout_for(model, example_inputs)
    nums = _numerics(numerics)
    cap = float(memory_cap or p.memory_capacity)
    _check_sp(sequence_parallel)
    out = search_strategy(layout, mesh, p, cap, priors, time_budget=time_budget, seed=seed,
                          numerics=nums, sequence_parallel=sequence_parallel)  # fmt: skip
    baselines = _baselines(layout, n, p, nums, sequence_parallel) if isinstance(mesh, int) else {}
    info = {"search_steps": out.steps, "search_seconds": out.seconds, "search_rounds": out.rounds,
            "memory_cap": cap, "seed": seed}  # fmt: skip
    if out.strategy is None:
        plan = ParallelPlan(
            mesh={"dp": n} if isinstance(mesh, int) else dict(mesh),
            name="search",
            provenance={"device": p.name, **info},
        )
        return _replace(plan, baselines, {"plan": f"no strategy found fits {cap:.4g} bytes."})
    plan = _plan(layout, out.strategy, p, "search", info)
    return _replace(plan, baselines, {})


def _replace(
    plan: ParallelPlan, baselines: dict[str, ParallelPlan], problems: dict[str, str]
) -> ParallelPlan:
    import dataclasses

    return dataclasses.replace(plan, baselines=baselines, problems={**plan.problems, **problems})
