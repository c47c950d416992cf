"""`structure._pc_fast.pc_graph` against causal-learn's ``pc``, the reference it replaces."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

import structure.pc as pc_module
from structure import Knowledge
from structure._pc_fast import _p_values, fisher_z_p, pc_graph
from structure.pc import TIER_RANK, Table, bootstrap_pc, make_table
from tests.structure.causal_learn_ref import fisher_z_test
from tests.structure.synthetic import chain_table


def _causal_learn(data: np.ndarray, alpha: float, bk: object) -> np.ndarray:
    from causallearn.search.ConstraintBased.PC import pc

    names = [f"c{i}" for i in range(data.shape[1])]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cg = pc(
            data, alpha, fisher_z_test(), background_knowledge=bk, show_progress=False,
            node_names=names, verbose=False,
        )  # fmt: skip
    return np.asarray(cg.G.graph)


def _reference_run_pc(
    table: Table, rows: np.ndarray, cols: np.ndarray, knowledge: Knowledge, alpha: float
) -> np.ndarray | None:
    """`structure.pc._run_pc` as it was on causal-learn: tiers and forbidden pairs as its
    background knowledge."""
    from causallearn.graph.GraphNode import GraphNode
    from causallearn.utils.PCUtils.BackgroundKnowledge import BackgroundKnowledge

    data = table.data[np.ix_(rows, cols)]
    column_node = [table.column_node[c] for c in cols]
    if (data.std(0) <= 1e-12).any():
        data = data + 1e-6 * np.random.default_rng(len(rows)).standard_normal(data.shape)
    if np.linalg.matrix_rank(np.corrcoef(data, rowvar=False)) < data.shape[1]:
        data = data + 1e-3 * np.random.default_rng(len(rows) + 1).standard_normal(data.shape)
    gnodes = [GraphNode(f"c{i}") for i in range(data.shape[1])]
    bk = BackgroundKnowledge()
    for g, node in zip(gnodes, column_node):
        bk.add_node_to_tier(g, TIER_RANK[table.tier[node]])
    bk.forbid_within_tier(0)
    bk.forbid_within_tier(2)
    for i, a in enumerate(column_node):
        for j, b in enumerate(column_node):
            if i != j and (a == b or (a, b) in knowledge.forbidden):
                bk.add_forbidden_by_node(gnodes[i], gnodes[j])
    try:
        return _causal_learn(data, alpha, bk)
    except (ValueError, np.linalg.LinAlgError, ZeroDivisionError):
        return None


_LINKS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "linear": lambda v: v,
    "exp": np.exp,
    "tanh": lambda v: np.tanh(2.0 * v),
    "cube": lambda v: v**3,
}


def _random_case(seed: int) -> tuple[Table, np.ndarray, np.ndarray, Knowledge, float, str]:
    """A trials table with 4-16 PC columns: parameters (some of 2-3 columns, some a simplex),
    metrics and objectives drawn from a random DAG in tier order (linear-Gaussian, monotone
    non-linear, near-deterministic or pure noise), random forbidden pairs, the full table or a
    bootstrap resample, all columns or the objective-free stage."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(8, 41))
    kind = str(rng.choice(["linear", "monotone", "deterministic", "noise"]))
    width = int(rng.integers(4, 17))
    params: dict[str, np.ndarray] = {}
    used = 0
    while used < max(2, width // 3) or not params:
        cols = int(rng.choice([1, 1, 1, 2, 3]))
        block = rng.random((n, cols))
        if cols > 1 and rng.random() < 0.5:  # a simplex: make_table drops its last column
            block = rng.dirichlet(np.ones(cols + 1), n)
        params[f"x{len(params)}"] = block
        used += cols
    n_obj = int(rng.integers(1, 3))
    n_met = max(width - used - n_obj, 0)
    values = [v[:, k] for v in params.values() for k in range(v.shape[1])]
    noise = {"deterministic": 1e-6, "noise": 1.0}.get(kind, 0.3)

    def draw() -> np.ndarray:
        if kind == "noise":
            return rng.standard_normal(n)
        parents = rng.choice(len(values), size=min(len(values), int(rng.integers(1, 4))))
        lin = sum(rng.normal(0.0, 1.0) * values[p] for p in parents)
        link = _LINKS["linear" if kind == "linear" else str(rng.choice(list(_LINKS)))]
        out = link(np.clip(lin, -5, 5)) + noise * rng.standard_normal(n)
        values.append(out)
        return out

    metrics = {f"m{i}": draw() for i in range(n_met)}
    objectives = {f"o{i}": draw() for i in range(n_obj)}
    table = make_table(params, metrics, objectives)
    nodes = table.nodes
    pairs = [(a, b) for a in nodes for b in nodes if a != b and rng.random() < 0.08]
    rows = np.arange(n) if rng.random() < 0.5 else rng.integers(0, n, size=n)
    cols = np.arange(len(table.column_node))
    if metrics and rng.random() < 0.3:  # stage 1 of `bootstrap_pc`: no objectives
        cols = np.flatnonzero([table.tier[c] != "objective" for c in table.column_node])
    alpha = float(rng.choice([0.05, 0.2]))
    return table, rows, cols, Knowledge(forbidden=tuple(pairs)), alpha, kind


# Cases that reach causal-learn's rarer branches (found by breaking each one in `pc_graph` and
# searching seeds until the graph changed): Meek's rule 3, its cycle check that reads the
# ancestor matrix, that matrix's incomplete closure and its rebuild in ``uc_sepset``.
_RARE_TABLES = (733, 1412, 3501)  # the cycle check, under tiers
_RARE_FORBIDDEN = (2564, 3765, 93, 169, 531, 197, 989, 2429, 2783)


def test_pc_matches_causal_learn_on_random_tables() -> None:
    directed = undirected = 0
    kinds: set[str] = set()
    for seed in (*range(300), *_RARE_TABLES):
        table, rows, cols, knowledge, alpha, kind = _random_case(seed)
        ours = pc_module._run_pc(table, rows, cols, knowledge, alpha)
        theirs = _reference_run_pc(table, rows, cols, knowledge, alpha)
        assert ours is not None and theirs is not None, seed
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), (seed, kind)
        directed += int(((theirs == 1) & (theirs.T == -1)).any())
        undirected += int(((theirs == -1) & (theirs.T == -1)).any())
        kinds.add(kind)
    # The cases reach directed and undirected edges and every kind of data. (A failed run
    # needs a singular correlation submatrix, which `_run_pc`'s jitter prevents: at depth
    # ``n - 3`` every test has ``z = 0``, so PC never gets to the deeper tests that fail.)
    assert directed >= 150 and undirected >= 50, (directed, undirected)
    assert kinds == {"linear", "monotone", "deterministic", "noise"}


def _forbidden_case(seed: int) -> tuple[np.ndarray, float, np.ndarray]:
    """A random linear DAG over 4-16 columns in column order, 15-40 rows, and a random
    forbidden matrix (none, sparse or dense) that no tiering produces."""
    rng = np.random.default_rng(seed)
    n, c = int(rng.integers(15, 41)), int(rng.integers(4, 17))
    data = rng.standard_normal((n, c))
    for j in range(1, c):
        parents = rng.random(j) < 0.4
        data[:, j] += data[:, :j][:, parents] @ rng.normal(0.0, 1.0, parents.sum())
    forbidden = rng.random((c, c)) < float(rng.choice([0.0, 0.1, 0.3]))
    np.fill_diagonal(forbidden, False)
    return data, float(rng.choice([0.05, 0.2])), forbidden


def test_pc_matches_causal_learn_under_arbitrary_forbidden_edges() -> None:
    # Forbidden directions in every combination with colliders and Meek's rules.
    from causallearn.graph.GraphNode import GraphNode
    from causallearn.utils.PCUtils.BackgroundKnowledge import BackgroundKnowledge

    for seed in (*range(150), *_RARE_FORBIDDEN):
        data, alpha, forbidden = _forbidden_case(seed)
        nodes = [GraphNode(f"c{i}") for i in range(data.shape[1])]
        bk = BackgroundKnowledge()
        for i, j in zip(*np.nonzero(forbidden)):
            bk.add_forbidden_by_node(nodes[i], nodes[j])
        ours = pc_graph(data, alpha, forbidden)
        assert np.array_equal(ours, _causal_learn(data, alpha, bk)), seed


def test_pc_fails_where_causal_learn_fails() -> None:
    rng = np.random.default_rng(5)
    none = np.zeros((5, 5), dtype=bool)
    data = rng.standard_normal((20, 5))
    data[:, 4] = data[:, 0]  # a singular correlation matrix
    with pytest.raises(ValueError):
        _causal_learn(data, 0.05, None)
    with pytest.raises(ValueError, match="singular"):
        pc_graph(data, 0.05, none)
    few = rng.standard_normal((2, 5))  # fewer than 3 rows: no Fisher-z test at all
    with pytest.raises(ValueError):
        _causal_learn(few, 0.05, None)
    with pytest.raises(ValueError):
        pc_graph(few, 0.05, none)


def test_batched_p_values_are_fisher_z_p() -> None:
    rng = np.random.default_rng(7)
    data = rng.standard_normal((30, 9))
    data[:, 2] += data[:, 1]
    corr = np.corrcoef(data.T)
    for size in range(5):
        keys = []
        for _ in range(50):
            x, y, *cond = rng.choice(9, size + 2, replace=False).tolist()
            keys.append((min(x, y), max(x, y), *sorted(cond)))
        batched = _p_values(corr, 30, keys)
        assert batched == [fisher_z_p(corr, 30, k[0], k[1], k[2:]) for k in keys]


def _search_tables(n: int, seed: int) -> tuple[dict, dict, dict]:
    """A table shaped like the search problem of `benchmarks._structure_problems`: four knobs
    and an 8-rule prior simplex; per-rule counts, acceptance rate, frontier, verification time;
    gain and seconds."""
    rng = np.random.default_rng(seed)
    pop, mut = np.exp(rng.uniform(np.log(8), np.log(128), n)), np.exp(rng.uniform(0, 2.8, n))
    temp, weight = np.exp(rng.uniform(-3, 1.6, n)), rng.random(n)
    priors = rng.dirichlet(np.ones(8), n)

    def noisy(v: np.ndarray) -> np.ndarray:
        return v * np.exp(0.1 * rng.standard_normal(v.shape))

    applied = noisy(10 * (pop * mut)[:, None] * (0.9 * priors + 0.1 / 8))
    rate = np.minimum(noisy(1 / (1 + np.exp(-(np.log(temp) + 1.5 * (0.5 - weight)) / 0.7))), 1)
    use = noisy(priors @ np.array([1.0, 0.7, 0.15, 0.05, 0.02, 0.0, 0.0, 0.0]))
    frontier = noisy(pop * (0.3 + rate))
    verify = noisy(1e-3 * applied @ np.array([2.0, 0.4, 1.2, 0.2, 0.8, 0.3, 0.6, 0.1]))
    params = {"population": pop, "mutations": mut, "temperature": temp, "prior_weight": weight,
              "priors": priors}  # fmt: skip
    metrics = {f"rule{r}.applied": applied[:, r] for r in range(8)}
    metrics |= {"acceptance": rate, "usefulness": use, "frontier": frontier, "verify": verify}
    gain = noisy(np.log1p(use * frontier * mut * (4 * rate * (1 - rate)) ** 3 / 5))
    objectives = {"gain": gain, "seconds": noisy(verify + 0.002 * frontier * mut)}
    return params, metrics, objectives


@pytest.mark.parametrize(
    "tables",
    [
        lambda: (chain_table(n=30, seed=2, nuisance=3), 0.05),
        lambda: (dict(zip(("params", "metrics", "objectives"), _search_tables(24, 1))), 0.05),
        lambda: (dict(zip(("params", "metrics", "objectives"), _search_tables(36, 2))), 0.2),
    ],
    ids=["chain", "search-24", "search-36"],
)
def test_bootstrap_pc_votes_are_causal_learns(
    tables: Callable[[], tuple[dict, float]], monkeypatch: pytest.MonkeyPatch
) -> None:
    columns, alpha = tables()
    table = make_table(columns["params"], columns["metrics"], columns["objectives"])
    metrics = set(list(columns["metrics"])[:8])
    knowledge = Knowledge(forbidden=((next(iter(columns["metrics"])), next(iter(table.nodes))),))
    ours = bootstrap_pc(table, knowledge, alpha, 8, 3, metrics, False)
    monkeypatch.setattr(pc_module, "_run_pc", _reference_run_pc)
    theirs = bootstrap_pc(table, knowledge, alpha, 8, 3, metrics, False)
    assert theirs[0].any()
    for a, b in zip(ours, theirs):
        assert np.array_equal(a, b)
