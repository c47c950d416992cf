"""Rules as data: catalogue invariants, matching, application, the registry gate and the docs."""

from __future__ import annotations

import numpy as np
import pytest

from rewrite.errors import MatchError, RuleError, RuleRejectedError
from rewrite.rules import FAMILIES, RuleRegistry, catalogue, rules_table, verify_rule
from rewrite.rules.docs import DOC_PATH
from rewrite.verify import Verifier
from tests.rewrite.rule_fixtures import BACKENDS, rules_by_name, session_cache, wrong_rules

RULES = catalogue()
NAMES = [r.name for r in RULES]


def test_catalogue_size_families_and_unique_names():
    assert len(RULES) >= 30
    assert len(set(NAMES)) == len(NAMES)
    assert {r.family for r in RULES} == set(FAMILIES)


def test_inverses_point_back():
    by = rules_by_name()
    for r in RULES:
        if r.inverse is not None:
            assert by[r.inverse].inverse == r.name, r.name
            assert {r.direction, by[r.inverse].direction} == {"forward", "backward"}


@pytest.mark.parametrize("name", NAMES)
def test_rule_is_proven_by_z3(name):
    from rewrite.prove import prove_rule

    res = prove_rule(rules_by_name()[name], cache=session_cache())
    assert res.verdict == "proved", res.detail


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NAMES)
def test_rule_passes_random_testing_on_three_shapes(name, backend):
    rule = rules_by_name()[name]
    v = Verifier(mode="auto", tests=2, backend=backend)
    shapes = set()
    for seed in range(3):
        g = rule.sample_graph(seed, lo=2, hi=8)
        shapes.add(g.input_types)
        res = v.check_rule(rule, [g])
        assert res.ok, res.detail
    assert len(shapes) >= 2  # the sizes really vary


@pytest.mark.parametrize("name", NAMES)
def test_apply_shares_unchanged_nodes_and_region_check_passes(name):
    rule = rules_by_name()[name]
    g = rule.sample_graph(7, lo=2, hi=6)
    site = rule.matches(g)[0]
    child = rule.apply(g, site)
    added = {n.id for n in child.delta.added}
    for nid, node in child.nodes.items():
        if nid not in added:
            assert g.node(nid) is node
    assert child.hash != g.hash or name.startswith(("cse", "rematerialize"))
    assert Verifier(mode="auto").check_site(rule, g, site).ok


def test_sites_are_found_through_the_op_index_only():
    rule = rules_by_name()["matmul_assoc_left_to_right"]
    g = rule.sample_graph(0)
    assert rule.anchor_ops == ("mm",)
    assert all(s.anchor in g.by_op("mm") for s in rule.matches(g))


def test_stale_site_raises_match_error():
    rule = rules_by_name()["matmul_assoc_left_to_right"]
    g = rule.sample_graph(0)
    site = rule.matches(g)[0]
    child = rule.apply(g, site)
    with pytest.raises(MatchError, match="does not match"):
        rule.apply(child, site)
    with pytest.raises(MatchError, match="belongs to rule"):
        rules_by_name()["matmul_assoc_right_to_left"].apply(g, site)


def test_multi_root_symmetric_match_is_reported_once():
    rule = rules_by_name()["merge_parallel_linear"]
    g = rule.sample_graph(0)
    assert len(rule.matches(g)) == 1
    assert len(rule.matches(g)[0].roots) == 2


@pytest.mark.parametrize("rule", wrong_rules(), ids=lambda r: r.name)
def test_wrong_rules_are_rejected_by_both_layers(rule):
    rep = verify_rule(rule, cache=session_cache())
    assert rep.proof.verdict in ("refuted", "unknown"), rep.proof
    assert not rep.random.ok
    with pytest.raises(RuleRejectedError, match=rule.name):
        RuleRegistry([rule], cache=session_cache())


def test_refuted_rule_reports_a_counterexample():
    rep = verify_rule(wrong_rules()[1], cache=session_cache())
    assert rep.proof.verdict == "refuted"
    assert "before=" in rep.proof.detail and "after=" in rep.proof.detail


def test_user_rule_goes_through_the_gate():
    from rewrite.builder import GraphBuilder
    from rewrite.rules import P, Rule, V
    from rewrite.rules._helpers import op

    def sample(d):
        b = GraphBuilder("u")
        x, y = b.input("x", (d(), d())), b.input("y", (1,))
        return b.build([op(b, "exp", op(b, "mul", x, y))])

    commute = Rule(
        "user_mul_commute",
        "algebra",
        (P("mul", V("a"), V("b")),),
        lambda ed, m: [op(ed, "mul", m["b"], m["a"])],
        sample,
        {"compute": "~"},
        "a * b -> b * a",
    )
    reg = RuleRegistry([commute], cache=session_cache())
    assert reg["user_mul_commute"] is commute and reg.reports["user_mul_commute"].ok
    with pytest.raises(RuleError, match="already registered"):
        reg.register(commute)


def test_bad_rule_definitions_fail_loudly():
    from rewrite.rules import P, Rule

    with pytest.raises(RuleError, match="family must be one of"):
        Rule("x", "nope", (P("mm"),), lambda e, m: [], lambda d: None, {"compute": "-"}, "")
    with pytest.raises(RuleError, match="trades must map"):
        Rule("x", "algebra", (P("mm"),), lambda e, m: [], lambda d: None, {"speed": "-"}, "")


def test_docs_table_is_up_to_date():
    assert DOC_PATH.read_text() == rules_table(catalogue()), "run `python -m rewrite.rules.docs`"


def test_seeded_sample_graphs_repeat():
    for r in RULES[:5]:
        assert r.sample_graph(3).hash == r.sample_graph(3).hash
        assert r.fingerprint() == r.fingerprint()


@pytest.mark.slow
def test_catalogue_hits_zoo_graphs():
    from rewrite import zoo

    hit = set()
    for name in ("gpt2", "bert", "llama", "vit", "resnet"):
        g = zoo.build(name)
        for r in RULES:
            sites = r.matches(g)
            if sites:
                hit.add(r.name)
                child = r.apply(g, sites[0])
                assert Verifier(mode="auto", tests=1).check_rewrite(g, child).ok, r.name
    assert len(hit) >= 30, sorted(set(NAMES) - hit)


def test_registry_matches_and_applies():
    rng = np.random.default_rng(0)
    rule = rules_by_name()["fuse_elementwise"]
    g = rule.sample_graph(rng)
    reg = RuleRegistry([rule], verify=False)
    sites = reg.matches(g)["fuse_elementwise"]
    assert sites and reg.apply(g, sites[0]).op_counts()["fused"] == 1


@pytest.mark.slow
@pytest.mark.parametrize("model", ["gpt2", "bert", "llama", "vit", "resnet"])
def test_random_rewrite_chains_on_zoo_graphs_stay_equivalent(model):
    from rewrite import zoo

    rng = np.random.default_rng(0)
    g0 = zoo.build(model)
    v = Verifier(mode="field", tests=1)
    for _ in range(4):
        g, history = g0, []
        for _ in range(6):
            table = [(r, s) for r in RULES for s in r.matches(g)]
            r, s = table[rng.integers(len(table))]
            g = r.apply(g, s)
            history.append(r.name)
        res = v.check(g0, g)
        assert res.ok, (history, res.detail)


def test_fusion_never_builds_a_group_of_constants_alone():
    """A chain of constants (batch-norm statistics folded as constants, then scaled) is left to
    folding: fusing it made a group with no input, a ShapeError that aborted the search."""
    import numpy as np

    from rewrite import GraphBuilder, search

    b = GraphBuilder("consts")
    x = b.input("x", (4,))
    scale = b.rsqrt(b.add(b.const(np.ones(4, "float32")), 1e-5))
    g = b.build([b.mul(x, scale)])
    rule = next(r for r in RULES if r.name == "fuse_elementwise")
    for site in rule.matches(g):
        fused = rule.apply(g, site)
        assert all(n.inputs for n in fused if n.op == "fused")
    search(g, config={"max_steps": 40, "seed": 0})  # every reachable fusion builds
