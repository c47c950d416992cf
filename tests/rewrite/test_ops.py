"""Every op's shape/dtype inference and numpy semantics against torch on random inputs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from rewrite import GraphBuilder, ShapeError, evaluate, ops
from rewrite.ops.collective import SHARD_OPS

F32 = "float32"
# input spec: (shape, dtype, kind) with kind in {"n": normal, "p": positive, "b": bool,
# "m": attention mask, "iN": ints < N}
Spec = tuple[tuple[int, ...], str, str]


def n(*shape: int) -> Spec:
    return (shape, F32, "n")


def p(*shape: int) -> Spec:
    return (shape, F32, "p")


def b(*shape: int) -> Spec:
    return (shape, "bool", "b")


def i(high: int, *shape: int) -> Spec:
    return (shape, "int64", f"i{high}")


Case = tuple[str, str, list[Spec], dict[str, Any], Callable[..., Any]]

CASES: list[Case] = [
    ("neg", "neg", [n(3, 4)], {}, torch.neg),
    ("abs", "abs", [n(3, 4)], {}, torch.abs),
    ("relu", "relu", [n(3, 4)], {}, torch.relu),
    ("exp", "exp", [n(3, 4)], {}, torch.exp),
    ("log", "log", [p(3, 4)], {}, torch.log),
    ("sqrt", "sqrt", [p(3, 4)], {}, torch.sqrt),
    ("rsqrt", "rsqrt", [p(3, 4)], {}, torch.rsqrt),
    ("reciprocal", "reciprocal", [p(3, 4)], {}, torch.reciprocal),
    ("tanh", "tanh", [n(3, 4)], {}, torch.tanh),
    ("sigmoid", "sigmoid", [n(3, 4)], {}, torch.sigmoid),
    ("silu", "silu", [n(3, 4)], {}, F.silu),
    ("gelu", "gelu", [n(3, 4)], {}, F.gelu),
    (
        "gelu_tanh",
        "gelu",
        [n(3, 4)],
        {"approximate": "tanh"},
        lambda x: F.gelu(x, approximate="tanh"),
    ),
    ("erf", "erf", [n(3, 4)], {}, torch.erf),
    ("sin", "sin", [n(3, 4)], {}, torch.sin),
    ("cos", "cos", [n(3, 4)], {}, torch.cos),
    ("logical_not", "logical_not", [b(3, 4)], {}, torch.logical_not),
    ("cast", "cast", [n(3, 4)], {"dtype": "float64"}, lambda x: x.to(torch.float64)),
    ("cast_int", "cast", [i(9, 3, 4)], {"dtype": "float32"}, lambda x: x.to(torch.float32)),
    ("add", "add", [n(3, 1, 5), n(4, 5)], {}, torch.add),
    ("sub", "sub", [n(3, 4), n(4)], {}, torch.sub),
    ("mul", "mul", [n(2, 3, 4), n(1, 4)], {}, torch.mul),
    ("div", "div", [n(3, 4), p(3, 4)], {}, torch.div),
    ("div_int", "div", [i(9, 3, 4), i(9, 4)], {}, torch.div),
    ("pow", "pow", [p(3, 4), n(4)], {}, torch.pow),
    ("maximum", "maximum", [n(3, 4), n(3, 1)], {}, torch.maximum),
    ("minimum", "minimum", [n(3, 4), n(3, 4)], {}, torch.minimum),
    ("eq", "eq", [i(3, 3, 4), i(3, 4)], {}, torch.eq),
    ("ne", "ne", [i(3, 3, 4), i(3, 3, 4)], {}, torch.ne),
    ("lt", "lt", [n(3, 4), n(3, 4)], {}, torch.lt),
    ("le", "le", [n(3, 4), n(1)], {}, torch.le),
    ("gt", "gt", [n(3, 4), n(3, 4)], {}, torch.gt),
    ("ge", "ge", [n(3, 4), n(4)], {}, torch.ge),
    ("logical_and", "logical_and", [b(3, 4), b(4)], {}, torch.logical_and),
    ("logical_or", "logical_or", [b(3, 4), b(3, 4)], {}, torch.logical_or),
    ("where", "where", [b(3, 4), n(3, 4), n(4)], {}, torch.where),
    ("mm", "mm", [n(5, 7), n(7, 3)], {}, torch.mm),
    ("bmm", "bmm", [n(2, 5, 7), n(2, 7, 3)], {}, torch.bmm),
    ("matmul", "matmul", [n(2, 1, 5, 7), n(3, 7, 4)], {}, torch.matmul),
    ("matmul_vec", "matmul", [n(5, 7), n(7)], {}, torch.matmul),
    ("linear", "linear", [n(2, 5, 7), n(3, 7)], {}, F.linear),
    ("linear_bias", "linear", [n(2, 5, 7), n(3, 7), n(3)], {}, F.linear),
    ("addmm", "addmm", [n(3), n(5, 7), n(7, 3)], {}, torch.addmm),
    (
        "sdpa",
        "sdpa",
        [n(2, 3, 5, 8), n(2, 3, 6, 8), n(2, 3, 6, 4)],
        {},
        F.scaled_dot_product_attention,
    ),
    (
        "sdpa_causal",
        "sdpa",
        [n(1, 2, 6, 8), n(1, 2, 6, 8), n(1, 2, 6, 8)],
        {"is_causal": True},
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
    ),
    (
        "sdpa_boolmask",
        "sdpa",
        [n(1, 2, 5, 8), n(1, 2, 5, 8), n(1, 2, 5, 8), ((5, 5), "bool", "m")],
        {"scale": 0.3},
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m, scale=0.3),
    ),
    (
        "sdpa_floatmask",
        "sdpa",
        [n(1, 2, 5, 8), n(1, 2, 5, 8), n(1, 2, 5, 8), n(1, 1, 5, 5)],
        {},
        lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
    ),
    (
        "sdpa_gqa",
        "sdpa",
        [n(1, 4, 5, 8), n(1, 2, 5, 8), n(1, 2, 5, 8)],
        {"enable_gqa": True},
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True),
    ),
    (
        "conv2d",
        "conv2d",
        [n(2, 4, 9, 8), n(6, 4, 3, 3), n(6)],
        {"stride": (2, 1), "padding": (1, 0)},
        lambda x, w, bb: F.conv2d(x, w, bb, stride=(2, 1), padding=(1, 0)),
    ),
    (
        "conv2d_groups",
        "conv2d",
        [n(1, 4, 7, 7), n(8, 2, 3, 3)],
        {"groups": 2, "dilation": (2, 2)},
        lambda x, w: F.conv2d(x, w, groups=2, dilation=2),
    ),
    (
        "max_pool2d",
        "max_pool2d",
        [n(2, 3, 9, 9)],
        {"kernel": (3, 3), "stride": (2, 2), "padding": (1, 1)},
        lambda x: F.max_pool2d(x, 3, 2, 1),
    ),
    (
        "avg_pool2d",
        "avg_pool2d",
        [n(2, 3, 8, 8)],
        {"kernel": (2, 2), "stride": (2, 2)},
        lambda x: F.avg_pool2d(x, 2),
    ),
    ("sum", "sum", [n(3, 4, 5)], {"dims": (1,)}, lambda x: x.sum(1)),
    ("sum_all_int", "sum", [i(5, 3, 4)], {}, lambda x: x.sum()),
    (
        "mean",
        "mean",
        [n(3, 4, 5)],
        {"dims": (-1, 0), "keepdim": True},
        lambda x: x.mean((-1, 0), keepdim=True),
    ),
    ("amax", "amax", [n(3, 4, 5)], {"dims": (2,)}, lambda x: x.amax(2)),
    ("amin", "amin", [n(3, 4, 5)], {"dims": (0, 1)}, lambda x: x.amin((0, 1))),
    ("softmax", "softmax", [n(3, 4, 5)], {"dim": 1}, lambda x: x.softmax(1)),
    ("log_softmax", "log_softmax", [n(3, 4, 5)], {"dim": -1}, lambda x: x.log_softmax(-1)),
    (
        "layer_norm",
        "layer_norm",
        [n(2, 3, 8), n(8), n(8)],
        {"normalized_shape": (8,)},
        lambda x, w, bb: F.layer_norm(x, (8,), w, bb),
    ),
    (
        "layer_norm_2d",
        "layer_norm",
        [n(2, 3, 8)],
        {"normalized_shape": (3, 8), "eps": 1e-3},
        lambda x: F.layer_norm(x, (3, 8), eps=1e-3),
    ),
    (
        "rms_norm",
        "rms_norm",
        [n(2, 3, 8), n(8)],
        {"normalized_shape": (8,)},
        lambda x, w: F.rms_norm(x, (8,), w, eps=1e-6),
    ),
    (
        "batch_norm",
        "batch_norm",
        [n(2, 3, 4, 4), n(3), n(3), n(3), p(3)],
        {"eps": 1e-5},
        lambda x, w, bb, m, v: F.batch_norm(x, m, v, w, bb, training=False),
    ),
    ("reshape", "reshape", [n(3, 4, 5)], {"shape": (4, -1)}, lambda x: x.reshape(4, -1)),
    ("permute", "permute", [n(3, 4, 5)], {"dims": (2, 0, 1)}, lambda x: x.permute(2, 0, 1)),
    ("transpose", "transpose", [n(3, 4, 5)], {"dim0": -1, "dim1": 0}, lambda x: x.transpose(-1, 0)),
    ("diagonal", "diagonal", [n(4, 4)], {}, torch.diagonal),
    ("assume", "assume", [p(3, 4)], {"domain": "positive"}, lambda x: x),
    ("assume_nonneg", "assume", [p(3, 4)], {"domain": "nonnegative"}, lambda x: x),
    (
        "diagonal_offset",
        "diagonal",
        [n(2, 3, 5)],
        {"offset": -1, "dim1": 2, "dim2": 0},
        lambda x: torch.diagonal(x, -1, 2, 0),
    ),
    ("expand", "expand", [n(3, 1)], {"shape": (2, 3, 4)}, lambda x: x.expand(2, 3, 4)),
    ("concat", "concat", [n(3, 2), n(3, 4)], {"dim": 1}, lambda x, y: torch.cat([x, y], 1)),
    (
        "split",
        "split",
        [n(3, 7)],
        {"sizes": (2, 5), "dim": -1},
        lambda x: torch.split(x, [2, 5], -1),
    ),
    (
        "slice",
        "slice",
        [n(5, 9)],
        {"dim": 1, "start": 1, "end": -1, "step": 3},
        lambda x: x[:, 1:-1:3],
    ),
    (
        "index_select",
        "index_select",
        [n(5, 4), i(5, 7)],
        {"dim": 0},
        lambda x, ix: x.index_select(0, ix),
    ),
    ("embedding", "embedding", [n(11, 4), i(11, 2, 3)], {}, lambda w, ix: F.embedding(ix, w)),
]


def _arrays(specs: list[Spec], seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for shape, dtype, kind in specs:
        if kind == "n":
            out.append(rng.standard_normal(shape).astype(dtype))
        elif kind == "p":
            out.append(rng.uniform(0.5, 2.0, shape).astype(dtype))
        elif kind == "b":
            out.append(rng.random(shape) < 0.5)
        elif kind == "m":  # attention mask: random, every query sees at least itself
            out.append((rng.random(shape) < 0.5) | np.eye(shape[-1], dtype=bool))
        else:
            out.append(rng.integers(0, int(kind[1:]), shape).astype(dtype))
    return out


def test_registry_has_at_least_35_ops_and_all_are_covered() -> None:
    names = ops.BUILTIN_OPS
    assert len(names) >= 35
    covered = {c[1] for c in CASES} | {"input", "param", "const", "opaque", "fused"}
    covered |= set(SHARD_OPS)  # compared with torch in test_collectives.py
    assert names <= covered, f"ops without a torch comparison: {names - covered}"


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_op_matches_torch(case: Case, seed: int) -> None:
    _, op, specs, attrs, fn = case
    arrays = _arrays(specs, seed)
    gb = GraphBuilder(op)
    ins = [gb.input(f"x{k}", s[0], s[1]) for k, s in enumerate(specs)]
    node = gb.add_node(op, ins, attrs)
    g = gb.build(node.outs)
    with torch.no_grad():
        ref = fn(*[torch.from_numpy(a) for a in arrays])
    refs = list(ref) if isinstance(ref, tuple | list) else [ref]
    got = evaluate(g, arrays)
    assert len(got) == len(refs) == len(node.types)
    for t, r, a in zip(node.types, refs, got):
        assert t.shape == tuple(r.shape), f"{op}: inferred {t.shape}, torch {tuple(r.shape)}"
        assert t.dtype == str(r.dtype).removeprefix("torch."), (
            f"{op}: inferred {t.dtype}, torch {r.dtype}"
        )
        assert a.shape == t.shape and a.dtype == np.dtype(t.dtype)
        np.testing.assert_allclose(a.astype(np.float64), r.double().numpy(), rtol=2e-5, atol=2e-5)


def test_flops_of_products_and_norms() -> None:
    gb = GraphBuilder()
    x, w = gb.input("x", (2, 5, 7)), gb.param("w", (3, 7))
    lin = gb.add_node("linear", [x, w])
    mm = gb.add_node("mm", [gb.input("a", (4, 6)), gb.input("c", (6, 9))])
    get = ops.get_op
    assert get("linear").flops(lin.in_types, lin.types, lin.attrs) == 2 * 10 * 3 * 7
    assert get("mm").flops(mm.in_types, mm.types, mm.attrs) == 2 * 4 * 9 * 6
    assert get("linear").bytes(lin.in_types, lin.types, lin.attrs) == 4 * (70 + 21 + 30)


def _expect_shape_error(op: str, specs: list[Spec], attrs: dict[str, Any], fragment: str) -> None:
    """Adding ``op`` on inputs of ``specs`` raises a ShapeError naming the op and ``fragment``."""
    gb = GraphBuilder()
    ins = [gb.input(f"x{k}", s[0], s[1]) for k, s in enumerate(specs)]
    with pytest.raises(ShapeError, match=op) as info:
        gb.add_node(op, ins, attrs)
    assert fragment in str(info.value)


@pytest.mark.parametrize(
    ("op", "specs", "attrs", "fragment"),
    [
        ("mm", [n(3, 4), n(5, 6)], {}, "contracted dims"),
        ("add", [n(3, 4), n(5)], {}, "broadcastable"),
        ("reshape", [n(3, 4)], {"shape": (5, 3)}, "element count"),
        ("softmax", [i(3, 4)], {}, "float input"),
        ("concat", [n(3, 4), n(2, 5)], {"dim": 0}, "equal dims"),
        ("linear", [n(3, 4), n(4, 5)], {}, "weight[N, K]"),
        ("split", [n(3, 4)], {"sizes": (1, 1)}, "summing to 3"),
        ("softmax", [n(3, 4)], {"dim": 5}, "dim"),
        ("relu", [n(3)], {"alpha": 1}, "unknown"),
    ],
)
def test_shape_errors_name_the_op_and_rule(
    op: str, specs: list[Spec], attrs: dict[str, Any], fragment: str
) -> None:
    _expect_shape_error(op, specs, attrs, fragment)


@pytest.mark.parametrize(
    ("op", "specs", "attrs", "fragment"),
    [
        (
            "conv2d",
            [n(1, 3, 8, 8), n(4, 3, 3, 3)],
            {"stride": (0, 0)},
            "stride to be a pair of ints >= 1",
        ),
        ("conv2d", [n(1, 3, 8, 8), n(4, 3, 3, 3)], {"stride": 0}, "got stride=0"),
        (
            "conv2d",
            [n(1, 3, 8, 8), n(4, 3, 3, 3)],
            {"padding": (-1, 0)},
            "padding to be a pair of ints >= 0",
        ),
        ("conv2d", [n(1, 3, 8, 8), n(4, 3, 3, 3)], {"dilation": (1, 1.5)}, "dilation"),
        ("conv2d", [n(1, 3, 8, 8), n(4, 3, 3, 3)], {"groups": 0}, "groups to be an int >= 1"),
        ("max_pool2d", [n(1, 3, 8, 8)], {"kernel": (0, 0)}, "kernel to be a pair of ints >= 1"),
        ("avg_pool2d", [n(1, 3, 8, 8)], {"stride": (2,)}, "stride to be a pair"),
        (
            "max_pool2d",
            [n(1, 3, 4, 4)],
            {"kernel": (5, 5), "stride": (1, 1)},
            "output would be empty",
        ),
        ("softmax", [n(3, 4)], {"dim": "a"}, "dim to be an int, but got dim='a'"),
        ("softmax", [n(3, 4)], {"dim": 1.0}, "dim to be an int"),
        ("sum", [n(3, 4)], {"dims": ("a",)}, "dims to be an int or a tuple of ints"),
        ("sum", [n(3, 4)], {"keepdim": 1}, "keepdim to be True or False"),
        ("slice", [n(3, 4)], {"dim": 0, "step": 0}, "step to be an int >= 1"),
        ("reshape", [n(3, 4)], {"shape": (3, "4")}, "shape to be a tuple of ints >= -1"),
        ("layer_norm", [n(3, 4)], {"normalized_shape": (4,), "eps": -1.0}, "eps"),
        ("gelu", [n(3)], {"approximate": "fast"}, "one of ['none', 'tanh']"),
        ("shard", [n(4, 4)], {"n": 0}, "n to be an int >= 1"),
        ("sdpa", [n(1, 2, 4, 8)] * 3, {"is_causal": "yes"}, "is_causal to be True or False"),
    ],
)
def test_bad_attributes_name_the_attribute_value_and_range(
    op: str, specs: list[Spec], attrs: dict[str, Any], fragment: str
) -> None:
    _expect_shape_error(op, specs, attrs, fragment)


def test_attribute_rules_accept_the_documented_forms() -> None:
    gb = GraphBuilder()
    x = gb.input("x", (1, 3, 8, 8))
    assert gb.type_of(gb.sum(x, dims=1)).shape == (1, 8, 8)
    assert gb.type_of(gb.sum(x, dims=[1, -1])).shape == (1, 8)
    assert gb.type_of(gb.max_pool2d(x, kernel=[3, 3], stride=(1, 1), padding=(1, 1))).shape == (
        1,
        3,
        8,
        8,
    )
    assert gb.type_of(gb.reshape(x, shape=(-1, 64))).shape == (3, 64)
    assert gb.type_of(gb.slice(x, dim=2, start=None, end=-1)).shape == (1, 3, 7, 8)


def test_only_convolution_families_use_the_matmul_unit() -> None:
    assert ops.get_op("conv2d").family == "conv"
    assert ops.get_op("max_pool2d").family == ops.get_op("avg_pool2d").family == "pool"


def test_op_table_documents_every_op() -> None:
    table = ops.op_table()
    assert len(table.splitlines()) == len(ops.op_names()) + 2
    assert "| `sdpa` | attention | kernel | 3..4 |" in table
