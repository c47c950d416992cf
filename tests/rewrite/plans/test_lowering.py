"""Propagation rules checked by lowering to explicit per-device ops (finite-field verifier)."""

from __future__ import annotations

import dataclasses

import pytest

from rewrite.plans.experts import megatron_layout
from rewrite.plans.lowering import SAMPLES, lower
from rewrite.plans.propagate import propagate
from rewrite.plans.sharding import Sharding
from rewrite.verify import Verifier


@pytest.mark.parametrize("n", [2, 4])
@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_rule_sample_lowers_to_an_equal_graph(name: str, n: int) -> None:
    graph, seeds = SAMPLES[name](n)
    result = Verifier(tests=2).check(graph, lower(propagate(graph, {"t": n}, seeds)))
    assert result.ok and result.mode == "field", result.detail


def _megatron_prop(layout, sp: bool):
    block, _ = layout.graphs_at(2)
    lay = megatron_layout(layout, sp)
    seeds = {n.attrs["name"]: Sharding.split(2, lay.block[n.attrs["name"]], "tp")
             for n in block.params() if n.attrs["name"] in lay.block}  # fmt: skip
    if sp:
        seeds[block.input_names[0]] = Sharding.split(3, 1, "tp")
    return block, propagate(block, {"tp": 2}, seeds, frozenset({block.input_names[0]}))


@pytest.mark.parametrize("sp", [False, True])
def test_a_megatron_llama_block_lowers_to_an_equal_graph(llama_small, sp: bool) -> None:
    block, prop = _megatron_prop(llama_small[1], sp)
    result = Verifier(tests=2).check(block, lower(prop))
    assert result.ok, result.detail


def test_a_missing_reduction_is_caught(llama_small) -> None:
    block, prop = _megatron_prop(llama_small[1], False)
    # pretend the row-parallel projections' partial sums were already whole
    lied = dict(prop.out)
    for v, s in prop.out.items():
        if s.partial:
            lied[v] = s.no_partial()
    wanted = {k: (w.no_partial() if w.partial else w) for k, w in prop.wanted.items()}
    bad = dataclasses.replace(prop, out=lied, wanted=wanted)
    assert not Verifier(tests=1).check(block, lower(bad)).ok


@pytest.mark.parametrize("name", sorted(SAMPLES))
def test_each_rule_sample_is_proved_by_z3_at_proof_sizes(name: str) -> None:
    from rewrite.prove import prove_graphs

    graph, seeds = SAMPLES[name](1)
    verdict, detail = prove_graphs(graph, lower(propagate(graph, {"t": 2}, seeds)), 5000)
    assert verdict == "proved", detail
