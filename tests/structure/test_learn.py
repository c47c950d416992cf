from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from structure import Formula, Knowledge, KnowledgeError, LearnConfig, learn_structure
from structure.errors import StructureLearningError
from structure.select import SelectConfig
from tests.structure.synthetic import chain_table

FAST = LearnConfig(bootstrap=6, select=SelectConfig(fit_maxiter=60))


def _learned(structure, origin: str = "learned") -> set[tuple[str, str]]:
    return {(e.source, e.target) for e in structure.edges if e.origin == origin}


@pytest.mark.parametrize("select", [True, False], ids=["pc+gp-selection", "pc-only"])
def test_recovers_a_known_chain_and_ignores_nuisance_metrics(select: bool) -> None:
    config = FAST if select else LearnConfig(bootstrap=6, select=None)
    s = learn_structure(**chain_table(n=80, seed=1), config=config)
    edges = _learned(s)
    assert ("m1", "m2") in edges and ("m2", "o") in edges
    assert ("x2", "m2") in edges
    everything = {(e.source, e.target) for e in s.edges}
    assert ("x0", "m1") in everything and ("x1", "m1") in everything
    used = {n for e in s.edges for n in (e.source, e.target)}
    assert not any(n.startswith("noise") for n in used)
    if select:  # the objective reads its metric parent only, not the parameters
        assert s.parents("o") == ["m2"]
    else:  # bootstrap frequencies of PC's edges
        assert all(0.5 <= e.strength <= 1.0 for e in s.edges if e.origin == "learned")


def test_keep_base_gives_the_objective_its_metric_parent_and_every_parameter() -> None:
    config = LearnConfig(bootstrap=6, select=SelectConfig(fit_maxiter=60, keep_base=True))
    s = learn_structure(**chain_table(n=80, seed=1), config=config)
    assert set(s.parents("o")) == {"m2", "x0", "x1", "x2", "x3"}
    assert ("m2", "o") in _learned(s)  # the selected metric: learned, with its strength
    assert {("x0", "o"), ("x3", "o")} <= _learned(s, "direct")  # kept, not tested


@pytest.mark.parametrize("seed", range(4))
def test_tier_rules_and_paths_hold_on_random_tables(seed: int) -> None:
    table = chain_table(n=30, seed=seed, nuisance=3)
    rng = np.random.default_rng(seed)
    table["objectives"]["o2"] = rng.standard_normal(30)
    select = SelectConfig(fit_maxiter=40) if seed % 2 else None  # half with GP selection
    s = learn_structure(
        **table, config=LearnConfig(bootstrap=3, max_parents=2, select=select), seed=seed
    )
    tier = s.tier_of
    graph = s.to_networkx()
    assert nx.is_directed_acyclic_graph(graph)
    for e in s.edges:
        assert tier[e.target] != "param" and tier[e.source] != "objective"
    for p in s.params:
        assert all(nx.has_path(graph, p, o) for o in s.objectives)
    for node in s.metrics + s.objectives:  # PC's in-degree cap (selection has its own)
        limit = 2 if select is None else select.max_parents + len(s.params)
        assert sum(1 for e in s.edges if e.target == node and e.origin == "learned") <= limit


def test_knowledge_required_forbidden_and_formula() -> None:
    table = chain_table(n=60, seed=2)
    table["metrics"]["m3"] = table["metrics"]["m1"] + table["metrics"]["m2"]
    knowledge = Knowledge(
        required=(("x3", "m1"),),
        forbidden=(("m2", "o"),),
        formulas=(Formula("m3", ("m1", "m2")),),
    )
    s = learn_structure(**table, knowledge=knowledge, config=FAST)
    required = _learned(s, "required")
    assert {("x3", "m1"), ("m1", "m3"), ("m2", "m3")} <= required
    assert ("m2", "o") not in {(e.source, e.target) for e in s.edges}
    assert set(s.parents("m3")) == {"m1", "m2"}
    assert s.formula_for("m3") == knowledge.formulas[0]


@pytest.mark.parametrize("select", [True, False], ids=["pc+gp-selection", "pc-only"])
def test_no_forbidden_edge_is_added_to_keep_a_parameter_on_a_path(select: bool) -> None:
    table = chain_table(n=40, seed=3)
    # x3 drives nothing; every way it could be wired to the objective is forbidden.
    forbidden = tuple(("x3", t) for t in ("m1", "m2", "o"))
    config = FAST if select else LearnConfig(bootstrap=6, select=None)
    s = learn_structure(**table, knowledge=Knowledge(forbidden=forbidden), config=config)
    assert not set(forbidden) & {(e.source, e.target) for e in s.edges}


def test_phase_order_orients_what_the_data_cannot() -> None:
    rng = np.random.default_rng(0)
    n = 80
    x = rng.random((n, 1))
    a = rng.standard_normal(n)
    b = a + 0.3 * rng.standard_normal(n)  # a - b: both orientations are Markov equivalent
    o = a + b + x[:, 0] + 0.3 * rng.standard_normal(n)
    names = {"late.b": b, "early.a": a}
    for order, expect in (
        (("early.", "late."), ("early.a", "late.b")),
        (("late.", "early."), ("late.b", "early.a")),
    ):
        s = learn_structure(
            {"x": x},
            names,
            {"o": o},
            Knowledge(phase_order=order),
            LearnConfig(bootstrap=4, select=None),  # a and b are noise: selection drops them
        )
        assert expect in {(e.source, e.target) for e in s.edges}


def test_bad_input_is_a_clear_error() -> None:
    table = chain_table(n=30)
    with pytest.raises(KnowledgeError, match="tier"):
        learn_structure(**table, knowledge=Knowledge(required=(("o", "m1"),)), config=FAST)
    with pytest.raises(KnowledgeError, match="not in the table"):
        learn_structure(**table, knowledge=Knowledge(forbidden=(("x0", "zzz"),)), config=FAST)
    for bad in ({"alpha": "0.05"}, {"bootstrap": 2.5}, {"max_parents": True}):
        with pytest.raises(StructureLearningError, match="LearnConfig"):
            LearnConfig(**bad)
    small = chain_table(n=5)
    with pytest.raises(StructureLearningError, match="at least"):
        learn_structure(**small, config=FAST)
    with pytest.raises(KnowledgeError, match="reads parameters"):
        learn_structure(**table, knowledge=Knowledge(formulas=(Formula("m1", ("x0",)),)))
    holes = {**table["metrics"], "m1": np.where(np.arange(30) < 3, np.nan, table["metrics"]["m1"])}
    with pytest.raises(StructureLearningError, match=r"\['m1'\] hold NaN"):
        learn_structure(table["params"], holes, table["objectives"], config=FAST)
    short = {**table["metrics"], "m1": table["metrics"]["m1"][:20]}
    with pytest.raises(StructureLearningError, match="one value per trial"):
        learn_structure(table["params"], short, table["objectives"], config=FAST)


def test_our_fisher_z_test_is_causal_learns() -> None:
    # The reference PC of tests/structure/test_pc_fast.py runs causal-learn with our Fisher-z
    # test (`structure._pc_fast.fisher_z_p`'s p-value); its p-values and PC's graphs must be
    # causal-learn's own.
    from causallearn.search.ConstraintBased.PC import pc
    from causallearn.utils.cit import CIT

    from tests.structure.causal_learn_ref import fisher_z_test

    rng = np.random.default_rng(1)
    for trial in range(5):
        data = rng.standard_normal((25, 8))
        data[:, 3] += data[:, 1]
        data[:, 5] += 0.7 * data[:, 3] - 0.5 * data[:, 2]
        data[:, 7] += 0.6 * data[:, 5]
        ours, theirs = CIT(data, fisher_z_test()), CIT(data, "fisherz")
        for _ in range(200):
            x, y = (int(v) for v in rng.choice(8, 2, replace=False))
            cond = [int(c) for c in rng.choice(8, int(rng.integers(0, 5)), replace=False)]
            cond = [c for c in cond if c not in (x, y)]
            assert ours(x, y, cond) == pytest.approx(theirs(x, y, cond), abs=1e-12)
        a = pc(data, 0.05, fisher_z_test(), show_progress=False).G.graph
        b = pc(data, 0.05, "fisherz", show_progress=False).G.graph
        assert (a == b).all(), trial


def _two_counters(n: int = 40, seed: int = 0) -> dict[str, dict[str, np.ndarray]]:
    """x0 -> c0, x1 -> c1 (x2, x3 irrelevant); o = c0 + 2 c1."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 4))
    c0 = np.sin(3 * X[:, 0]) + 0.05 * rng.standard_normal(n)
    c1 = X[:, 1] ** 2 + 0.05 * rng.standard_normal(n)
    o = c0 + 2 * c1 + 0.05 * rng.standard_normal(n)
    return {
        "params": {f"x{i}": X[:, i : i + 1] for i in range(4)},
        "metrics": {"c0": c0, "c1": c1},
        "objectives": {"o": o},
    }


def test_candidate_edges_are_kept_where_the_data_supports_them_and_dropped_elsewhere() -> None:
    knowledge = Knowledge(
        # true; false; and one naming a metric no trial reports (a rule that never fired)
        candidates=(("x0", "c0"), ("x3", "c1"), ("x2", "rule.never.fired")),
    )
    s = learn_structure(**_two_counters(), knowledge=knowledge, config=FAST)
    edges = {(e.source, e.target) for e in s.edges}
    assert {("c0", "o"), ("c1", "o"), ("x0", "c0"), ("x1", "c1")} <= edges
    assert ("x3", "c1") not in edges
    with pytest.raises(KnowledgeError, match="tier rules"):
        learn_structure(
            **_two_counters(), knowledge=Knowledge(candidates=(("o", "c0"),)), config=FAST
        )


def test_dense_wires_every_parameter_to_every_metric_and_every_metric_to_the_objectives() -> None:
    table = chain_table(n=20, seed=4, nuisance=1)
    knowledge = Knowledge(
        forbidden=(("x3", "m1"), ("noise0", "o")), formulas=(Formula("m2", ("m1",), residual=True),)
    )
    dense = LearnConfig(dense=True, direct_edges=False, select=None)
    s = learn_structure(**table, knowledge=knowledge, config=dense)
    assert s.parents("o") == ["m1", "m2"]  # every metric but the forbidden one, no parameter
    assert set(s.parents("m1")) == {"x0", "x1", "x2"}  # x3 forbidden
    assert set(s.parents("noise0")) == {"x0", "x1", "x2", "x3"}
    assert set(s.parents("m2")) == {"x0", "x1", "x2", "x3", "m1"}  # residual GP: its inputs too
    no_metrics = {**table, "metrics": {}}
    params = {"x0", "x1", "x2", "x3"}
    assert set(learn_structure(**no_metrics, config=dense).parents("o")) == params
    direct = learn_structure(**table, knowledge=knowledge, config=LearnConfig(dense=True))
    assert set(direct.parents("o")) == {"m1", "m2", *params}
    with pytest.raises(StructureLearningError, match="dense must be a bool"):
        LearnConfig(dense="yes")  # type: ignore[arg-type]


def test_dense_objectives_read_the_parameters_selection_adds_to_their_metrics() -> None:
    table = chain_table(n=40, seed=5, nuisance=1)
    x3 = table["params"]["x3"][:, 0]
    table["objectives"]["o2"] = table["metrics"]["m1"] + 2.0 * np.sin(6.0 * x3)
    config = LearnConfig(dense=True, direct_edges=False, select=SelectConfig(fit_maxiter=60))
    s = learn_structure(**table, config=config)
    assert set(s.parents("o2")) == {"m1", "m2", "noise0", "x3"}  # x3 acts besides the metrics
    assert _learned(s) == {("x3", "o2")}  # the one edge the data chose
    assert set(s.parents("o")) == {"m1", "m2", "noise0"}  # o is -m2: nothing to add
