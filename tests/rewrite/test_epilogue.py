"""A convolution with its epilogue as one library call: recognised (`rewrite.epilogue`), charged
as one kernel where the profile says so (`rewrite.cost`), emitted as one call
(`rewrite.lowering.kernels.conv_with_epilogue`), and batch norms folded before a deployment's
search (`rewrite.pytorch.optimize.prefold`). Small shapes, CPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import rewrite
from rewrite import GraphBuilder, from_torch, to_module
from rewrite.costmodel import cost
from rewrite.devices import CostModelError, DeviceProfile, load_device
from rewrite.epilogue import conv_epilogue
from rewrite.errors import SearchError
from rewrite.lowering.kernels import conv_with_epilogue
from rewrite.lowering.program import lower
from rewrite.pytorch.optimize import default_profile, deploy_search, prefold
from rewrite.rules._helpers import op
from rewrite.stats import paired_ratio_interval

ONEDNN = torch.backends.mkldnn.is_available()


class Block(torch.nn.Module):
    """ResNet's bottleneck in small: conv-bn-relu, conv-bn, the residual added, relu."""

    def __init__(self, c: int = 8) -> None:
        super().__init__()
        self.c1, self.b1 = torch.nn.Conv2d(c, c, 3, padding=1, bias=False), torch.nn.BatchNorm2d(c)
        self.c2, self.b2 = torch.nn.Conv2d(c, c, 1, bias=False), torch.nn.BatchNorm2d(c)
        for bn in (self.b1, self.b2):  # statistics other than the identity's
            torch.nn.init.uniform_(bn.running_mean, -1, 1)
            torch.nn.init.uniform_(bn.running_var, 0.5, 2)
            torch.nn.init.uniform_(bn.weight, 0.5, 2)
            torch.nn.init.uniform_(bn.bias, -1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.b1(self.c1(x)))
        return torch.relu(self.b2(self.c2(y)) + x)


def _block() -> tuple[Block, torch.Tensor]:
    torch.manual_seed(0)
    return Block().eval(), torch.randn(1, 8, 6, 6)


def _fused(graph, rules=("fold_conv_batch_norm", "fuse_matmul_epilogue")):  # noqa: ANN001, ANN202
    """``graph`` with the rules applied at every site, in order, until none applies."""
    reg = rewrite.default_registry()
    for name in rules:
        while sites := reg[name].matches(graph):
            graph = reg[name].apply(graph, sites[0])
    return graph


def _body(tail: str, residual_shape: tuple[int, ...] = (1, 4, 5, 5), dtype: str = "float32"):  # noqa: ANN202
    """A fused body: conv2d, then the ops named in ``tail`` ("add", "relu", "add,relu"...)."""
    b = GraphBuilder("body")
    x = b.input("x", (1, 3, 5, 5), dtype)
    w = b.input("w", (4, 3, 3, 3), dtype)
    bias = b.input("b", (4,), dtype)
    y = op(b, "conv2d", x, w, bias, padding=(1, 1))
    for name in tail.split(","):
        if name == "add":
            y = op(b, "add", b.input("r", residual_shape, dtype), y)
        elif name:
            y = op(b, name, y)
    return b.build([y])


# ---------------------------------------------------------------- recognising the form
@pytest.mark.parametrize(
    ("tail", "activation", "residual"),
    [("relu", "relu", None), ("add", None, 3), ("add,relu", "relu", 3), ("silu", "silu", None)],
)
def test_conv_epilogues_are_recognised(tail: str, activation, residual) -> None:  # noqa: ANN001
    ep = conv_epilogue(_body(tail))
    assert ep is not None
    assert (ep.x, ep.w, ep.b, ep.residual, ep.activation) == (0, 1, 2, residual, activation)
    assert ep.conv_attrs["padding"] == (1, 1)


@pytest.mark.parametrize(
    ("tail", "why"),
    [
        ("", "a convolution alone has no epilogue"),
        ("add,sigmoid", "oneDNN applies only relu after an add"),
        ("relu,relu", "longer than conv, add, activation"),
        ("exp", "not an add or an activation oneDNN applies"),
    ],
)
def test_other_bodies_are_not(tail: str, why: str) -> None:
    assert conv_epilogue(_body(tail)) is None, why


def test_a_broadcast_add_or_another_dtype_is_not_a_residual() -> None:
    assert conv_epilogue(_body("add", residual_shape=(1, 4, 1, 1))) is None
    assert conv_epilogue(_body("relu", dtype="float64")) is None


# ---------------------------------------------------------------- the call
@pytest.mark.parametrize(
    ("activation", "residual", "approximate"),
    [
        ("relu", False, "none"),
        ("sigmoid", False, "none"),
        ("tanh", False, "none"),
        ("silu", False, "none"),
        ("gelu", False, "tanh"),
        (None, True, "none"),
        ("relu", True, "none"),
    ],
)
def test_conv_with_epilogue_computes_the_separate_calls(activation, residual, approximate) -> None:  # noqa: ANN001
    gen = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 4, 7, 6, generator=gen), torch.randn(6, 2, 3, 3, generator=gen)
    b, r = torch.randn(6, generator=gen), torch.randn(1, 6, 4, 6, generator=gen)
    attrs = {"stride": (2, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 2}
    got = conv_with_epilogue(
        x, w, b, r if residual else None, activation=activation, approximate=approximate, **attrs
    )
    want = F.conv2d(x, w, b, **attrs) + (r if residual else 0)
    if activation == "gelu":
        want = F.gelu(want, approximate=approximate)
    elif activation:
        want = getattr(F, activation)(want)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_traced_it_is_the_plain_calls() -> None:
    """``torch.export`` (and a compiler) see standard ops: the program loads anywhere."""

    class M(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(4, 3, 3, 3))

        def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
            a = {"stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
            return conv_with_epilogue(x, self.w, None, r, activation="relu", **a)

    m, x, r = M(), torch.randn(1, 3, 5, 5), torch.randn(1, 4, 5, 5)
    ep = torch.export.export(m, (x, r))
    targets = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert targets == {"aten.conv2d.default", "aten.add.Tensor", "aten.relu.default"}
    torch.testing.assert_close(ep.module()(x, r), m(x, r))


# ---------------------------------------------------------------- modules, programs, cost
def test_a_folded_block_runs_each_convolution_with_its_epilogue_in_one_call() -> None:
    model, x = _block()
    g = _fused(from_torch(model, (x,)))
    gm = to_module(g, model)
    calls = [n.target.__name__ for n in gm.graph.nodes if n.op == "call_function"]
    assert sorted(calls) == ["conv_with_epilogue", "conv_with_epilogue"]  # folded and fused
    torch.testing.assert_close(gm(x)[0], model(x), rtol=1e-4, atol=1e-5)
    program = lower(g)
    params = {n: t.detach() for n, t in model.state_dict().items()}
    torch.testing.assert_close(program.run([x], params)[0], model(x), rtol=1e-4, atol=1e-5)


def test_the_eager_profile_charges_such_a_group_as_one_kernel() -> None:
    model, x = _block()
    g = _fused(from_torch(model, (x,)))
    groups = [n for n in g.nodes.values() if n.op == "fused"]
    assert groups and all(conv_epilogue(n.attrs["body"]) is not None for n in groups)
    base = dataclasses.replace(load_device("cpu"), fusion="eager", fold_weights=True)
    op_by_op, one_call = cost(g, base), cost(g, dataclasses.replace(base, fused_epilogues=True))
    assert (one_call.kernels, op_by_op.kernels) == (2, 5)  # conv, relu | conv, add, relu
    assert one_call.latency < op_by_op.latency and one_call.bytes < op_by_op.bytes


def test_the_cpu_profile_has_fused_epilogues_in_eager_mode_only() -> None:
    assert default_profile("cpu").fused_epilogues is ONEDNN
    assert default_profile("cpu", compiled=True).fused_epilogues is False


def test_the_profile_field_round_trips_and_is_checked() -> None:
    p = dataclasses.replace(load_device("cpu"), fused_epilogues=True)
    assert DeviceProfile.from_dict(p.to_dict()).fused_epilogues is True
    old = {k: v for k, v in p.to_dict().items() if k != "fused_epilogues"} | {"format_version": 4}
    assert DeviceProfile.from_dict(old).fused_epilogues is False
    with pytest.raises(CostModelError, match="fused_epilogues must be true or false"):
        dataclasses.replace(p, fused_epilogues="yes")


# ---------------------------------------------------------------- deployment searches
def test_prefold_folds_every_batch_norm_where_weights_fold_and_memory_allows() -> None:
    model, x = _block()
    g = from_torch(model, (x,))
    profile = default_profile("cpu")
    folded, done = prefold(g, profile, memory_ratio=10.0)
    assert done == {"fold_conv_batch_norm": 2}
    assert not any(n.op == "batch_norm" for n in folded.nodes.values())
    # the scaled weights are copies the module keeps: memory the cap counts
    grows = cost(folded, profile).peak_memory - cost(g, profile).peak_memory
    weights = model.c1.weight.numel() * 4 + model.c2.weight.numel() * 4
    assert weights <= grows <= 1.1 * weights  # and the two new biases
    same, none = prefold(g, profile, memory_ratio=1.0)  # no room for a copy
    assert same is g and none == {}
    same, none = prefold(g, "cpu", memory_ratio=10.0)  # the datasheet profile does not fold
    assert same is g and none == {}


def test_prefold_takes_the_folds_that_save_most_per_byte_first() -> None:
    model, x = _block()
    g = from_torch(model, (x,))
    profile = default_profile("cpu")
    c1 = model.c1.weight.numel() * 4 + 8 * 4  # 3x3: 9x the 1x1's weight, same activations
    room = (cost(g, profile).peak_memory + c1 // 9 * 2) / cost(g, profile).peak_memory
    folded, done = prefold(g, profile, memory_ratio=room)
    assert done == {"fold_conv_batch_norm": 1}
    kept = [n for n in folded.nodes.values() if n.op == "batch_norm"]
    assert len(kept) == 1  # the 3x3 convolution's: 9x the bytes for the same pass saved
    assert folded.node(kept[0].inputs[0].node).in_types[1].shape == (8, 8, 3, 3)


def test_deploy_search_judges_graphs_against_the_imported_one() -> None:
    model, x = _block()
    g = from_torch(model, (x,))
    profile = default_profile("cpu")
    result, base = deploy_search(g, {"max_steps": 30, "seed": 0}, None, profile, 10.0)
    assert base["rules"] == {"fold_conv_batch_norm": 2}
    assert base["cost"]["latency"] == pytest.approx(cost(g, profile).latency)
    assert result.input_cost["latency"] < base["cost"]["latency"]  # searched from the folded


def test_optimize_module_reports_the_prefolded_rules() -> None:
    model, x = _block()
    opt, report = rewrite.optimize_module(
        model, (x,), config={"max_steps": 40}, measure=False, memory_ratio=1.5
    )
    assert report.chosen >= 0 and report.rules["fold_conv_batch_norm"] == 2
    torch.testing.assert_close(opt(x), model(x), rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- paired intervals
def test_paired_ratios_cancel_what_both_sides_of_a_round_share() -> None:
    drift = np.random.default_rng(0).uniform(1, 3, 20)  # the machine's state, round by round
    iv = paired_ratio_interval(2.0 * drift, drift)
    assert (iv.value, iv.low, iv.high) == pytest.approx((2.0, 2.0, 2.0))
    unpaired = rewrite.stats.ratio_interval(2.0 * drift, drift)
    assert unpaired.high - unpaired.low > 0.5


def test_paired_ratios_need_pairs() -> None:
    with pytest.raises(SearchError, match="one length"):
        paired_ratio_interval([1.0, 2.0], [1.0])
    with pytest.raises(SearchError, match="positive denominators"):
        paired_ratio_interval([1.0, 2.0], [1.0, 0.0])
