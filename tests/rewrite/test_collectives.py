"""The explicit-shard ops of `rewrite.ops.collective`: inference and numpy semantics vs torch."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rewrite.builder import GraphBuilder
from rewrite.errors import ShapeError
from rewrite.ops import get_op
from rewrite.ops.collective import SHARD_OPS
from rewrite.reference import evaluate
from rewrite.rules._helpers import op, outs


def test_ops_are_registered_as_the_collective_family():
    for name in SHARD_OPS:
        assert get_op(name).family == "collective"


@pytest.mark.parametrize("n", [2, 4])
def test_semantics_match_torch(n):
    rng = np.random.default_rng(n)
    xs = [rng.standard_normal((4, 8)).astype(np.float32) for _ in range(n)]
    b = GraphBuilder("c")
    ins = [b.input(f"x{i}", (4, 8)) for i in range(n)]
    shards = outs(b, "shard", ins[0], dim=1, n=n)
    ar = op(b, "all_reduce", *ins)
    ag = op(b, "all_gather", *ins, dim=0)
    rs = outs(b, "reduce_scatter", *ins, dim=1)
    got = evaluate(b.build([*shards, ar, ag, *rs]), xs)
    t = [torch.from_numpy(x) for x in xs]
    want = [
        *torch.chunk(t[0], n, dim=1),
        sum(t),
        torch.cat(t, dim=0),
        *torch.chunk(sum(t), n, dim=1),
    ]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-6, atol=1e-6)


def test_bad_shapes_name_the_op_and_the_fix():
    b = GraphBuilder("bad")
    x = b.input("x", (3, 5))
    with pytest.raises(ShapeError, match="divisible by n=2"):
        outs(b, "shard", x, dim=1, n=2)
    with pytest.raises(ShapeError, match="one input per device"):
        op(b, "all_reduce", x, b.input("y", (3, 4)))
