"""Cost model against hand-computed values; incremental costing equals a full pass."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from rewrite import (
    COST_FIELDS,
    CostModelError,
    DeviceProfile,
    Graph,
    GraphBuilder,
    GraphEditor,
    cost,
    device_names,
    load_device,
    node_cost,
)
from rewrite.costmodel import clear_caches

UNIT = DeviceProfile(
    name="unit",
    description="round numbers for hand computation",
    peak_flops={"matmul": {"float32": 1e12}, "vector": {"float32": 1e11}},
    memory_bandwidth=1e11,
    memory_capacity=1e9,
    launch_overhead=1e-6,
    efficiency={"matmul": 0.5, "vector": 1.0, "memory": 1.0},
    matmul_tile=(1, 1, 1),
    interconnect={"bandwidth": 1e10, "latency": 1e-6},
)


#: UNIT with the host's launches overlapping the device's kernels (a GPU).
ASYNC = dataclasses.replace(
    UNIT, name="unit-async", dispatch="async", launch_overhead=1e-5, view_overhead=3e-7
)


def linear_relu(m: int = 128, view: bool = False) -> Graph:
    b = GraphBuilder("lr")
    x = b.input("x", (m, 256))
    y = b.linear(x, b.param("w", (512, 256)))
    if view:
        y = b.reshape(y, shape=(m, 2, 256))
    return b.build([b.relu(y)])


def test_latency_flops_bytes_kernels_by_hand() -> None:
    c = cost(linear_relu(), UNIT)
    f_lin, b_lin = 2 * 128 * 512 * 256, 4 * (128 * 256 + 512 * 256 + 128 * 512)
    f_relu, b_relu = 128 * 512, 4 * 2 * 128 * 512
    t_lin = max(f_lin / (0.5 * 1e12), b_lin / 1e11) + 1e-6
    t_relu = max(f_relu / 1e11, b_relu / 1e11) + 1e-6
    assert c.flops == f_lin + f_relu
    assert c.bytes == b_lin + b_relu
    assert c.kernels == 2
    assert c.latency == pytest.approx(t_lin + t_relu, rel=1e-12)
    assert c.communication == 0.0
    assert set(c.as_dict()) == set(COST_FIELDS)


@pytest.mark.parametrize("m", [1, 4096])
def test_async_dispatch_takes_the_longer_of_host_and_device(m: int) -> None:
    g = linear_relu(m, view=True)
    serial, c = cost(g, UNIT), cost(g, ASYNC)
    device = serial.latency - 2 * 1e-6  # the serial latency less its two launches
    assert c.device_time == pytest.approx(device, rel=1e-12)
    assert c.host_time == pytest.approx(2 * 1e-5 + 3e-7, rel=1e-12)  # 2 launches, 1 view
    assert c.latency == max(c.device_time, c.host_time)
    assert (c.latency == c.host_time) == (m == 1)  # tiny: launch-bound; large: device-bound
    assert (serial.host_time, serial.latency) == (0.0, serial.device_time)
    assert "host" in repr(c) and "host" not in repr(serial)


@pytest.mark.parametrize("view", [False, True])
def test_peak_memory_by_hand(view: bool) -> None:
    # weights 512x256 resident; x (128x256) is freed after linear; y and relu(y) coexist.
    c = cost(linear_relu(view=view), UNIT)
    weights, x, y = 4 * 512 * 256, 4 * 128 * 256, 4 * 128 * 512
    assert c.peak_memory == weights + max(x + y, 2 * y)
    assert c.bytes == 4 * (128 * 256 + 512 * 256 + 128 * 512) + 2 * y  # the view moves nothing


def test_tile_quantization_penalty() -> None:
    tiled = dataclasses.replace(
        UNIT, name="tiled", matmul_tile=(128, 128, 64), memory_bandwidth=1e15
    )
    lin = next(n for n in linear_relu(m=100) if n.op == "linear")
    t, flops, *_ = node_cost(lin, tiled)
    assert flops == 2 * 100 * 512 * 256
    assert t == pytest.approx(flops * 128 / 100 / (0.5 * 1e12) + 1e-6, rel=1e-12)


def test_fused_group_is_one_kernel_without_internal_traffic() -> None:
    bb = GraphBuilder("body")
    u = bb.input("u", (4, 8))
    body = bb.build([bb.tanh(bb.exp(u))])
    b = GraphBuilder()
    g = b.build([b.fused(b.input("x", (4, 8)), body=body)])
    c = cost(g, UNIT)
    assert (c.flops, c.bytes, c.kernels) == (8 * 32, 2 * 4 * 32, 1)
    unfused = cost(body, UNIT)
    assert unfused.kernels == 2 and unfused.bytes == 2 * c.bytes


def test_opaque_nodes_are_costed_conservatively() -> None:
    b = GraphBuilder()
    x = b.input("x", (4, 8))
    op = b.add_node("opaque", [x], target="aten.foo.default", out_types=(((4, 8), "float32"),))
    c = cost(b.build([op.out(0)]), UNIT)
    assert (c.flops, c.bytes, c.kernels) == (0, 2 * 2 * 128, 1)


def _swap_op(g: Graph, op: str, new_op: str, k: int = 0) -> Graph:
    node = g.node(g.by_op(op)[k])
    ed = GraphEditor(g)
    ed.replace(node.out(), ed.add_node(new_op, node.inputs, dict(node.attrs)).out(0))
    return ed.finish()


@pytest.mark.parametrize("device", ["h100", "cpu", ASYNC])
def test_incremental_cost_equals_full_pass(zoo_gpt2: Graph, device: str | DeviceProfile) -> None:
    g, c = zoo_gpt2, cost(zoo_gpt2, device)
    for _ in range(2):  # a chain of edits, each costed incrementally from its parent
        g2 = _swap_op(g, "tanh", "sigmoid")
        c2 = cost(g2, device, base=c)
        full = cost(g2.copy(), device)
        for f in (*COST_FIELDS, "device_time", "host_time"):
            assert getattr(c2, f) == pytest.approx(getattr(full, f), rel=1e-12), f
        g, c = g2, c2


def test_incremental_needs_the_parent_cost() -> None:
    g = linear_relu()
    g2 = _swap_op(g, "relu", "gelu")
    other = cost(linear_relu(view=True), UNIT)
    c2 = cost(g2, UNIT, base=other)  # wrong base: falls back to a full pass
    assert c2.as_tuple() == cost(g2.copy(), UNIT).as_tuple()


def test_cost_caches_key_a_profile_by_its_contents() -> None:
    """Issue 54: the caches key a profile by a digest of its contents, not by its id or name: an
    equal copy shares the key; a profile of the same name with other numbers does not, so an
    incremental cost from a base costed on it is a full pass."""
    copy = dataclasses.replace(UNIT)
    assert copy is not UNIT and copy.digest == UNIT.digest
    slower = dataclasses.replace(UNIT, memory_bandwidth=1e10)  # same name, other numbers
    assert slower.name == UNIT.name and slower.digest != UNIT.digest
    g = linear_relu()
    g2 = _swap_op(g, "relu", "gelu")
    c2 = cost(g2, slower, base=cost(g, UNIT))  # the base is another profile's: full pass
    assert c2.as_tuple() == cost(g2.copy(), slower).as_tuple() != cost(g2.copy(), UNIT).as_tuple()
    clear_caches()  # empties the node-signature cache; costs come out the same after
    assert cost(g2.copy(), slower).as_tuple() == c2.as_tuple()


def test_device_profiles_load_and_validate(tmp_path: Path) -> None:
    assert {"h100_sxm", "h200", "a100", "cpu"} <= set(device_names())
    assert load_device("h100") is load_device("H100_SXM")
    h100, h200 = load_device("h100"), load_device("h200")
    assert h200.memory_bandwidth > h100.memory_bandwidth
    g = linear_relu()
    assert cost(g, "cpu").latency > cost(g, "h100").latency
    with pytest.raises(CostModelError, match="device must be one of"):
        load_device("tpu-v9")
    d = json.loads((Path(load_device.__code__.co_filename).parent / "h200.json").read_text())
    d["efficiency"]["memory"] = 1.5
    (tmp_path / "bad.json").write_text(json.dumps(d))
    with pytest.raises(CostModelError, match=r"efficiency\['memory'\]"):
        load_device(tmp_path / "bad.json")
    d["efficiency"]["memory"], d["format_version"] = 0.8, 99
    (tmp_path / "new.json").write_text(json.dumps(d))
    with pytest.raises(CostModelError, match="upgrade"):
        load_device(tmp_path / "new.json")


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("memory_bandwidth", "fast", "memory_bandwidth must be a finite number, but got 'fast'"),
        ("memory_capacity", -1.0, "memory_capacity must be a finite number > 0"),
        ("matmul_tile", [0.5, 128, 64], "matmul_tile must be 3 ints >= 1"),
        ("matmul_tile", [1.5, 128, 64], "matmul_tile must be 3 ints >= 1"),
        ("interconnect", {"latency": 1e-6}, "interconnect must give 'bandwidth'"),
        ("interconnect", {"bandwidth": "x"}, "interconnect must give 'bandwidth'"),
        ("interconnect", None, "missing field 'interconnect'"),
        ("peak_flops", {"matmul": {"float32": "big"}}, r"peak_flops\['matmul'\]"),
        ("efficiency", [0.5], "wrong type"),
    ],
)
def test_device_profile_fields_are_validated_on_load(
    tmp_path: Path, field: str, value: object, message: str
) -> None:
    d = json.loads((Path(load_device.__code__.co_filename).parent / "h200.json").read_text())
    d["name"], d["aliases"] = "broken", []
    if value is None:
        del d[field]
    else:
        d[field] = value
    (tmp_path / "p.json").write_text(json.dumps(d))
    with pytest.raises(CostModelError, match=message):
        load_device(tmp_path / "p.json")


def test_pooling_runs_on_the_vector_unit() -> None:
    b = GraphBuilder("pool")
    x = b.input("x", (8, 64, 64, 64))
    y = b.avg_pool2d(x, kernel=(15, 15), stride=(1, 1), padding=(7, 7))
    node = b.build([y]).node(y.node)
    t, flops, nbytes, *_ = node_cost(node, UNIT)
    assert t == pytest.approx(max(flops / 1e11, nbytes / 1e11) + 1e-6, rel=1e-12)


# ---------------------------------------------------------------- folding, compiled mode, alignment
FOLDED = dataclasses.replace(UNIT, name="unit-folded", fold_weights=True)
COMPILED = dataclasses.replace(UNIT, name="unit-compiled", fusion="compiled")


def merged_linears() -> Graph:
    """Two weights concatenated (a merge's weight-only subgraph) feeding one linear."""
    b = GraphBuilder("merged")
    x = b.input("x", (64, 256))
    w = b.concat(b.param("w1", (128, 256)), b.param("w2", (128, 256)), dim=0)
    return b.build([b.relu(b.linear(x, w))])


def test_weight_only_nodes_cost_nothing_when_folded() -> None:
    g = merged_linears()
    eager, folded = cost(g, UNIT), cost(g, FOLDED)
    concat = next(n for n in g if n.op == "concat")
    t, flops, nbytes, kernels, _ = node_cost(concat, UNIT)
    assert kernels == 1 and folded.kernels == eager.kernels - 1
    assert folded.latency == pytest.approx(eager.latency - t, rel=1e-12)
    assert folded.bytes == eager.bytes - nbytes


@pytest.mark.parametrize("device", [FOLDED, COMPILED])
def test_incremental_cost_equals_full_pass_folded_and_compiled(device: DeviceProfile) -> None:
    from rewrite import default_registry

    rule = default_registry()["merge_parallel_linear"]
    b = GraphBuilder("qk")
    x = b.input("x", (1, 8, 64))
    ys = [b.linear(x, b.param(f"w{i}", (64, 64)), b.param(f"b{i}", (64,))) for i in (0, 1)]
    g = b.build([b.tanh(ys[0]), b.add(ys[0], ys[1])])
    c = cost(g, device)
    g2 = rule.apply(g, rule.matches(g)[0])
    c2, full = cost(g2, device, base=c), cost(g2.copy(), device)
    for f in (*COST_FIELDS, "device_time", "host_time"):
        assert getattr(c2, f) == pytest.approx(getattr(full, f), rel=1e-12), f
    if device.fold_weights:  # the concatenations fold away: one product instead of two
        assert c2.kernels == c.kernels - 1


def test_compiled_mode_charges_generated_kernels_their_arithmetic_only() -> None:
    g = linear_relu()
    c = cost(g, COMPILED)
    lin = next(n for n in g if n.op == "linear")
    t_lin = node_cost(lin, UNIT)[0]
    assert c.kernels == 1  # the relu is generated and fused, not launched
    assert c.latency == pytest.approx(t_lin + 128 * 512 / 1e11, rel=1e-12)
    bb = GraphBuilder("body")
    u = bb.input("u", (4, 8))
    body = bb.build([bb.tanh(bb.exp(u))])
    b = GraphBuilder()
    fused = b.build([b.fused(b.input("x", (4, 8)), body=body)])
    assert cost(fused, COMPILED).latency == pytest.approx(cost(body, COMPILED).latency)


def test_unaligned_products_run_at_the_profile_penalty() -> None:
    aligned = dataclasses.replace(
        UNIT, name="aligned", matmul_align=8, unaligned_efficiency=0.5, memory_bandwidth=1e15
    )
    for n, factor in ((512, 1.0), (510, 0.5)):
        b = GraphBuilder("lin")
        y = b.linear(b.input("x", (64, 256)), b.param("w", (n, 256)))
        lin = next(node for node in b.build([y]) if node.op == "linear")
        t = node_cost(lin, aligned)[0]
        assert t == pytest.approx(2 * 64 * n * 256 / (0.5 * 1e12 * factor) + 1e-6, rel=1e-12)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("fusion", "jit", "fusion must be one of"),
        ("fold_weights", 1, "fold_weights must be true or false"),
        ("matmul_align", 0, "matmul_align must be an int >= 1"),
        ("unaligned_efficiency", 1.5, r"unaligned_efficiency must be a number in \(0, 1\]"),
    ],
)
def test_new_profile_fields_are_validated(field: str, value: object, message: str) -> None:
    d = UNIT.to_dict()
    d[field] = value
    with pytest.raises(CostModelError, match=message):
        DeviceProfile.from_dict(d)
    assert DeviceProfile.from_dict(COMPILED.to_dict()) == COMPILED


def _live_profiles() -> int:
    import gc

    gc.collect()
    return sum(type(o) is DeviceProfile for o in gc.get_objects())


def test_a_profile_path_is_read_once_and_no_profile_is_kept_per_call(tmp_path: Path) -> None:
    """Issue 52: ``cost(g, "x.json")`` re-read the file each call and kept every profile alive
    (20 calls, 20 profiles), and the per-node cache, keyed by object id, never hit."""
    path = tmp_path / "unit.json"
    path.write_text(json.dumps(UNIT.to_dict()))
    g = linear_relu()
    first = cost(g, path)
    before = _live_profiles()
    for _ in range(20):
        assert cost(g, str(path)).latency == first.latency
        cost(g, UNIT)  # a profile object equal to the file's shares its cache entries
    assert _live_profiles() <= before
    assert load_device(path) is load_device(str(path))
    keys = {k for n in g._nodes.values() for k in (n._cost or {}) if k not in ("mem", "static")}
    assert len(keys) == 1  # one cache key for one profile's contents
    changed = {**UNIT.to_dict(), "launch_overhead": 1e-3}
    path.write_text(json.dumps(changed))  # an edited file is read again
    assert load_device(path).launch_overhead == 1e-3
    assert cost(g, path).latency > first.latency


def test_a_search_with_a_profile_path_keeps_one_profile(tmp_path: Path) -> None:
    from rewrite.optimize.api import search
    from rewrite.optimize.config import SearchConfig
    from tests.rewrite.search_rules import TEST_RULES, chain_graph

    path = tmp_path / "unit.json"
    path.write_text(json.dumps(UNIT.to_dict()))
    g = chain_graph([64, 8, 64, 8, 64], negs=2)
    search(g, SearchConfig(max_steps=5, seed=0), rules=TEST_RULES, device=path, verify_cache=None)
    before = _live_profiles()
    search(g, SearchConfig(max_steps=60, seed=0), rules=TEST_RULES, device=path, verify_cache=None)
    assert _live_profiles() <= before


def test_element_time_prices_an_element_wise_op_by_its_measured_rate() -> None:
    """With ``element_time`` an element-wise op's compute term is its seconds per element times
    its elements (the ``.scalar`` entry when it reads a 0-d operand; other dtypes scaled by the
    vector peak's ratio), and an op without an entry keeps its FLOPs over the peak."""
    import dataclasses

    from rewrite.costmodel import kernel_terms

    base = load_device("cpu")
    table = {"tanh": 4e-9, "pow": 5e-9, "pow.scalar": 2e-10}
    prof = dataclasses.replace(base, element_time=table)
    b = GraphBuilder("ew")
    x = b.input("x", (64, 32))
    t = b.add_node("tanh", [x], {}).out(0)
    p_t = b.add_node("pow", [t, x], {}).out(0)
    p_s = b.add_node("pow", [p_t, b.const(np.asarray(3.0, dtype=np.float32))], {}).out(0)
    e = b.add_node("exp", [p_s], {}).out(0)
    g = b.build([e])
    work = {n.op + str(n.in_types[-1].rank): kernel_terms(n, prof)[2] for n in g if n.in_types}
    assert work["tanh2"] == pytest.approx(64 * 32 * 4e-9)
    assert work["pow2"] == pytest.approx(64 * 32 * 5e-9)  # a tensor exponent
    assert work["pow0"] == pytest.approx(64 * 32 * 2e-10)  # a 0-d exponent
    exp = next(n for n in g if n.op == "exp")
    assert kernel_terms(exp, prof)[2] == kernel_terms(exp, base)[2]  # no entry: FLOPs
    assert cost(g, prof).latency != cost(g, base).latency
    half = dataclasses.replace(
        prof, peak_flops={**base.peak_flops, "vector": {"float32": 1e12, "bfloat16": 2e12}}
    )
    b16 = GraphBuilder("bf")
    y = b16.input("y", (64, 32), "bfloat16")
    tanh16 = b16.build([b16.add_node("tanh", [y], {}).out(0)])
    node = next(n for n in tanh16 if n.op == "tanh")
    assert kernel_terms(node, half)[2] == pytest.approx(64 * 32 * 4e-9 / 2)


def test_element_time_is_stored_and_validated() -> None:
    d = load_device("cpu").to_dict()
    d["element_time"] = {"tanh": 3e-9}
    prof = DeviceProfile.from_dict(d)
    assert DeviceProfile.from_dict(prof.to_dict()).element_time == {"tanh": 3e-9}
    assert prof.digest != load_device("cpu").digest  # keys the cost caches apart
    old = {k: v for k, v in d.items() if k != "element_time"} | {"format_version": 6}
    assert DeviceProfile.from_dict(old).element_time == {}
    d["element_time"] = {"tanh": -1.0}
    with pytest.raises(CostModelError, match="element_time"):
        DeviceProfile.from_dict(d)
