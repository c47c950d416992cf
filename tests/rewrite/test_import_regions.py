"""Import of grad-mode and autocast regions, the higher-order ops torch.export leaves for
``torch.no_grad()`` and ``torch.autocast`` blocks (e.g. the rotary embedding of transformers
< 5.24 is under ``@torch.no_grad()``)."""

from __future__ import annotations

import operator

import numpy as np
import torch

from rewrite import evaluate, from_torch
from rewrite.torch_import import _inline_grad_regions


class _NoGrad(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("scale", torch.arange(4.0), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        with torch.no_grad():
            table = torch.cos(self.scale) * 2  # constant: folded inside the region
            z = torch.sin(y) + table
        return y * z


class _Autocast(_NoGrad):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = self.lin(x)
        return y.float() + 1


def _import_and_run(m: torch.nn.Module) -> tuple[dict[str, int], np.ndarray, np.ndarray]:
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))
    g = from_torch(m.eval(), (x,))
    state = {k: v.detach().numpy() for k, v in m.state_dict().items()}
    (got,) = evaluate(g, [x.numpy()], state)
    with torch.no_grad():
        ref = m(x).numpy()
    return dict(g.op_counts()), got, ref


def test_no_grad_region_is_inlined_and_folded() -> None:
    m = _NoGrad()
    ep = torch.export.export(m.eval(), (torch.randn(2, 4),))
    assert any("wrap_with_set_grad_enabled" in str(n.target) for n in ep.graph.nodes)
    counts, got, ref = _import_and_run(m)
    assert "opaque" not in counts and "cos" not in counts and counts["sin"] == 1
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5)


def test_autocast_region_keeps_its_casts() -> None:
    counts, got, ref = _import_and_run(_Autocast())
    assert "opaque" not in counts and counts["cast"] >= 3  # x, weight, bias to bf16; back
    np.testing.assert_allclose(got, ref, rtol=2e-2, atol=2e-2)


def test_nested_grad_regions_are_inlined_recursively() -> None:
    hop = torch.ops.higher_order.wrap_with_set_grad_enabled
    inner = torch.fx.Graph()
    a = inner.placeholder("a")
    inner.output((inner.call_function(torch.sin, (a,)),))
    mid = torch.fx.Graph()
    b = mid.placeholder("b")
    region = mid.call_function(hop, (True, mid.get_attr("sub"), b))
    got = mid.call_function(torch.mul, (mid.call_function(operator.getitem, (region, 0)), 2))
    mid.output((got, b))
    outer = torch.fx.Graph()
    x = outer.placeholder("x")
    region = outer.call_function(hop, (False, outer.get_attr("sub"), x))
    s, t = (outer.call_function(operator.getitem, (region, i)) for i in (0, 1))
    outer.output(outer.call_function(torch.add, (s, t)))
    mid_gm = torch.fx.GraphModule({"sub": torch.fx.GraphModule({}, inner)}, mid)
    gm = torch.fx.GraphModule({"sub": mid_gm}, outer)

    flat = _inline_grad_regions(gm)
    assert not any(n.target is hop for n in flat.nodes)
    assert [n.name for n in flat.nodes if n.op in ("placeholder", "output")] == ["x", "output"]
    v = torch.randn(3)
    torch.testing.assert_close(torch.fx.GraphModule(gm, flat)(v), torch.sin(v) * 2 + v)
