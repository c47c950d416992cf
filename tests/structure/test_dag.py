from __future__ import annotations

import json

import pytest

from structure import (
    Edge,
    FeatureMap,
    Formula,
    Knowledge,
    KnowledgeError,
    Structure,
    StructureError,
    StructureFormatError,
    fit_features,
)


def _structure() -> Structure:
    return Structure(
        params=("a", "b"),
        metrics=("t1", "t2", "total"),
        objectives=("speed",),
        edges=(
            Edge("a", "t1", 0.9),
            Edge("b", "t2", 0.6),
            Edge("t1", "total", 1.0, "required"),
            Edge("t2", "total", 1.0, "required"),
            Edge("total", "speed", 0.75),
            Edge("a", "speed", 0.0, "direct"),
        ),
        formulas=(Formula("total", ("t1", "t2")),),
        transforms={"t1": "log1p"},
        n_trials=12,
    )


def _roundtrip_structure(s: Structure) -> Structure:
    return Structure.from_json(json.dumps(json.loads(s.to_json())))


ROUND_TRIPS = [
    ("structure", _structure, _roundtrip_structure),
    (
        "knowledge",
        lambda: Knowledge(
            required=(("t1", "total"),),
            forbidden=(("a", "t2"),),
            formulas=(
                Formula("total", ("t1", "t2"), op="product", weights=(1.0, 2.0), scale=-1.0),
            ),
            phase_order=("parse.", "saturate."),
            candidates=(("a", "t1"),),
        ),
        lambda k: Knowledge.from_dict(json.loads(json.dumps(k.to_dict()))),
    ),
    (
        "feature_map",
        lambda: fit_features(
            {"rule.a.hits": [1.0, 5.0, 9.0, 2.0], "rule.b.hits": [0.0, 3.0, 1.0, 7.0]},
            __import__("numpy").array([[1.0], [2.0], [3.0], [4.0]]),
        ),
        lambda f: FeatureMap.from_dict(json.loads(json.dumps(f.to_dict()))),
    ),
]


@pytest.mark.parametrize(
    ("name", "make", "roundtrip"), ROUND_TRIPS, ids=[r[0] for r in ROUND_TRIPS]
)
def test_json_round_trip(name, make, roundtrip) -> None:
    obj = make()
    assert roundtrip(obj) == obj


def test_topological_order_puts_parents_first() -> None:
    s = _structure()
    order = s.topological_order()
    assert order.index("t1") < order.index("total") < order.index("speed")
    assert s.parents("speed") == ["a", "total"]


def test_newer_format_version_fails_with_upgrade_hint() -> None:
    d = _structure().to_dict()
    d["format_version"] = 99
    with pytest.raises(StructureFormatError, match="upgrade"):
        Structure.from_dict(d)


@pytest.mark.parametrize(
    "edge",
    [Edge("t1", "a"), Edge("speed", "t1"), Edge("a", "b"), Edge("t2", "t1"), Edge("nope", "t1")],
    ids=["into-param", "out-of-objective", "param-param", "cycle", "unknown"],
)
def test_invalid_edges_are_rejected(edge: Edge) -> None:
    base = (Edge("t1", "t2"),)
    with pytest.raises(StructureError):
        Structure(("a", "b"), ("t1", "t2"), ("speed",), (*base, edge))


def test_formula_inputs_must_be_parents() -> None:
    with pytest.raises(StructureError, match="parents"):
        Structure(("a",), ("t1",), ("speed",), (Edge("a", "t1"),), (Formula("speed", ("t1",)),))


@pytest.mark.parametrize(
    "kwargs",
    [
        {"phase_order": "search"},  # a string would be read letter by letter
        {"required": ("x0", "m")},  # one edge, not wrapped in a list
        {"required": (("a", "b", "c"),)},
        {"forbidden": 3},
        {"formulas": ({"node": "m", "inputs": ["t"]},)},  # the dict form is for from_dict
        {"candidates": ("x0", "m")},
        {"candidates": (("x0", "m"),), "forbidden": (("x0", "m"),)},  # both: which is it?
    ],
)
def test_malformed_knowledge_is_a_clear_error(kwargs: dict) -> None:
    with pytest.raises(KnowledgeError, match="Knowledge"):
        Knowledge(**kwargs)


def test_formula_weights_must_be_numbers() -> None:
    with pytest.raises(KnowledgeError, match="weights must be numbers"):
        Formula("speed", ("t1",), weights=("x",))


@pytest.mark.parametrize(
    "text",
    [
        "[1]",
        '{"format_version": 1, "params": [], "metrics": [], "objectives": [], '
        '"edges": [{"source": "a"}]}',
    ],
)
def test_malformed_stored_structure_is_a_format_error(text: str) -> None:
    with pytest.raises(StructureFormatError):
        Structure.from_json(text)
    with pytest.raises(StructureFormatError, match="feature map"):
        FeatureMap.from_dict(json.loads(text) if text.startswith("{") else {})


def test_formulas_read_no_parameters() -> None:
    edges = (Edge("a", "t1"), Edge("t1", "speed"), Edge("a", "speed"))
    with pytest.raises(StructureError, match="reads parameters"):
        Structure(("a",), ("t1",), ("speed",), edges, (Formula("speed", ("t1", "a")),))
