"""A trial's path: a point of the space -> search on a suite -> objectives and metrics; and
the exported priors file used offline by search(priors=path)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewrite.errors import SearchError
from rewrite.optimize import (
    RulePriors,
    SearchConfig,
    config_from_params,
    search,
    search_space,
    search_suite,
)
from tests.rewrite.search_rules import TEST_RULES, chain_graph

SUITE = {
    "a": chain_graph([128, 8, 128, 8, 128], negs=1, name="a"),
    "b": chain_graph([64, 4, 64, 4, 64, 4, 64], negs=2, name="b"),
}
NAMES = [r.name for r in TEST_RULES]


def test_space_point_runs_on_a_suite() -> None:
    space = search_space(NAMES)
    params = space.sample(1, seed=5)[0]
    cfg, priors = config_from_params(params, SearchConfig(max_steps=40))
    res = search_suite(SUITE, cfg, priors, rules=TEST_RULES, verify_cache=None)
    obj = res.objectives()
    assert set(obj) == {"latency_reduction", "peak_memory_reduction", "hypervolume", "search_time"}
    assert 0.0 <= obj["latency_reduction"] < 1.0 and obj["search_time"] > 0
    m = res.metrics()
    assert m["steps"] == 80
    fired = sum(r.metrics()["rule.test_neg_neg.fired"] for r in res.results.values())
    assert m["rule.test_neg_neg.fired"] == fired
    assert {"a.hypervolume", "b.hypervolume", "a.best.latency.ratio"} <= set(m)
    assert 0.0 <= m["cache.dedupe.hit_rate"] <= 1.0
    with pytest.raises(SearchError, match="at least one workload"):
        search_suite({}, cfg)


def test_exported_priors_file_drives_an_offline_search(tmp_path: Path) -> None:
    doc = {
        "format_version": 1,
        "kind": "rewrite-tuner/rule-priors",
        "priors": {"test_mm_assoc_left": 0.6, "test_mm_assoc_right": 0.1, "test_neg_neg": 0.3},
        "search_config": {"tau": 0.5, "m": 2, "max_steps": 30, "seed": 3},
        "provenance": {"study": "s", "trial": 1, "values": {"hypervolume": 0.3}},
    }
    path = tmp_path / "priors.json"
    path.write_text(json.dumps(doc))
    res = search(SUITE["a"], priors=str(path), rules=TEST_RULES, verify_cache=None)
    assert res.config["tau"] == 0.5 and res.config["m"] == 2 and res.stats.steps == 30
    assert res.priors["test_mm_assoc_left"] == pytest.approx(0.6)
    # an explicit config wins over the file's search_config
    res2 = search(
        SUITE["a"], SearchConfig(max_steps=5), priors=path, rules=TEST_RULES, verify_cache=None
    )
    assert res2.stats.steps == 5 and res2.config["tau"] == SearchConfig().tau
    saved = RulePriors(res.priors).save(tmp_path / "again.json")
    assert RulePriors.load(saved, known_rules=NAMES) == RulePriors(res.priors)


def test_unknown_knob_in_file_warns(tmp_path: Path) -> None:
    doc = {
        "format_version": 1,
        "kind": "rewrite-tuner/rule-priors",
        "priors": {"test_neg_neg": 1.0},
        "search_config": {"max_steps": 5, "workloads": 3},
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    with pytest.warns(UserWarning, match="workloads"):
        res = search(SUITE["a"], priors=path, rules=TEST_RULES, verify_cache=None)
    assert res.stats.steps == 5
