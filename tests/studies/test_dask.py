"""`Study.optimize` on a Dask cluster through `Client.get_executor()` (any Executor works)."""

from __future__ import annotations

import pytest

from studies import Study
from studies.examples import toy_evaluate, toy_space
from tests.studies import helpers


def test_optimize_on_dask_local_cluster(tmp_path) -> None:
    distributed = pytest.importorskip(
        "distributed",
        reason="dask distributed is not installed (pip install 'rewrite-tuner[cluster]')",
    )
    url = f"sqlite:///{tmp_path / 'dask.db'}"
    study = Study(
        "dask",
        toy_space(),
        {"latency": "minimize", "search_seconds": "minimize"},
        toy_evaluate,
        storage=url,
        settings=helpers.fast_settings(100),
    )
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster) as client,
    ):
        study.optimize(6, n_workers=2, executor=client.get_executor(), progress=False)
        # a failing and a hanging evaluate on the same executor: FAILED trials, no crash
        flaky = Study.load("dask", url, evaluate=helpers.sleepy_evaluate)
        flaky.optimize(9, n_workers=2, executor=client.get_executor(), timeout=0.5, progress=False)
    trials = study.trials
    assert len(trials) == 9
    assert all(t.state == "COMPLETE" for t in trials[:6])
    assert {t.worker for t in trials}  # recorded by the driving process
    for t in trials[:6]:
        assert t.values == {k: toy_evaluate(t.config)[k] for k in study.objectives}
    for t in trials[6:]:
        if t.config["population"] % 2 == 0:
            assert t.state == "FAILED" and "TimeoutError" in t.error
        else:
            assert t.state == "COMPLETE"
