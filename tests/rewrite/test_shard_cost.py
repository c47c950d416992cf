"""Sharded cost: placement, alpha-beta collectives, per-device latency and memory."""

from __future__ import annotations

import pytest

from rewrite import cost
from rewrite.builder import GraphBuilder
from rewrite.devices import load_device
from rewrite.errors import GraphError
from rewrite.mesh_cost import collective_time, placement, shard_cost
from rewrite.rules._helpers import op, outs
from tests.rewrite.rule_fixtures import rules_by_name


def test_collective_formulas_by_hand():
    p = load_device("h100")
    bw, alpha = p.interconnect["bandwidth"], p.interconnect["latency"]
    s = 1 << 20
    assert collective_time("all_reduce", s, 4, p) == pytest.approx(6 * alpha + 1.5 * s / bw)
    assert collective_time("all_gather", s, 4, p) == pytest.approx(3 * alpha + 0.75 * s / bw)
    assert collective_time("all_reduce", s, 1, p) == 0.0


def test_megatron_halves_per_device_compute_and_weights():
    rule = rules_by_name()["megatron_mlp_2"]
    g = rule.sample_graph(0, lo=1024, hi=1024)  # compute-bound sizes
    sharded = rule.apply(g, rule.matches(g)[0])
    base, sc = shard_cost(g), shard_cost(sharded)
    assert base.n_devices == 1 and sc.n_devices == 2
    assert sc.communication > 0 and sc.comm_bytes == g.output_types[0].nbytes
    assert max(sc.device_latency) < base.device_latency[0]
    assert max(sc.peak_memory) < base.peak_memory[0]


def test_placement_follows_shards_and_rejects_cross_device_reads():
    b = GraphBuilder("p")
    x = b.input("x", (4, 4))
    a, c = outs(b, "shard", x, dim=0, n=2)
    y = op(b, "all_gather", op(b, "exp", a), op(b, "exp", c), dim=0)
    g = b.build([y])
    where = placement(g)
    assert where[g.outputs[0]] == -1
    assert sorted(set(where.values())) == [-1, 0, 1]
    b = GraphBuilder("bad")
    x = b.input("x", (4, 4))
    a, c = outs(b, "shard", x, dim=0, n=2)
    with pytest.raises(GraphError, match="one device"):
        placement(b.build([op(b, "add", a, c)]))


def _view_graph():
    b = GraphBuilder("v")
    x = b.input("x", (256, 256))
    e = b.exp(x)
    r = b.reshape(e, shape=(256 * 256,))  # a view keeps e alive until its last reader
    t = b.tanh(x)
    return b.build([b.add(b.reshape(t, shape=(256 * 256,)), r)])


def test_unsharded_peak_memory_equals_cost_peak_memory(zoo_gpt2) -> None:
    rule = rules_by_name()["megatron_mlp_2"]
    for g in (_view_graph(), rule.sample_graph(0, lo=8, hi=16), zoo_gpt2):
        sc = shard_cost(g)
        assert sc.n_devices == 1
        assert sc.peak_memory == (cost(g).peak_memory,), g.name
    assert shard_cost(_view_graph()).peak_memory == (3 * 4 * 256 * 256,)
