"""A trial's objectives: a suite of searches scored against the defaults' `Baseline`."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.errors import SearchError
from rewrite.optimize import SearchConfig, search_suite
from rewrite_tuner.scores import SCORES, Baseline, run_scores, suite_objectives
from tests.rewrite.search_rules import TEST_RULES, chain_graph

SUITE = {
    "a": chain_graph([128, 8, 128, 8, 128], negs=1, name="a"),
    "b": chain_graph([64, 4, 64, 4, 64, 4, 64], negs=2, name="b"),
}


def test_seeds_give_means_and_standard_errors() -> None:
    cfg = SearchConfig(max_steps=30)
    res = search_suite(SUITE, cfg, rules=TEST_RULES, verify_cache=None, seeds=[3, 4, 5])
    one = search_suite(SUITE, cfg.replace(seed=4), rules=TEST_RULES, verify_cache=None)
    obj = suite_objectives(res)
    per_seed = [sum(res.results[w][i].hypervolume for w in SUITE) / len(SUITE) for i in range(3)]
    assert obj["hypervolume"] == pytest.approx(np.mean(per_seed))
    assert obj["hypervolume.sem"] == pytest.approx(np.std(per_seed, ddof=1) / np.sqrt(3))
    assert "hypervolume.sem" not in suite_objectives(one)


def test_scores_against_a_baseline() -> None:
    cfg = SearchConfig(max_steps=40)
    default = search_suite(SUITE, cfg, rules=TEST_RULES, verify_cache=None, seeds=[0, 1])
    base = {w: Baseline.of(runs) for w, runs in default.results.items()}
    for w, b in base.items():
        assert b.hv_input == default.results[w][0].hv_trace[0][2] < b.hv_final
        assert Baseline.from_dict(b.to_dict()) == b
    scores = run_scores(default, base)
    assert set(scores) == set(SCORES) and scores["anytime_hv"].shape == (2, 2)
    # the default reaches its own median final value; anytime stays below the final ratio
    assert np.all(scores["anytime_hv"] <= scores["final_hv"] + 1e-12)
    assert np.median(scores["final_hv"]) == pytest.approx(1.0)
    r = default.results["a"][0]
    curve = r.hv_curve(40)
    assert curve.shape == (41,) and curve[0] == r.hv_trace[0][2] and curve[-1] == r.hypervolume
    assert np.all(np.diff(curve) >= 0)
    reach = scores["reach"][0, 0]
    assert reach == 41 or curve[int(reach)] >= base["a"].hv_final * (1 - 1e-9)
    obj = suite_objectives(default, base)
    assert {"anytime_hv", "anytime_hv.sem", "effort", "reach.sem"} <= set(obj)
    with pytest.raises(SearchError, match="No baseline"):
        run_scores(default, {"a": base["a"]})
