"""The search on a real zoo model with the verified rule catalogue."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.optimize import SearchConfig, search
from rewrite.optimize.pareto import non_dominated
from rewrite.verify import Verifier


@pytest.fixture(scope="module")
def gpt2(zoo_gpt2):
    return zoo_gpt2


@pytest.mark.slow  # building the model takes ~10-20 s on a loaded machine
def test_gpt2_small_search_with_the_catalogue(gpt2, tmp_path) -> None:
    cfg = SearchConfig(max_steps=120, seed=0, epsilon=0.0)
    res = search(gpt2, cfg, verify_cache=str(tmp_path / "v.sqlite"))
    assert res.pareto and res.reduction("latency") > 0.05
    Y = np.array([s.objectives for s in res.pareto])
    assert non_dominated(Y).all()
    assert res.final_checks and all(res.final_checks.values())
    checker = Verifier(mode="auto", tests=2, seed=1234)  # an independent whole-graph check
    for sol in res.pareto:
        assert checker.check(gpt2, sol.graph).ok
    m = res.metrics()
    assert len([k for k in m if k.startswith("rule.") and k.endswith(".fired")]) == len(
        res.rule_names
    )
    assert sum(v for k, v in m.items() if k.endswith(".improved")) >= 1
