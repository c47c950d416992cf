from __future__ import annotations

import numpy as np
import pytest

from structure import LearnConfig, learn_structure
from structure.errors import StructureLearningError
from structure.select import SelectConfig, distance_correlation, select_parents

FAST = SelectConfig(fit_maxiter=60)


def _params(X: np.ndarray) -> dict[str, np.ndarray]:
    return {f"x{i}": X[:, i] for i in range(X.shape[1])}


def test_finds_a_non_monotone_metric_parent() -> None:
    rng = np.random.default_rng(1)
    X = rng.random((30, 4))
    radius = np.sqrt(X[:, 0] ** 2 + X[:, 1] ** 2)
    y = np.cos(9.0 * radius)  # non-monotone in the metric, rings in (x0, x1)
    candidates = {**_params(X), "radius": radius, "noise": rng.standard_normal(30)}
    sel = select_parents(y, candidates, base=list(_params(X)), config=FAST)
    assert not sel.used_base and sel.parents == ("radius",)
    assert sel.score > sel.base_score + FAST.min_gain and sel.predictable
    assert sel.strength("radius") == 1.0 and sel.strength("x0") == 0.0


def test_keeps_the_parameter_an_added_metric_interacts_with() -> None:
    rng = np.random.default_rng(2)
    X = rng.random((40, 4))
    m = np.sin(6 * X[:, 0]) * np.sin(6 * X[:, 1]) * np.sin(6 * X[:, 2])
    y = m * np.sqrt(10 * X[:, 3]) * np.sin(10 * X[:, 3])  # Alpine2's next link
    sel = select_parents(y, {**_params(X), "m": m}, base=list(_params(X)), config=FAST)
    assert set(sel.parents) == {"m", "x3"}


def test_unstructured_target_keeps_the_base_set() -> None:
    rng = np.random.default_rng(3)
    X = rng.random((25, 3))
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2
    noise = {f"n{i}": rng.standard_normal(25) for i in range(6)}
    sel = select_parents(y, {**_params(X), **noise}, base=list(_params(X)), config=FAST)
    assert sel.used_base and sel.parents == ("x0", "x1", "x2") and sel.gains == {}


def test_required_inputs_stay_and_unknown_names_are_a_clear_error() -> None:
    rng = np.random.default_rng(4)
    X = rng.random((15, 2))
    y = X[:, 0]
    sel = select_parents(y, _params(X), required=["x1"], config=FAST)
    assert "x1" in sel.parents
    with pytest.raises(StructureLearningError, match="not among the candidates"):
        select_parents(y, _params(X), base=["x9"])
    with pytest.raises(StructureLearningError, match="max_parents"):
        SelectConfig(max_parents=0)


def test_distance_correlation_sees_non_monotone_dependence() -> None:
    rng = np.random.default_rng(5)
    a = rng.uniform(-1, 1, 60)
    assert abs(np.corrcoef(a, a**2)[0, 1]) < 0.3
    assert distance_correlation(a, a**2) > 0.4
    assert distance_correlation(a, rng.standard_normal(60)) < distance_correlation(a, a**2)


def test_learned_structure_uses_selected_parents_and_skips_unpredictable_metrics() -> None:
    rng = np.random.default_rng(6)
    n = 40
    X = rng.random((n, 3))
    radius = np.sqrt(X[:, 0] ** 2 + X[:, 1] ** 2)
    noise = rng.standard_normal(n)
    o = np.cos(9.0 * radius) + 0.1 * noise  # the noise metric explains o but nothing drives it
    s = learn_structure(
        {f"x{i}": X[:, i : i + 1] for i in range(3)},
        {"radius": radius, "noise": noise},
        {"o": o},
        config=LearnConfig(bootstrap=3, select=FAST),
    )
    assert "radius" in s.parents("o") and "noise" not in s.parents("o")
    assert {"x0", "x1"} <= set(s.parents("radius"))
    off = learn_structure(
        {f"x{i}": X[:, i : i + 1] for i in range(3)},
        {"radius": radius, "noise": noise},
        {"o": o},
        config=LearnConfig(bootstrap=3, select=None),
    )
    assert {"x0", "x1", "x2"} <= set(off.parents("o"))  # PC's parents plus direct edges


def test_forbidden_parameter_edges_stay_out_of_the_selection() -> None:
    rng = np.random.default_rng(7)
    X = rng.random((20, 3))
    m = np.sin(5 * X[:, 0])
    o = np.cos(4 * m) + X[:, 2]
    from structure import Knowledge

    s = learn_structure(
        {f"x{i}": X[:, i : i + 1] for i in range(3)},
        {"m": m},
        {"o": o},
        Knowledge(forbidden=(("x1", "o"),)),
        LearnConfig(bootstrap=2, select=FAST),
    )
    assert "x1" not in s.parents("o")


def test_keep_base_adds_metric_parents_to_the_parameters() -> None:
    rng = np.random.default_rng(1)
    X = rng.random((30, 4))
    radius = np.sqrt(X[:, 0] ** 2 + X[:, 1] ** 2)
    y = np.cos(9.0 * radius)
    candidates = {**_params(X), "radius": radius, "noise": rng.standard_normal(30)}
    config = SelectConfig(fit_maxiter=60, keep_base=True)
    sel = select_parents(y, candidates, base=list(_params(X)), config=config)
    assert not sel.used_base and set(sel.parents) == {"x0", "x1", "x2", "x3", "radius"}
    assert sel.gains.keys() == {"radius"} and sel.strength("radius") == 1.0
    # A sparse selection (a metric's parameters) still drops the ones that do not help.
    sparse = select_parents(y, candidates, base=list(_params(X)), config=config, sparse=True)
    assert "x3" not in sparse.parents
