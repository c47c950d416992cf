"""Islands through executors (local process pool, Dask LocalCluster) and seeded repeats."""

from __future__ import annotations

import concurrent.futures as cf
import json
import multiprocessing
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rewrite.errors import SearchError
from rewrite.optimize.api import search
from rewrite.optimize.config import SearchConfig
from rewrite.optimize.parallel import _make_executor
from rewrite.optimize.pareto import non_dominated
from rewrite.verify import Verifier
from tests.rewrite.search_rules import TEST_RULES, chain_graph

ROOT = Path(__file__).resolve().parents[2]
CHAIN = chain_graph([128, 8, 128, 8, 128, 8, 128], negs=2)


def _check(res, graph=CHAIN) -> None:
    Y = np.array([s.objectives for s in res.pareto])
    assert res.pareto and non_dominated(Y).all()
    checker = Verifier(mode="field", tests=2, seed=5)
    by_name = {r.name: r for r in TEST_RULES}
    for sol in res.pareto:
        g = graph
        for step in sol.steps:
            g = by_name[step.rule].apply(g, step.site)
        assert g.hash == sol.graph.hash
        assert checker.check(graph, sol.graph).ok
    hv = [t[2] for t in res.hv_trace]
    assert all(b >= a - 1e-12 for a, b in zip(hv, hv[1:]))


def test_process_pool_islands(tmp_path: Path) -> None:
    cfg = SearchConfig(max_steps=160, workers=2, island_steps=20, epsilon=0.0, seed=4)
    res = search(CHAIN, cfg, rules=TEST_RULES, verify_cache=str(tmp_path / "v.sqlite"))
    _check(res)
    assert res.workers == 2 and res.stats.steps == 160
    assert res.hypervolume > res.hv_trace[0][2]
    m = res.metrics()
    assert m["steps"] == 160 and m["rule.test_neg_neg.fired"] > 0


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_the_island_pool_forks_without_setting_the_global_start_method() -> None:
    before = multiprocessing.get_start_method(allow_none=True)
    pool = _make_executor(SearchConfig(workers=2))
    try:
        assert pool._mp_context.get_start_method() == "fork"
    finally:
        pool.shutdown()
    assert multiprocessing.get_start_method(allow_none=True) == before


@pytest.mark.parametrize(
    "processes", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["threads", "processes"]
)
def test_dask_local_cluster(tmp_path: Path, processes: bool) -> None:
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=processes, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        if processes:  # the workers must import the test-only rules' module
            client.run(lambda: sys.path.insert(0, str(ROOT)))
        cfg = SearchConfig(max_steps=80, workers=2, island_steps=20, epsilon=0.0, seed=2)
        res = search(
            CHAIN,
            cfg,
            rules=TEST_RULES,
            executor=client.get_executor(),
            verify_cache=str(tmp_path / "v.sqlite"),
        )
    _check(res)
    assert res.stats.steps == 80


def test_unpicklable_rules_are_a_clear_error() -> None:
    import dataclasses

    bad = dataclasses.replace(TEST_RULES[2], name="test_lambda_rule", build=lambda ed, m: [m["x"]])
    with pytest.raises(SearchError, match="picklable"):
        search(CHAIN, SearchConfig(workers=2, max_steps=4), rules=[*TEST_RULES, bad])


_SCRIPT = """
import json, sys
sys.path.insert(0, {root!r})
from rewrite.optimize.api import search
from rewrite.optimize.config import SearchConfig
from tests.rewrite.search_rules import TEST_RULES, chain_graph
g = chain_graph([96, 8, 96, 8, 96, 8, 96, 8, 96], negs=2)
r = search(g, SearchConfig(max_steps=150, seed={seed}, epsilon=0.0), rules=TEST_RULES,
           verify_cache=None)
m = {{k: v for k, v in r.metrics().items() if k.startswith(("rule.", "dropped.", "steps"))
     and k != "steps_per_s"}}
print(json.dumps({{"pareto": [[s.graph.hash, s.objectives, s.rules] for s in r.pareto],
                  "hv": [[t[0], t[2]] for t in r.hv_trace], "metrics": m}}))
"""


def _fresh_run(seed: int) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _SCRIPT.format(root=str(ROOT), seed=seed)],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_seeded_run_repeats_exactly_in_fresh_processes() -> None:
    a, b = _fresh_run(7), _fresh_run(7)
    assert a == b and a["pareto"]
    g = chain_graph([96, 8, 96, 8, 96, 8, 96, 8, 96], negs=2)
    cfg = SearchConfig(max_steps=150, seed=8, epsilon=0.0)
    other = search(g, cfg, rules=TEST_RULES, verify_cache=None).metrics()
    fired = {k: v for k, v in other.items() if k.endswith(".fired")}
    assert fired != {k: v for k, v in a["metrics"].items() if k.endswith(".fired")}


class _InlineExecutor(cf.Executor):
    """Runs each work item at submission: one island through the parallel path, deterministic."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        fut: cf.Future = cf.Future()
        fut.set_result(fn(*args, **kwargs))
        return fut


def test_one_island_through_the_parallel_path_repeats_its_golden_run() -> None:
    """Work items carry the engine state between items (`Engine.state`/`restore`): a seeded run
    of one island in 20-step items is deterministic, and its figures were recorded before the
    engine state became explicit (they must not move)."""
    g = chain_graph([96, 8, 96, 8, 96, 8, 96, 8, 96], negs=2)
    cfg = SearchConfig(max_steps=150, seed=7, epsilon=0.0, island_steps=20)

    def run():
        r = search(g, cfg, rules=TEST_RULES, verify_cache=None, executor=_InlineExecutor())
        fired = {k: v for k, v in r.metrics().items() if k.endswith(".fired")}
        return [(s.graph.hash, s.objectives, s.rules) for s in r.pareto], fired, r.hv_trace

    (pareto, fired, trace), again = run(), run()
    assert (pareto, fired, [(s, hv) for s, _, hv in trace]) == (
        again[0],
        again[1],
        [(s, hv) for s, _, hv in again[2]],
    )
    assert fired == {
        "rule.test_mm_assoc_left.fired": 59.0,
        "rule.test_mm_assoc_right.fired": 84.0,
        "rule.test_neg_neg.fired": 7.0,
    }
    assert pareto == [
        ("5a2ea46f9d2a27aa0734cb040d707b0a", (2.84471539446e-05, 61440.0), ["test_neg_neg"] * 2)
    ]


def test_the_island_pool_is_capped_by_the_machine() -> None:
    """Issue 52: a process per island of workers=4096 would exhaust the machine's memory."""
    import os

    from rewrite.optimize.parallel import PROCESSES_PER_CPU, pool_size

    cpus = os.cpu_count() or 1
    assert pool_size(4096) == PROCESSES_PER_CPU * cpus and pool_size(2) == 2
    pool = _make_executor(SearchConfig(workers=4096))
    try:
        assert pool._max_workers == PROCESSES_PER_CPU * cpus
    finally:
        pool.shutdown()
