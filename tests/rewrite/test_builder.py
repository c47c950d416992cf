"""GraphBuilder boundary checks: unique input names, consistent shared params."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite import Graph, GraphBuilder, GraphError, evaluate


def test_duplicate_input_names_are_rejected() -> None:
    b = GraphBuilder("d")
    b.input("x", (4,))
    with pytest.raises(GraphError, match=r"input names must be unique.*'x'"):
        b.input("x", (4,))


def test_graph_validation_rejects_duplicate_input_names() -> None:
    b = GraphBuilder("d")
    x, y = b.input("x", (4,)), b.input("y", (4,))
    g = b.build([b.sub(x, y)])
    renamed = g.node(y.node)
    nodes = dict(g.nodes)
    nodes[y.node] = type(renamed)(
        renamed.id,
        renamed.op,
        {**renamed.attrs, "name": "x"},
        renamed.inputs,
        renamed.in_types,
        renamed.types,
    )
    with pytest.raises(GraphError, match=r"both named 'x'"):
        Graph(nodes, g.inputs, g.outputs)


def test_params_with_one_name_are_one_shared_weight() -> None:
    b = GraphBuilder("tied")
    x = b.input("x", (2, 3))
    w1, w2 = b.param("w", (3, 3)), b.param("w", (3, 3))
    g = b.build([b.add(b.matmul(x, w1), b.matmul(x, w2))])
    assert [n.attrs["name"] for n in g.params()] == ["w", "w"]
    xs, w = np.ones((2, 3), np.float32), np.eye(3, dtype=np.float32)
    (out,) = evaluate(g, [xs], {"w": w})
    np.testing.assert_allclose(out, 2 * xs)


@pytest.mark.parametrize(("shape", "dtype"), [((3, 4), "float32"), ((3, 3), "float16")])
def test_params_with_one_name_and_another_type_are_rejected(
    shape: tuple[int, ...], dtype: str
) -> None:
    b = GraphBuilder("bad")
    b.param("w", (3, 3))
    with pytest.raises(GraphError, match=r"'w' was declared as float32\[3,3\]"):
        b.param("w", shape, dtype)
