"""`rewrite.plans.apply` in one process: checks refuse bad plans without touching the model, the
styles are built from the plan's spelling, and the module rewrites are exact.

The distributed runs (outputs, gradients, parameters and collectives against one process) are in
`test_apply_distributed.py`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import torch
from torch import nn

from rewrite.errors import PlanError
from rewrite.plans import ModulePlan, ParallelPlan, PipelineSpec, TensorParallel, load
from rewrite.plans import modules as arch
from rewrite.plans.apply import check_plan, placement, tp_style
from rewrite.plans.counting import collective_kind
from rewrite.plans.handwritten import STYLES, handwritten_plan, with_pipeline
from rewrite.plans.harness import build_workload
from rewrite.plans.pipeline import cut_stage, units


@dataclass
class FakeMesh:
    """What `check_plan` reads of a device mesh: its axis names and sizes."""

    mesh_dim_names: tuple[str, ...]
    shape: tuple[int, ...]


def mesh_for(plan: ParallelPlan) -> FakeMesh:
    return FakeMesh(tuple(plan.mesh), tuple(plan.mesh.values()))


@pytest.fixture(scope="module")
def models() -> dict[str, nn.Module]:
    return {name: build_workload(name).model for name in ("llama", "gpt2", "bert", "gpt_neox")}


def fingerprint(model: nn.Module) -> tuple[object, ...]:
    return (
        [(n, p.detach().clone()) for n, p in model.named_parameters()],
        [type(m).__name__ for m in model.modules()],
        sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules()),
    )


def same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    params_a, params_b = a[0], b[0]
    assert isinstance(params_a, list) and isinstance(params_b, list)
    return a[1:] == b[1:] and all(
        na == nb and torch.equal(pa, pb) for (na, pa), (nb, pb) in zip(params_a, params_b)
    )


def refused(plan: ParallelPlan, model: nn.Module, mesh: object = None) -> str:
    before = fingerprint(model)
    with pytest.raises(PlanError) as info:
        check_plan(plan, model, mesh if mesh is not None else mesh_for(plan))
    assert same(before, fingerprint(model))
    return str(info.value)


# --- the data model's additions -------------------------------------------------------------------


def test_kwarg_and_output_layouts_round_trip_and_old_documents_still_load(tmp_path: Path) -> None:
    tp = TensorParallel(
        "prepare_input",
        input_kwarg_layouts={"hidden_states": "S(1)"},
        desired_input_kwarg_layouts={"hidden_states": "R"},
    )
    out = TensorParallel("prepare_output", output_layouts=("R",), desired_output_layouts=("S(1)",))
    plan = ParallelPlan(
        mesh={"tp": 2}, tp_axis="tp", modules={"a": ModulePlan(tp=tp), "b": ModulePlan(tp=out)}
    )
    assert load(plan.save(tmp_path / "p.json")) == plan
    doc = plan.to_dict()
    old = json.loads(json.dumps(doc))
    old["modules"] = {"c": {"tp": {"style": "colwise"}, "fsdp": False, "checkpoint": "none"}}
    assert ParallelPlan.from_dict(old).modules["c"].tp == TensorParallel("colwise")
    assert "input_kwarg_layouts" not in TensorParallel("colwise").to_dict()


@pytest.mark.parametrize(
    "bad",
    [{"hidden_states": "X"}, {"hidden_states": ["R"]}, ["R"]],
)
def test_kwarg_layouts_must_be_placements_by_name(bad: object) -> None:
    with pytest.raises(PlanError, match="input_kwarg_layouts"):
        TensorParallel("prepare_input", input_kwarg_layouts=bad)  # type: ignore[arg-type]


def test_placements_and_styles_are_built_from_the_plan_spelling() -> None:
    from torch.distributed.tensor import Partial, Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        PrepareModuleOutput,
        RowwiseParallel,
        SequenceParallel,
    )

    assert placement("R") == Replicate() and placement("P") == Partial()
    assert placement("S(1)") == Shard(1) and placement("S(-1)") == Shard(-1)
    col = tp_style(TensorParallel("colwise", input_layouts=("S(1)",), output_layouts=("R",)))
    assert isinstance(col, ColwiseParallel) and col.input_layouts == (Shard(1),)
    assert col.output_layouts == (Replicate(),) and col.use_local_output
    row = tp_style(TensorParallel("rowwise", output_layouts=("S(1)",), use_local_output=False))
    assert isinstance(row, RowwiseParallel) and not row.use_local_output
    seq = tp_style(TensorParallel("sequence", input_layouts=("S(0)",)))
    assert isinstance(seq, SequenceParallel) and seq.sequence_sharding == (Shard(0),)
    pin = tp_style(
        TensorParallel(
            "prepare_input",
            input_kwarg_layouts={"hidden_states": "S(1)"},
            desired_input_kwarg_layouts={"hidden_states": "R"},
        )
    )
    assert isinstance(pin, PrepareModuleInput)
    assert pin.desired_input_kwarg_layouts == {"hidden_states": Replicate()}
    pout = tp_style(
        TensorParallel("prepare_output", output_layouts=("R",), desired_output_layouts=("S(1)",))
    )
    assert isinstance(pout, PrepareModuleOutput) and pout.desired_output_layouts == (Shard(1),)


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("c10d._allgather_base_", "all_gather"),
        ("c10d_functional.all_gather_into_tensor", "all_gather"),
        ("c10d._reduce_scatter_base_", "reduce_scatter"),
        ("_c10d_functional.reduce_scatter_tensor", "reduce_scatter"),
        ("c10d.allreduce_", "all_reduce"),
        ("c10d_functional.all_reduce", "all_reduce"),
        ("_dtensor.shard_dim_alltoall", "all_to_all"),
        ("isend", "send_recv"),
        ("c10d.barrier", "c10d.barrier"),
    ],
)
def test_collective_kinds_use_the_plan_vocabulary(name: str, kind: str) -> None:
    assert collective_kind(name) == kind


# --- module rewrites ------------------------------------------------------------------------------


def test_conv1d_becomes_an_exactly_equal_linear(models: dict[str, nn.Module]) -> None:
    conv = models["gpt2"].get_submodule("transformer.h.0.mlp.c_fc")
    assert arch.is_conv1d(conv)
    linear = arch.linear_from_conv1d(conv)
    x = torch.randn(3, 5, int(conv.nx), generator=torch.Generator().manual_seed(0))
    a, b = conv(x), linear(x)
    torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    a.square().sum().backward()
    b.square().sum().backward()
    torch.testing.assert_close(conv.weight.grad, linear.weight.grad.t(), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(conv.bias.grad, linear.bias.grad, rtol=1e-6, atol=1e-6)
    conv.zero_grad()


@pytest.mark.parametrize("degree", [1, 2, 4])
def test_fused_qkv_regrouping_puts_each_ranks_heads_together_and_maps_back(degree: int) -> None:
    heads, head_dim = 4, 3
    width = heads * head_dim
    linear = nn.Linear(5, 3 * width)
    before_w, before_b = linear.weight.detach().clone(), linear.bias.detach().clone()
    layouts: dict[str, arch.ParamLayout] = {}
    arch.regroup_fused_qkv(linear, parts=3, degree=degree, layouts=layouts, prefix="attn")
    rows = linear.weight.shape[0] // degree
    for r in range(degree):  # rank r's contiguous block: its heads' q rows, then k, then v
        block = linear.weight[r * rows : (r + 1) * rows]
        for part in range(3):
            want = before_w[
                part * width + r * width // degree : part * width + (r + 1) * width // degree
            ]
            assert torch.equal(block[part * width // degree : (part + 1) * width // degree], want)
    assert torch.equal(layouts["attn.weight"].to_original(linear.weight.detach()), before_w)
    assert torch.equal(layouts["attn.bias"].to_original(linear.bias.detach()), before_b)


def test_original_layout_undoes_transpose_then_regrouping() -> None:
    model = nn.Module()
    layouts = arch.record_layouts(model)
    layouts["w"] = arch.ParamLayout(row_perm=[1, 0], transposed=True)
    original = torch.arange(6.0).reshape(3, 2)  # a Conv1D weight: nx x nf
    rewritten = original.t()[[1, 0]]
    assert torch.equal(arch.original_layout(model, "w", rewritten), original)
    assert arch.original_layout(model, "other", rewritten) is rewritten


# --- what check_plan refuses ----------------------------------------------------------------------


def test_every_handwritten_plan_checks_clean(models: dict[str, nn.Module]) -> None:
    for name, model in models.items():
        for style in STYLES:
            mesh = (2, 2) if style in ("hsdp", "fsdp+tp", "fsdp+tp+sp") else 2
            plan = handwritten_plan(model, style, mesh, checkpointing="selective")
            checked = check_plan(plan, model, mesh_for(plan))
            assert checked.targets, (name, style)
            assert checked.conv1d == () or name == "gpt2"
            assert checked.fused == (() if name != "gpt2" or "tp" not in style else checked.fused)


def test_wildcards_expand_to_every_matching_module(models: dict[str, nn.Module]) -> None:
    plan = ParallelPlan(
        mesh={"tp": 2},
        tp_axis="tp",
        modules={
            "model.layers.*.self_attn.q_proj": ModulePlan(tp=TensorParallel("colwise")),
            "model.layers.*.self_attn.k_proj": ModulePlan(tp=TensorParallel("colwise")),
            "model.layers.*.self_attn.v_proj": ModulePlan(tp=TensorParallel("colwise")),
            "model.layers.*.self_attn.o_proj": ModulePlan(tp=TensorParallel("rowwise")),
            "model.layers.*": ModulePlan(checkpoint="full"),
            "model.layers.1": ModulePlan(checkpoint="full"),  # agrees: merged
        },
    )
    checked = check_plan(plan, models["llama"], mesh_for(plan))
    assert [n for n, t in checked.targets.items() if t.tp is not None] == [
        f"model.layers.{i}.self_attn.{p}"
        for i in (0, 1)
        for p in ("q_proj", "k_proj", "v_proj", "o_proj")
    ]
    assert [n for n, t in checked.targets.items() if t.checkpoint == "full"] == [
        "model.layers.0",
        "model.layers.1",
    ]


def test_the_planners_problems_and_context_parallelism_are_refused(
    models: dict[str, nn.Module],
) -> None:
    plan = handwritten_plan(models["llama"], "fsdp", 2)
    flagged = replace(plan, problems={"block:%48": "sdpa needs its input moved inside a module"})
    assert "planner found DTensor cannot express 'block:%48'" in refused(flagged, models["llama"])
    cp = replace(plan, mesh={"dp": 2, "cp": 1}, cp_axis="cp")
    assert "context_parallel" in refused(cp, models["llama"])


def test_reshard_after_forward_reaches_every_matching_module(models: dict[str, nn.Module]) -> None:
    plan = handwritten_plan(models["llama"], "fsdp", 2)
    keep = {k: replace(m, reshard_after_forward=False) for k, m in plan.modules.items()}
    checked = check_plan(replace(plan, modules=keep), models["llama"], mesh_for(plan))
    fsdp = [t for t in checked.targets.values() if t.fsdp]
    assert fsdp and not any(t.reshard_after_forward for t in fsdp)


def test_a_mesh_that_differs_from_the_plans_is_refused(models: dict[str, nn.Module]) -> None:
    plan = handwritten_plan(models["llama"], "fsdp+tp", (2, 2))
    msg = refused(plan, models["llama"], FakeMesh(("tp", "dp"), (2, 2)))
    assert "mesh_dim_names=('dp', 'tp')" in msg
    msg = refused(plan, models["llama"], FakeMesh(("dp", "tp"), (4, 1)))
    assert "sizes (4, 1)" in msg


def test_all_problems_are_reported_at_once_and_the_model_is_left_alone(
    models: dict[str, nn.Module],
) -> None:
    model = models["llama"]
    plan = handwritten_plan(model, "tp", 4)  # 2 key/value heads: not divisible by 4
    plan = replace(
        plan,
        modules={
            **plan.modules,
            "model.layers.9": ModulePlan(fsdp=True),  # no such module; fsdp without fsdp axes
            "model.norm": ModulePlan(tp=TensorParallel("colwise")),  # an RMSNorm
        },
    )
    msg = refused(plan, model)
    assert msg.count("\n- ") >= 4
    assert "'model.layers.9' matches no module" in msg
    assert "{'num_key_value_heads': 2} are not divisible by the tensor-parallel degree 4" in msg
    assert "nn.Linear and nn.Embedding only, but this is a LlamaRMSNorm" in msg


def test_attention_must_shard_all_projections_together(models: dict[str, nn.Module]) -> None:
    plan = ParallelPlan(
        mesh={"tp": 2},
        tp_axis="tp",
        modules={"model.layers.0.self_attn.q_proj": ModulePlan(tp=TensorParallel("colwise"))},
    )
    msg = refused(plan, models["llama"])
    assert "must shard ['q_proj', 'k_proj', 'v_proj'] column-wise" in msg


def test_tp_inside_an_unknown_attention_class_is_refused() -> None:
    class MyAttention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = nn.Linear(4, 4)

    model = nn.Sequential(MyAttention())
    plan = ParallelPlan(
        mesh={"tp": 2}, tp_axis="tp", modules={"0.q": ModulePlan(tp=TensorParallel("colwise"))}
    )
    assert "inside attention class MyAttention" in refused(plan, model)


def test_tensor_parallelism_of_tied_weights_is_refused(models: dict[str, nn.Module]) -> None:
    plan = ParallelPlan(
        mesh={"tp": 2}, tp_axis="tp", modules={"lm_head": ModulePlan(tp=TensorParallel("colwise"))}
    )
    msg = refused(plan, models["gpt2"])
    assert "tied to [['transformer.wte.weight']]" in msg


@pytest.mark.parametrize(
    ("plan", "needle"),
    [
        (
            ParallelPlan(
                mesh={"dp": 2},
                fsdp_axes=("dp",),
                modules={
                    "transformer.h.0": ModulePlan(checkpoint="full"),
                    "transformer.h.0.attn": ModulePlan(checkpoint="selective"),
                },
            ),
            "checkpointed inside checkpointed 'transformer.h.0'",
        ),
        (
            ParallelPlan(mesh={"dp": 2, "tp": 2}, tp_axis="tp"),
            "mesh axes ['dp'] have no role",
        ),
        (
            ParallelPlan(
                mesh={"pp": 2},
                pipeline=PipelineSpec("pp", (("transformer.h.0",), ("transformer.h.1",))),
            ),
            "stages can be cut only from ['GPTNeoXForCausalLM', 'LlamaForCausalLM']",
        ),
        (
            ParallelPlan(
                mesh={"tp": 2},
                modules={"transformer.h.0.mlp.c_fc": ModulePlan(tp=TensorParallel("colwise"))},
            ),
            "names no tp_axis",
        ),
        (
            ParallelPlan(mesh={"dp": 2, "rep": 2}, fsdp_axes=("dp",), replicate_axes=("rep",)),
            "replicate axis 'rep' outside (before) the FSDP axis",
        ),
        (
            ParallelPlan(
                mesh={"tp": 2},
                tp_axis="tp",
                modules={
                    "transformer.h.*.mlp.c_fc": ModulePlan(tp=TensorParallel("colwise")),
                    "transformer.h.0.mlp.c_fc": ModulePlan(tp=TensorParallel("rowwise")),
                },
            ),
            "is given different styles",
        ),
        (
            ParallelPlan(
                mesh={"tp": 2},
                tp_axis="tp",
                modules={
                    "transformer.h.0.attn": ModulePlan(
                        tp=TensorParallel("prepare_input", input_layouts=("S(1)",))
                    ),
                },
            ),
            "needs one desired placement per input placement",
        ),
    ],
)
def test_plans_dtensor_cannot_express_are_refused(
    models: dict[str, nn.Module], plan: ParallelPlan, needle: str
) -> None:
    assert needle in refused(plan, models["gpt2"])


def test_tied_weights_split_across_fsdp_groups_are_refused(models: dict[str, nn.Module]) -> None:
    plan = ParallelPlan(
        mesh={"dp": 2}, fsdp_axes=("dp",), modules={"lm_head": ModulePlan(fsdp=True)}
    )
    assert "in different FSDP groups" in refused(plan, models["gpt2"])


def test_handwritten_plans_refuse_what_they_cannot_write(models: dict[str, nn.Module]) -> None:
    with pytest.raises(PlanError, match="No hand-written plan for T5"):
        handwritten_plan(type("T5EncoderModel", (nn.Module,), {})(), "fsdp", 2)
    with pytest.raises(PlanError, match="style must be one of"):
        handwritten_plan(models["llama"], "zero3", 2)
    with pytest.raises(PlanError, match="checkpointing lists 1 blocks"):
        handwritten_plan(models["llama"], "fsdp", 2, checkpointing=["full"])
    with pytest.raises(PlanError, match="tp_blocks is for plans without sequence parallelism"):
        handwritten_plan(models["llama"], "tp+sp", 2, tp_blocks=[0])


# --- pipelines ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["llama", "gpt_neox"])
def test_stages_chained_compute_exactly_the_models_forward(name: str) -> None:
    work = build_workload(name)
    model = work.model
    with torch.no_grad():
        want = model(work.inputs, use_cache=False).logits
        held = units(model)
        cuts = [(held[0],), tuple(held[1:3]), tuple(held[3:])]
        stages = [cut_stage(model, c, copy_model=True) for c in cuts]
        x = work.inputs
        for stage in stages:
            x = stage(x)
    assert torch.equal(x, want)
    assert sum(p.numel() for s in stages for p in s.parameters()) == sum(
        p.numel() for p in model.parameters()
    )


def test_pipeline_cuts_are_even_and_in_order(models: dict[str, nn.Module]) -> None:
    base = replace(handwritten_plan(models["llama"], "ddp", 1), mesh={}, replicate_axes=())
    plan = with_pipeline(base, models["llama"], 2, schedule="interleaved_1F1B", virtual_stages=2)
    assert plan.mesh == {"pp": 2} and plan.pipeline is not None
    assert [list(s) for s in plan.pipeline.stages] == [
        ["model.embed_tokens", "model.layers.0"],
        ["model.layers.1"],
        ["model.norm"],
        ["lm_head"],
    ]
    check_plan(plan, models["llama"], mesh_for(plan))
    with pytest.raises(PlanError, match="5 units cannot fill 6 stages"):
        with_pipeline(base, models["llama"], 3, virtual_stages=2)


def test_pipeline_plans_that_cannot_run_are_refused(models: dict[str, nn.Module]) -> None:
    llama = models["llama"]
    held = units(llama)
    two = (tuple(held[:2]), tuple(held[2:]))
    swapped = (tuple(held[2:]), tuple(held[:2]))
    cases = [
        (PipelineSpec("pp", two * 2, "1F1B"), "needs 2"),
        (PipelineSpec("pp", two, "interleaved_1F1B"), "interleaved_1F1B runs several stages"),
        (PipelineSpec("pp", swapped, "1F1B"), "each once, in this order"),
    ]
    for spec, needle in cases:
        assert needle in refused(ParallelPlan(mesh={"pp": 2}, pipeline=spec), llama)
    sp = handwritten_plan(llama, "tp+sp", 2)
    with_sp = replace(sp, mesh={"pp": 2, "tp": 2}, pipeline=PipelineSpec("pp", two))
    assert "sequence parallelism inside a pipeline plan" in refused(with_sp, llama)
    root = ParallelPlan(
        mesh={"pp": 2},
        pipeline=PipelineSpec("pp", two),
        modules={"model": ModulePlan(checkpoint="full")},
    )
    assert "lie outside the pipeline's units" in refused(root, llama)
