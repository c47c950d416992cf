"""Shardings, redistribution, links and propagation on a transformer block."""

from __future__ import annotations

import pytest

from rewrite.devices import load_device
from rewrite.errors import PlanError
from rewrite.ir import TensorType
from rewrite.plans.cluster import collective_time, link_of
from rewrite.plans.experts import megatron_layout
from rewrite.plans.propagate import RULES, propagate, rule_for
from rewrite.plans.sharding import Sharding, redistribute

T = TensorType((4, 8, 16), "bfloat16")
MESH = {"tp": 4}


@pytest.mark.parametrize(
    ("src", "dst", "kinds"),
    [
        (Sharding(((), (), ()), ("tp",)), Sharding.replicated(3), ["all_reduce"]),
        (Sharding(((), (), ()), ("tp",)), Sharding.split(3, 1, "tp"), ["reduce_scatter"]),
        (Sharding.split(3, 1, "tp"), Sharding.replicated(3), ["all_gather"]),
        (Sharding.split(3, 1, "tp"), Sharding.split(3, 2, "tp"), ["all_to_all"]),
        (Sharding.replicated(3), Sharding.split(3, 2, "tp"), []),
        (Sharding.replicated(3), Sharding(((), (), ()), ("tp",)), []),
    ],
)
def test_redistribute_names_dtensors_collective(src, dst, kinds) -> None:
    assert [c.kind for c in redistribute(src, dst, T, MESH)] == kinds


def test_collective_sizes_are_the_ring_buffers() -> None:
    (ag,) = redistribute(Sharding.split(3, 1, "tp"), Sharding.replicated(3), T, MESH)
    (rs,) = redistribute(Sharding(((), (), ()), ("tp",)), Sharding.split(3, 1, "tp"), T, MESH)
    assert ag.nbytes == T.nbytes == rs.nbytes  # gathered output / scattered input


def test_an_axis_plays_one_part() -> None:
    with pytest.raises(PlanError, match="one dimension"):
        Sharding((("tp",), ("tp",)))


def test_links_follow_the_row_major_layout_over_nodes() -> None:
    p = load_device("h100-gt")
    mesh = {"pp": 8, "dp": 8, "tp": 8}
    assert link_of(mesh, ("tp",), p).kind == "intra"
    dp = link_of(mesh, ("dp",), p)
    assert dp.kind == "inter" and dp.bandwidth == 50e9  # one device per node, one NIC
    wide = link_of({"dp": 128}, ("dp",), p)
    assert wide.kind == "inter" and wide.bandwidth == 400e9  # 8 NICs per node in the ring
    assert collective_time("all_reduce", 1e9, dp) == pytest.approx(
        2 * 7 * 10e-6 + 2 * 7 / 8 * 1e9 / 50e9
    )


def test_old_profiles_load_with_default_links() -> None:
    p = load_device("h200-measured")  # format 3, no cluster field
    per_node, intra, inter = p.links()
    assert per_node == 1 and intra == inter == p.interconnect


def test_every_op_has_a_rule() -> None:
    assert rule_for("silu") is RULES["elementwise"] and rule_for("opaque") is RULES["gather_all"]
    assert rule_for("linear") is RULES["linear"]


def test_megatron_collectives_emerge_from_the_rules(llama_small) -> None:
    _, layout = llama_small
    block, _ = layout.graphs_at(2)
    name = block.input_names[0]
    for sp, fwd, bwd in ((False, ["all_reduce"] * 2, ["all_reduce"] * 2),
                         (True, ["all_gather", "reduce_scatter"] * 2,
                          ["reduce_scatter", "all_gather"] * 2)):  # fmt: skip
        lay = megatron_layout(layout, sp)
        seeds = {n.attrs["name"]: Sharding.split(2, lay.block[n.attrs["name"]], "tp")
                 for n in block.params() if n.attrs["name"] in lay.block}  # fmt: skip
        if sp:
            seeds[name] = Sharding.split(3, 1, "tp")
        prop = propagate(block, {"tp": 2}, seeds, frozenset({name}))
        assert [c.kind for _, _, cs in prop.forward for c in cs] == fwd
        moves, partial = prop.backward()
        assert [c.kind for _, cs in moves for c in cs] == bwd
        norms = {block.node(i).attrs["name"] for i in partial}
        assert norms == (
            {"input_layernorm.weight", "post_attention_layernorm.weight"} if sp else set()
        )
