"""`rewrite.lowering`'s process-wide table of torch sources: an entry lives only as long as its
graph and its module, and the table can be cleared."""

from __future__ import annotations

import gc

import pytest

torch = pytest.importorskip("torch")

from rewrite.lowering import source  # noqa: E402
from rewrite.torch_import import from_torch  # noqa: E402


def test_a_source_lives_as_long_as_its_graph_and_its_module() -> None:
    model = torch.nn.Linear(4, 3)
    graph = from_torch(model, (torch.randn(2, 4),))
    assert source.source_of(graph).module is model
    uid = graph.uid
    del graph
    gc.collect()
    assert uid not in source._SOURCES  # the graph died: nothing can look its entry up
    graph = from_torch(model, (torch.randn(2, 4),))
    uid = graph.uid
    del model
    gc.collect()
    assert uid not in source._SOURCES and source.source_of(graph) is None  # the module died


def test_the_sources_can_be_cleared() -> None:
    model = torch.nn.Linear(4, 3)
    graph = from_torch(model, (torch.randn(2, 4),))
    source.clear_sources()
    assert source.source_of(graph) is None
    del graph
    gc.collect()  # the finalizers of a cleared entry find nothing to drop


def test_the_backend_history_is_bounded() -> None:
    from rewrite.pytorch import dynamo

    assert dynamo.history.maxlen == dynamo.HISTORY_SIZE
