"""The tuner's space over the rewrite search's knobs and rule priors (`search_space`), and the
mapping of its configurations back onto a `SearchConfig` and rule priors."""

from __future__ import annotations

import dataclasses

import pytest

from rewrite.errors import SearchConfigError, SearchError
from rewrite.optimize import SearchConfig, search_suite
from rewrite_tuner.knobs import DEFAULT_TUNED, config_from_params, priors_from_params
from rewrite_tuner.prior_family import PriorFamily, RuleEvidence
from rewrite_tuner.scores import suite_objectives
from rewrite_tuner.space import search_space
from spaces import Simplex
from tests.rewrite.search_rules import TEST_RULES
from tests.rewrite.test_search_suite import NAMES, SUITE


def test_search_space_round_trip() -> None:
    rules = ["r1", "r2", "r3"]
    space = search_space(rules)
    assert set(space.names) == {*DEFAULT_TUNED, "priors"}
    assert isinstance(space["priors"], Simplex)
    for params in space.sample(8, seed=3):
        config, priors = config_from_params(params)
        assert priors is not None and abs(sum(priors.values()) - 1) < 1e-9
        for name in DEFAULT_TUNED:
            assert getattr(config, name) == pytest.approx(params[name])
    config, _ = config_from_params(space.default())
    assert config.tau == SearchConfig().tau


def test_search_space_bad_knob() -> None:
    with pytest.raises(SearchConfigError, match="Cannot tune"):
        search_space(["a", "b"], tune=["seed"])
    with pytest.raises(SearchConfigError, match="Range of 'tau'"):
        search_space(["a", "b"], tune=["tau"], ranges={"tau": (0.0, 1.0)})


def test_space_point_runs_on_a_suite() -> None:
    space = search_space(NAMES)
    params = space.sample(1, seed=5)[0]
    cfg, priors = config_from_params(params, SearchConfig(max_steps=40))
    res = search_suite(SUITE, cfg, priors, rules=TEST_RULES, verify_cache=None)
    obj = suite_objectives(res)
    assert set(obj) == {"latency_reduction", "peak_memory_reduction", "hypervolume", "search_time"}
    assert 0.0 <= obj["latency_reduction"] < 1.0 and obj["search_time"] > 0
    m = res.metrics()
    assert m["steps"] == 80
    fired = sum(r.metrics()["rule.test_neg_neg.fired"] for r in res.runs())
    assert m["rule.test_neg_neg.fired"] == fired
    assert m["work.rewrites"] == sum(r.metrics()["work.rewrites"] for r in res.runs()) > 0
    assert {"a.hypervolume", "b.hypervolume", "a.best.latency.ratio"} <= set(m)
    assert 0.0 <= m["cache.dedupe.hit_rate"] <= 1.0
    with pytest.raises(SearchError, match="at least one workload"):
        search_suite({}, cfg)
    with pytest.raises(SearchError, match="at least one seed"):
        search_suite(SUITE, cfg, seeds=[])


def test_an_informed_prior_family_is_a_small_space_decoding_to_rule_priors() -> None:
    runs = search_suite(SUITE, SearchConfig(max_steps=40), rules=TEST_RULES, verify_cache=None)
    evidence = RuleEvidence.from_results(runs.runs())
    assert evidence.runs == 2 and set(evidence.fired) == set(NAMES)
    used = sum(len(s.steps) for r in runs.runs() for s in r.pareto)
    assert sum(evidence.used.values()) == used
    family = PriorFamily.from_rules(TEST_RULES, evidence)
    assert PriorFamily.from_dict(family.to_dict()) == family
    space = search_space(NAMES, tune=("tau", "beta"), family=family)
    assert space.dim == 2 + 2  # two knobs, weight and specificity (one family: no weights)
    default = space.default()
    cfg, priors = config_from_params(default)
    assert priors == pytest.approx({n: 1 / 3 for n in NAMES})  # weight 0 is uniform
    point = {**default, "prior_weight": 1.0}
    informed = priors_from_params(point)
    rates = family.rates()
    assert informed is not None and sum(informed.values()) == pytest.approx(1.0)
    total = sum(rates.values())
    assert informed == pytest.approx({n: rates[n] / total for n in NAMES})
    with pytest.raises(SearchConfigError, match="prior family's rules"):
        search_space(NAMES[:2], family=family)
    # two families: one log-scale multiplier each, no simplex (no equality constraint)
    two = dataclasses.replace(family, families={**family.families, "test_neg_neg": "other"})
    space2 = search_space(NAMES, tune=(), family=two)
    assert space2.names == [
        "prior_weight",
        "prior_specificity",
        "family_algebra",
        "family_other",
        "prior_model",
    ]
    assert not space2.equality_constraints
    up = {**space2.default(), "prior_weight": 1.0, "family_other": 8.0, "family_algebra": 0.125}
    even = {**up, "family_other": 1.0, "family_algebra": 1.0}
    p_up, p_even = priors_from_params(up), priors_from_params(even)
    assert p_up is not None and p_even is not None
    assert p_up["test_neg_neg"] > p_even["test_neg_neg"]
    assert config_from_params(up)[0] == SearchConfig()  # family multipliers are not knobs
