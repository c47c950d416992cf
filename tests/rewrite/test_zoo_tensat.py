"""The TASO/Tensat graphs: small builds import faithfully; full builds have the papers' shapes."""

from __future__ import annotations

import pytest
import torch

from rewrite import zoo_tensat
from rewrite.errors import RewriteError
from rewrite.lowering.module import to_module

#: Op counts each small build must hold (the architecture, not the import's choices).
SMALL_OPS = {
    "bert": {"mm": 8, "matmul": 4, "transpose": 8},  # 2 blocks: q, k, v, linear; q k, (q k) v
    "nasrnn": {"mm": 32, "tanh": 16},  # 2 steps of 16 products, 8 tanh
    "resnext50": {"conv2d": 9, "add": 2},  # stem, 2 blocks of 3 convolutions + 2 projections
    "nasneta": {"conv2d": 37, "concat": 3},  # stem, 2 normal and 1 reduction cell of 12
    "inceptionv3": {"conv2d": 94, "concat": 11},
    "squeezenet": {"conv2d": 26, "concat": 8},  # stem, 8 fires x 3, classifier
    "vgg19": {"conv2d": 16, "max_pool2d": 5, "mm": 3},
}


@pytest.mark.parametrize("name", zoo_tensat.names())
def test_small_build_imports_and_runs_as_its_module(name: str) -> None:
    m = zoo_tensat.model(name, "small")
    g = m.to_graph()
    ops = g.op_counts()
    assert {k: ops[k] for k in SMALL_OPS[name]} == SMALL_OPS[name]
    # the graph handed back as a module matches the PyTorch module it was imported from
    module = to_module(g, m.module, inputs=list(m.args))
    with torch.no_grad():
        want, got = m.module(*m.args), module(*m.args)
    want = want if isinstance(want, tuple) else (want,)
    got = got if isinstance(got, tuple) else (got,)
    assert len(got) == len(want) == len(g.outputs)
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_bad_names_and_sizes_are_refused() -> None:
    with pytest.raises(RewriteError, match="did you mean 'nasrnn'"):
        zoo_tensat.model("nasrn")
    with pytest.raises(RewriteError, match="size must be one of"):
        zoo_tensat.model("vgg19", "tiny")
    with pytest.raises(RewriteError, match="device must be 'cpu' or 'meta'"):
        zoo_tensat.model("vgg19", device="cuda:7")


#: Output shapes at the papers' sizes (batch 1).
FULL_OUT = {
    "bert": [(64, 1024)] * 9,
    "nasrnn": [(1, 512)],
    "resnext50": [(1, 2048, 7, 7)],
    "nasneta": [(1, 5 * 1024, 7, 7)],
    "inceptionv3": [(1, 2048, 1, 1)],
    "squeezenet": [(1, 1000)],
    "vgg19": [(1, 1000)],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo_tensat.names())
def test_full_build_has_the_papers_shapes(name: str) -> None:
    g = zoo_tensat.build(name, "full")
    assert [t.shape for t in g.output_types] == FULL_OUT[name]
