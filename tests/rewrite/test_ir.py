"""IR invariants: hashing, topological order, edits sharing nodes, JSON round trip, text dump."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rewrite import (
    Graph,
    GraphBuilder,
    GraphEditor,
    GraphError,
    SerializationError,
    evaluate,
    from_json,
    load,
    random_inputs,
    random_params,
    save,
    to_json,
    to_text,
)
from rewrite.serialize import FORMAT_VERSION


def mlp(name: str = "mlp", act: str = "relu", order: int = 0) -> Graph:
    """x -> linear -> act -> * 0.5 -> + residual; ``order`` permutes node creation order."""
    b = GraphBuilder(name)
    x = b.input("x", (4, 8))
    if order:
        w2 = b.param("w2", (8, 16))
        w = b.param("w", (16, 8))
    else:
        w = b.param("w", (16, 8))
        w2 = b.param("w2", (8, 16))
    h = b.add_node(act, [b.linear(x, w)]).out(0)
    y = b.add_node("add", [x, b.linear(b.mul(h, 0.5), w2)]).out(0)
    return b.build([y])


def fused_graph() -> Graph:
    body_b = GraphBuilder("body")
    u = body_b.input("u", (4, 8))
    body = body_b.build([body_b.tanh(body_b.exp(u))])
    b = GraphBuilder("outer")
    x = b.input("x", (4, 8))
    f = b.fused(b.relu(x), body=body)
    return b.build([b.sum(f, dims=(1,))])


def test_hash_is_structural_and_id_independent() -> None:
    g1, g2 = mlp(order=0), mlp(order=1, name="other")
    assert [n.id for n in g1] != [n.id for n in g2]
    assert g1.hash == g2.hash and g1 == g2
    assert mlp(act="gelu").hash != g1.hash
    same_node = {g1.node_hash(n.id) for n in g1} & {g2.node_hash(n.id) for n in g2}
    assert len(same_node) == len(g1)


def test_hash_tells_shared_from_duplicated_subexpressions() -> None:
    def graph(shared: bool) -> Graph:
        b = GraphBuilder("cse")
        x = b.input("x", (4, 8))
        e1 = b.add_node("exp", [x]).out(0)
        e2 = e1 if shared else b.add_node("exp", [x]).out(0)
        return b.build([b.add_node("add", [e1, e2]).out(0)])

    dup, cse = graph(False), graph(True)
    assert len(dup) == len(cse) + 1
    assert dup.hash != cse.hash  # a CSE rewrite must not look like a duplicate to dedupe
    assert dup.node_hashes()[dup.outputs[0].node] == cse.node_hashes()[cse.outputs[0].node]


def test_hash_is_stable_across_processes() -> None:
    code = "from tests.rewrite.test_ir import mlp; print(mlp().hash)"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
        env={"PYTHONHASHSEED": "123", "PATH": ""},
    )
    assert out.stdout.strip() == mlp().hash


def test_topological_order_is_deterministic_and_valid() -> None:
    g = mlp()
    order = g.topo_order()
    pos = {nid: k for k, nid in enumerate(order)}
    assert len(order) == len(g)
    for node in g:
        assert all(pos[v.node] < pos[node.id] for v in node.inputs)
    ops1 = [g.node(i).op for i in order]
    g2 = mlp(order=1)
    assert ops1 == [g2.node(i).op for i in g2.topo_order()]
    assert g.by_op("linear") == tuple(i for i in order if g.node(i).op == "linear")


def test_builder_dedupes_constants_and_prunes_dead_nodes() -> None:
    b = GraphBuilder()
    x = b.input("x", (3,))
    b.exp(x)  # dead
    y = b.add(b.mul(x, 2.0), 2.0)
    g = b.build([y])
    assert g.op_counts() == {"input": 1, "const": 1, "mul": 1, "add": 1}


def test_edit_shares_unchanged_nodes_and_records_delta() -> None:
    g = mlp()
    relu = g.by_op("relu")[0]
    ed = GraphEditor(g)
    new = ed.gelu(g.node(relu).inputs[0])
    ed.replace(g.node(relu).out(), new)
    g2 = ed.finish()
    assert g2 == mlp(act="gelu")
    assert relu not in g2 and relu in g  # parent untouched
    changed = {n.id for n in g2.delta.added}
    for nid, node in g2.nodes.items():
        if nid not in changed:
            assert g.node(nid) is node  # shared object
    assert {n.op for n in g2.delta.removed} == {"relu", "mul"}
    assert {n.op for n in g2.delta.added} == {"gelu", "mul"}
    assert g2.delta.parent_uid == g.uid
    # hashes inherited from the parent for untouched nodes and recomputed for the rest
    assert g2.node_hash(g.inputs[0]) == g.node_hash(g.inputs[0])
    assert g2.hash == g2.copy().hash


def test_edit_removes_dead_nodes_and_can_consume_the_replaced_value() -> None:
    g = mlp()
    relu = g.node(g.by_op("relu")[0])
    ed = GraphEditor(g)
    ed.replace(relu.out(), ed.relu(relu.out()))  # relu(relu(x)): new node reads the old one
    g2 = ed.finish()
    assert g2.op_counts()["relu"] == 2
    ed = GraphEditor(g2)
    top = g2.node(g2.by_op("relu")[1])
    ed.replace(top.out(), top.inputs[0])  # drop it again
    assert ed.finish() == g


def test_replace_rejects_type_changes() -> None:
    g = mlp()
    ed = GraphEditor(g)
    relu = g.node(g.by_op("relu")[0])
    with pytest.raises(GraphError, match="keep the type"):
        ed.replace(relu.out(), ed.sum(relu.out(), dims=(0,)))


def test_graph_validation_rejects_dangling_and_dead_nodes() -> None:
    g = mlp()
    nodes = dict(g.nodes)
    with pytest.raises(GraphError, match="reachable"):
        Graph(
            {
                **nodes,
                99: nodes[g.by_op("relu")[0]].with_inputs(nodes[g.by_op("relu")[0]].inputs, id=99),
            },
            g.inputs,
            g.outputs,
        )
    relu = nodes[g.by_op("relu")[0]]
    nodes[relu.id] = relu.with_inputs((relu.inputs[0]._replace(node=1234),))
    with pytest.raises(GraphError, match="does not exist"):
        Graph(nodes, g.inputs, g.outputs)


@pytest.mark.parametrize("make", [mlp, fused_graph], ids=["mlp", "fused"])
def test_json_round_trip_is_exact(make, tmp_path: Path) -> None:
    g = make()
    g2 = from_json(to_json(g))
    assert g2 == g and g2.name == g.name
    assert to_json(g2) == to_json(g)
    assert [n.id for n in g2] == [n.id for n in g]
    save(g, tmp_path / "g.json")
    assert load(tmp_path / "g.json") == g
    ins, params = random_inputs(g), random_params(g)
    for a, b in zip(evaluate(g, ins, params), evaluate(g2, ins, params)):
        np.testing.assert_array_equal(a, b)


def test_json_rejects_newer_and_corrupt_files() -> None:
    d = json.loads(to_json(mlp()))
    with pytest.raises(SerializationError, match="upgrade"):
        from_json(json.dumps({**d, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(SerializationError, match="not valid JSON"):
        from_json(to_json(mlp())[:-10])
    bad = json.loads(to_json(mlp()))
    bad["nodes"][3]["types"] = [[[1, 2], "float32"]]
    with pytest.raises(SerializationError, match="corrupt"):
        from_json(json.dumps(bad))
    del bad["nodes"]
    with pytest.raises(SerializationError, match="missing field"):
        from_json(json.dumps(bad))


def test_fused_node_evaluates_its_body() -> None:
    g = fused_graph()
    x = random_inputs(g)["x"]
    (out,) = evaluate(g, {"x": x})
    np.testing.assert_allclose(out, np.tanh(np.exp(np.maximum(x, 0))).sum(1), rtol=1e-6)


def test_text_dump_lists_every_node() -> None:
    g = mlp()
    text = to_text(g)
    assert text.startswith("graph mlp(")
    assert len(text.splitlines()) == len(g) + 2
    assert "linear(" in text and "return" in text


def test_edit_creating_a_cycle_is_reported_on_first_sort() -> None:
    g = mlp()
    relu = g.node(g.by_op("relu")[0])
    ed = GraphEditor(g)
    mul = g.node(g.users(relu.id)[0])  # relu -> mul; make relu read relu(mul): a cycle
    ed.replace(relu.out(), ed.add_node("relu", [mul.out()]).out(0))
    g2 = ed.finish()
    with pytest.raises(GraphError, match="acyclic"):
        g2.topo_order()


def test_child_indexes_and_hashes_match_a_fresh_graph(zoo_gpt2: Graph) -> None:
    g = zoo_gpt2
    assert g.hash  # parent hashes computed, so the children inherit them
    for op, new_op in (("tanh", "sigmoid"), ("pow", "maximum"), ("sigmoid", "tanh")):
        node = g.node(g.by_op(op)[0])
        ed = GraphEditor(g)
        ed.replace(node.out(), ed.add_node(new_op, node.inputs, dict(node.attrs)).out(0))
        g = ed.finish()
        fresh = g.copy()
        assert g.hash == fresh.hash
        for nid in g.nodes:
            assert g.node_hash(nid) == fresh.node_hash(nid)
            assert set(g.users(nid)) == set(fresh.users(nid))
        assert g.by_op(new_op) == fresh.by_op(new_op)


def test_zoo_graph_round_trips_and_rebuilds_identically(zoo_gpt2: Graph) -> None:
    from rewrite import zoo

    assert from_json(to_json(zoo_gpt2)) == zoo_gpt2
    assert zoo.build("gpt2").hash == zoo_gpt2.hash  # seeded and deterministic


def test_random_params_keep_batch_norm_variances_positive() -> None:
    from rewrite import zoo

    g = zoo.build("resnet")
    (out, *_) = evaluate(g, random_inputs(g), random_params(g))
    assert np.isfinite(out).all()


GOLDEN = Path(__file__).parent / "data"


def test_golden_files_of_every_format_version_still_load() -> None:
    # graph_v1.json: format_version 1; its hash and exact text must never change.
    g = load(GOLDEN / "graph_v1.json")
    assert g.hash == "02c6955401faf510e1787b131b7e3cd1"
    assert to_json(g) == (GOLDEN / "graph_v1.json").read_text()
    ins = random_inputs(g, int_high=10)
    outs = evaluate(g, ins, random_params(g))
    assert [o.shape for o in outs] == [t.shape for t in g.output_types]


def test_graphs_pickle_for_process_pools() -> None:
    import pickle

    g = fused_graph()
    g2 = pickle.loads(pickle.dumps(g))
    assert g2 == g and g2.uid != g.uid and g2.delta is None


def test_missing_node_id_raises_graph_error_listing_ids() -> None:
    g = mlp()
    with pytest.raises(GraphError, match=r"has no node 999; its \d+ node ids are 0, "):
        g.node(999)
    with pytest.raises(GraphError, match="has no node"):
        g[999]
