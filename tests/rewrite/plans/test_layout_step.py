"""The model layout and the training-step model: structure, invariants, measured counts."""

from __future__ import annotations

import pytest

from rewrite.errors import PlanError
from rewrite.plans.experts import expert_strategy
from rewrite.plans.step import step_cost
from rewrite.plans.strategy import Strategy


def test_layout_cuts_the_model_into_its_block_and_the_rest(llama_small) -> None:
    zm, layout = llama_small
    assert layout.blocks_path == "model.layers" and layout.n_blocks == 2
    assert layout.n_params == sum(p.numel() for p in zm.module.parameters())
    assert layout.batch == 4 and layout.seq == 16 and layout.causal
    assert layout.calls["self_attn"][1][0] == "hidden_states"  # called by keyword
    assert not layout.sequence_parallel_safe  # positions come from the embedding's length
    block, rest = layout.graphs_at(3, 40)
    assert block.input_types[0].shape == (3, 40, 64)
    assert rest.output_types[0].shape == (3, 40, 1000)


def test_bad_inputs_are_refused(llama_small) -> None:
    from rewrite.plans.layout import layout_of

    zm, _ = llama_small
    with pytest.raises(PlanError, match="token ids"):
        layout_of(zm.module, (zm.args[0].float(),))


def _cost(layout, **kw):
    return step_cost(layout, Strategy({"dp": 2}, fsdp=("dp",), **kw), "h100-gt")


def test_checkpointing_trades_memory_for_time(llama_small) -> None:
    layout = llama_small[1]
    none, sel, full = (_cost(layout, checkpoint=(m,)) for m in ("none", "selective", "full"))
    assert none.memory["activations"] > sel.memory["activations"] > full.memory["activations"]
    assert none.step_time < sel.step_time < full.step_time
    mixed = _cost(layout, checkpoint=("full", "none"))
    assert full.memory["activations"] < mixed.memory["activations"] < none.memory["activations"]


@pytest.fixture(scope="module")
def llama_four():
    """The small zoo Llama with 4 layers (pipelines need blocks to split)."""
    from rewrite import zoo
    from rewrite.plans.api import layout_for

    zm = zoo.model("llama-small", batch=4, num_hidden_layers=4)
    return layout_for(zm.module, zm.args)


def test_keeping_gathered_parameters_costs_memory_and_saves_a_gather(llama_four) -> None:
    layout = llama_four
    free, keep = _cost(layout), _cost(layout, reshard_after_forward=False)
    assert keep.memory["gathered"] > free.memory["gathered"]
    assert keep.collectives["all_gather"] < free.collectives["all_gather"]


def test_sharding_parameters_saves_memory(llama_small) -> None:
    layout = llama_small[1]
    ddp = step_cost(layout, Strategy({"dp": 2}, replicate=("dp",)), "h100-gt")
    fsdp = _cost(layout)
    assert fsdp.memory["states"] == pytest.approx(ddp.memory["states"] / 2)


def test_interleaving_shrinks_the_bubble(llama_four) -> None:
    layout = llama_four
    base = Strategy({"pp": 2, "dp": 2}, pp="pp", fsdp=("dp",), microbatches=2,
                    reshard_after_forward=False)  # fmt: skip
    one = step_cost(layout, base, "h100-gt")
    two = step_cost(layout, base.with_(schedule="interleaved_1F1B", virtual_stages=2), "h100-gt")
    assert two.time["bubble"] < one.time["bubble"]
    assert one.tokens_per_second == pytest.approx(layout.tokens / one.step_time / base.n_devices)


def test_a_batch_that_does_not_split_is_refused(llama_small) -> None:
    with pytest.raises(PlanError, match="split evenly"):
        step_cost(llama_small[1], Strategy({"dp": 8}, fsdp=("dp",)), "h100-gt")


# Collectives per rank in one forward+backward step, measured by `rewrite.plans.counting` under
# gloo (torchrun, 2 and 4 ranks, the small zoo Llama; the planner's plans applied by
# `rewrite.plans.apply`, tests/rewrite/plans/test_handback.py; docs/plans-apply.md's table for
# main's hand-written plans): FSDP2 keeps the root's parameters gathered for backward, its
# `replicate` broadcasts no buffers, and the planner's `prepare_input` makes one backward
# all-reduce serve each attention's (and MLP's) column-wise projections.
MEASURED = [
    ("tp", "none", 2, {"all_reduce": 8}),
    ("tp", "full", 2, {"all_reduce": 10}),
    ("fsdp", "none", 2, {"all_gather": 5, "reduce_scatter": 3}),
    ("fsdp", "selective", 2, {"all_gather": 5, "reduce_scatter": 3}),
    ("ddp", "none", 2, {"all_reduce": 1}),
    ("fsdp+tp", "none", 4, {"all_gather": 5, "all_reduce": 8, "reduce_scatter": 3}),
    ("fsdp+tp", "full", 4, {"all_gather": 5, "all_reduce": 10, "reduce_scatter": 3}),
]


@pytest.mark.parametrize(("style", "ck", "n", "counts"), MEASURED)
def test_modeled_collectives_match_the_measured_counts(llama_small, style, ck, n, counts) -> None:
    layout = llama_small[1]
    st = expert_strategy(layout, n, style, ck)
    assert step_cost(layout, st, "h100-gt").collectives == counts
