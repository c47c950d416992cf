"""The searches, the expert plans and the entry points."""

from __future__ import annotations

from pathlib import Path

import pytest

from rewrite.errors import PlanError
from rewrite.plans import expert, load, search
from rewrite.plans.experts import megatron_layout
from rewrite.plans.graphcost import Options
from rewrite.plans.plan_search import search_layout, search_strategy


@pytest.fixture(scope="module")
def llama_wide():
    """A 2-layer Llama wide enough (1024, sequence 1024) that compute outweighs latencies."""
    from rewrite import zoo
    from rewrite.plans.api import layout_for

    zm = zoo.model("llama-small", batch=8, seq_len=1024, hidden_size=1024, intermediate_size=4096,
                   num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=1024,
                   device="meta")  # fmt: skip
    return layout_for(zm.module, zm.args)


@pytest.mark.parametrize("t", [2, 8])
def test_the_block_search_finds_megatrons_pairing_from_replicated(llama_wide, t: int) -> None:
    found, evals = search_layout(llama_wide, t, 2, "h100-gt", Options(causal=True))
    assert dict(found.block) == dict(megatron_layout(llama_wide).block)
    assert evals > 10


def test_zero_priors_switch_actions_off(llama_wide) -> None:
    layout = llama_wide
    found, _ = search_layout(layout, 2, 2, "h100-gt", priors={"shard_weight_rows": 0.0})
    assert 1 not in found.block.values()  # no row-parallel weight without the action
    with pytest.raises(PlanError, match="Unknown sharding action"):
        search_layout(layout, 2, 2, "h100-gt", priors={"shard_everything": 1.0})


def test_the_plan_search_beats_or_matches_every_expert_under_the_cap(llama_small) -> None:
    zm, _ = llama_small
    cap = 2e6  # a small model with a cap that binds
    plan = search(zm.module, zm.args, mesh=4, memory_cap=cap, time_budget=20, compile=True)
    assert plan.cost["peak_memory"] <= cap and plan.expressible
    feasible = [b.cost["tokens_per_second"] for b in plan.baselines.values()
                if b.cost["peak_memory"] <= cap and b.expressible]  # fmt: skip
    assert feasible and plan.cost["tokens_per_second"] >= max(feasible) * (1 - 1e-9)
    assert plan.provenance["search_steps"] > 0


def test_the_plan_search_repeats_for_a_seed(llama_small) -> None:
    layout = llama_small[1]
    runs = [search_strategy(layout, 4, "h100-gt", 3e6, moves_per_state=6, seed=1, time_budget=10)
            for _ in range(2)]  # fmt: skip
    assert runs[0].strategy == runs[1].strategy and runs[0].history == runs[1].history


def test_expert_plans_name_the_models_modules(llama_small, tmp_path: Path) -> None:
    zm, _ = llama_small
    plan = expert(
        zm.module, zm.args, mesh={"dp": 2, "tp": 2}, style="fsdp+tp", checkpointing="full"
    )
    assert plan.tp_axis == "tp" and plan.fsdp_axes == ("dp",)
    assert plan.modules["model.layers.*.self_attn.q_proj"].tp.style == "colwise"
    assert plan.modules["model.layers.*.mlp.down_proj"].tp.style == "rowwise"
    assert plan.modules["model.layers.*"].checkpoint == "full" and plan.modules[""].fsdp
    assert plan.collectives == {"all_gather": 5, "all_reduce": 10, "reduce_scatter": 3}
    assert load(plan.save(tmp_path / "plan.json")) == plan


def test_what_dtensor_cannot_express_is_flagged(gpt2_small) -> None:
    import dataclasses

    from rewrite.plans.api import layout_for
    from rewrite.plans.convert import SP_UNSAFE, dtensor_problems
    from rewrite.plans.experts import megatron_layout
    from rewrite.plans.strategy import Strategy

    zm, _ = gpt2_small
    assert expert(zm.module, zm.args, mesh=2, style="tp").expressible  # Conv1D converted
    layout = layout_for(zm.module, zm.args)
    assert layout.regrouped == frozenset({"attn.c_attn"})
    sp = Strategy({"tp": 2}, tp="tp", layout=megatron_layout(layout, sequence_parallel=True))
    assert SP_UNSAFE in dtensor_problems(layout, sp)  # positions from the embedding's output
    st = Strategy({"tp": 2}, tp="tp", layout=megatron_layout(layout, sequence_parallel=False))
    assert dtensor_problems(layout, st) == {}
    unknown = dataclasses.replace(layout, regrouped=frozenset())  # apply cannot regroup it
    assert any("fused" in why for why in dtensor_problems(unknown, st).values())


@pytest.mark.parametrize(
    ("kwargs", "phrase"),
    [
        ({"style": "zero"}, "style must be one of"),
        ({"checkpointing": "half"}, "checkpointing must be one of"),
        ({"training": False}, "training=True"),
        ({"mesh": 0}, "at least one device"),
        ({"fp16": True}, "Unknown options"),
    ],
)
def test_bad_arguments_are_refused(llama_small, kwargs: dict, phrase: str) -> None:
    zm, _ = llama_small
    with pytest.raises(PlanError, match=phrase):
        expert(zm.module, zm.args, **kwargs)
