"""One configuration searched over a suite of workloads and seeds, and the exported priors file
used offline by search(priors=path). Scoring a suite is the tuning side's
(tests/rewrite_tuner/test_scores.py)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from rewrite.errors import SearchError
from rewrite.optimize import PriorsFile, SearchConfig, search, search_suite
from tests.rewrite.search_rules import TEST_RULES, chain_graph

SUITE = {
    "a": chain_graph([128, 8, 128, 8, 128], negs=1, name="a"),
    "b": chain_graph([64, 4, 64, 4, 64, 4, 64], negs=2, name="b"),
}
NAMES = [r.name for r in TEST_RULES]


def test_seeds_run_in_order_and_metrics_average() -> None:
    cfg = SearchConfig(max_steps=30)
    res = search_suite(SUITE, cfg, rules=TEST_RULES, verify_cache=None, seeds=[3, 4, 5])
    assert res.seeds == (3, 4, 5) and [r.config["seed"] for r in res.results["a"]] == [3, 4, 5]
    one = search_suite(SUITE, cfg.replace(seed=4), rules=TEST_RULES, verify_cache=None)
    assert one.runs()[0].hv_curve().tolist() == res.results["a"][1].hv_curve().tolist()
    assert res.metrics()["steps"] == 60  # two workloads of 30 steps, averaged over seeds


def test_sharding_rules_need_a_mesh_of_two_devices() -> None:
    from rewrite.optimize import default_rules

    sharding = [r for r in default_rules() if r.family == "sharding"]
    g = SUITE["a"]
    with pytest.raises(SearchError, match="at least 2 devices"):
        search(g, SearchConfig(max_steps=2), rules=sharding, verify_cache=None)
    res = search(g, SearchConfig(max_steps=5), rules=[*TEST_RULES, *sharding], verify_cache=None)
    assert res.rule_names == NAMES  # one device: no sharding rule, so no collective
    # a priors dict naming a sharding rule stays valid on one device
    pri = {sharding[0].name: 0.5, "test_neg_neg": 0.5}
    res = search(g, SearchConfig(max_steps=5), pri, rules=[*TEST_RULES, *sharding])
    assert res.priors["test_neg_neg"] > res.priors["test_mm_assoc_left"]
    two = search(g, SearchConfig(max_steps=5, devices=2), rules=[*TEST_RULES, *sharding])
    assert two.rule_names == [*NAMES, *(r.name for r in sharding)]


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
    # a SearchConfig is used as given, and the tuned knobs it drops are named loudly
    with pytest.warns(
        UserWarning, match=r"overridden.*tau: file 0.5, config 0.3.*max_steps: file 30, config 5"
    ):
        res2 = search(
            SUITE["a"], SearchConfig(max_steps=5), priors=path, rules=TEST_RULES, verify_cache=None
        )
    assert res2.stats.steps == 5 and res2.config["tau"] == SearchConfig().tau
    # a dict of knobs is merged over the file's: the other tuned knobs are kept
    res3 = search(SUITE["a"], {"max_steps": 5}, priors=path, rules=TEST_RULES, verify_cache=None)
    assert res3.stats.steps == 5 and res3.config["tau"] == 0.5 and res3.config["m"] == 2
    # a SearchConfig equal to the file's knobs is no override: no warning
    same = SearchConfig.from_dict(doc["search_config"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        search(SUITE["a"], same, priors=path, rules=TEST_RULES, verify_cache=None)
    saved = PriorsFile(res.priors, res.config).save(tmp_path / "again.json")
    again = search(SUITE["a"], priors=saved, rules=TEST_RULES, verify_cache=None)
    assert again.config == res.config and again.priors == pytest.approx(res.priors)


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


def test_a_suite_on_two_processes_gives_what_one_gives() -> None:
    """The calibration and the validation of `tuner demo` run their searches on the study's
    workers (issue 52: they ran one at a time while the workers waited); seeded searches give
    the same results either way."""
    from rewrite.optimize import search_suite

    cfg = SearchConfig(max_steps=40, epsilon=0.0)
    one = search_suite(SUITE, cfg, None, "h100", (0, 1), rules=TEST_RULES, verify_cache=None)
    two = search_suite(
        SUITE, cfg, None, "h100", (0, 1), workers=2, rules=TEST_RULES, verify_cache=None
    )
    for w in SUITE:
        got = [[(s.graph.hash, s.objectives) for s in r.pareto] for r in two.results[w]]
        want = [[(s.graph.hash, s.objectives) for s in r.pareto] for r in one.results[w]]
        assert got == want and [r.hv_trace[-1][2] for r in two.results[w]] == [
            r.hv_trace[-1][2] for r in one.results[w]
        ]


def test_a_device_file_is_loaded_once_per_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 54: a search loads its device profile once and passes the profile on, rather than
    every cost call looking the path up again."""
    import rewrite.devices as devices

    path = tmp_path / "dev.json"
    path.write_text(json.dumps(devices.load_device("h100").to_dict()))
    calls: list[Path] = []
    real = devices._load_file
    monkeypatch.setattr(devices, "_load_file", lambda p: calls.append(p) or real(p))
    cfg = SearchConfig(max_steps=20)
    res = search(SUITE["a"], cfg, device=path, rules=TEST_RULES, verify_cache=None)
    assert len(calls) == 1 and res.stats.steps == 20
    want = search(SUITE["a"], cfg, device="h100", rules=TEST_RULES, verify_cache=None)
    assert [s.objectives for s in res.pareto] == [s.objectives for s in want.pareto]
