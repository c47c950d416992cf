"""Studies for the dashboard tests, written straight into a storage (no tuner runs: the views are
under test, not the proposals), so a study of 2,000 trials takes a second."""

from __future__ import annotations

import random
from typing import Any

import pytest

from studies.examples import toy_evaluate, toy_space, toy_study
from studies.storage import Storage

OBJECTIVES = {"latency": "minimize", "search_seconds": "minimize"}


def write_trials(
    url: str,
    name: str,
    n: int,
    *,
    seed: int = 0,
    failed: dict[int, str] | None = None,
    running: int = 0,
    start: float = 1_700_000_000.0,
) -> None:
    """Add ``n`` finished trials (toy configurations and outcomes; ``failed`` numbers FAIL with
    their error) and ``running`` RUNNING ones to study ``name`` (created if missing), with
    plausible times: one trial every 2 s, each evaluated in 1.5 s."""
    toy_study(name, url)
    rng = random.Random(seed)
    configs = toy_space().sample(n + running, seed=seed)
    clock = [start]
    store = Storage(url, clock=lambda: clock[0])
    sid = store.get_study(name).id
    with store.write() as conn:
        base = store.count_trials(conn, sid)
        for i, config in enumerate(configs):
            clock[0] = start + 2.0 * (base + i)
            store.add_trial(conn, sid, config, worker=f"host:{100 + i % 2}:w")
    failed = failed or {}
    for i, config in enumerate(configs[:n]):
        number = base + i
        clock[0] = start + 2.0 * number + 1.5 + rng.random() * 0.1
        if number in failed:
            store.finish_trial(sid, number, state="FAILED", error=failed[number], seconds=1.5)
            continue
        out = toy_evaluate(config)
        values = {k: out[k] for k in OBJECTIVES}
        store.finish_trial(
            sid, number, state="COMPLETE", values=values, metrics={"steps": out["steps"]}, seconds=1.5
        )


@pytest.fixture
def study_url(tmp_path: Any) -> str:
    """A SQLite storage holding study ``toy``: 12 trials, trial 4 FAILED, 1 RUNNING."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_trials(url, "toy", 12, failed={4: "RuntimeError: boom at population 20"}, running=1)
    return url
