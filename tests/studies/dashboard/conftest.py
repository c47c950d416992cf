"""Studies for the dashboard tests, written straight into a storage (no tuner runs: the views are
under test, not the proposals), so a study of 2,000 trials takes a second."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from studies.examples import toy_evaluate, toy_space, toy_study
from studies.storage import Storage

OBJECTIVES = {"latency": "minimize", "search_seconds": "minimize"}
ROOT = Path(__file__).resolve().parents[3]

#: Another process driving study ``toy`` as a driver does: two trials claimed in one transaction,
#: then one COMPLETE and one FAILED.
DRIVER = """
import sys
from studies.storage import Storage
store = Storage(sys.argv[1])
sid = store.get_study("toy").id
priors = {"fuse": 0.4, "merge": 0.3, "shard": 0.2, "reorder": 0.1}
with store.write() as conn:
    a = store.add_trial(conn, sid, {"tau": 1.0, "population": 16, "priors": priors}, worker="b:2:x")
    b = store.add_trial(conn, sid, {"tau": 2.0, "population": 8, "priors": priors}, worker="b:2:x")
store.finish_trial(sid, a.number, state="COMPLETE", values={"latency": 0.5, "search_seconds": 2.5},
                   metrics={"steps": 1600.0}, seconds=0.5)
store.finish_trial(sid, b.number, state="FAILED", error="ValueError: written elsewhere", seconds=0.1)
"""


def drive_elsewhere(url: str) -> None:
    """Run `DRIVER` on storage ``url`` in another process."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", DRIVER, url], check=True, cwd=ROOT, env=env)


def write_trials(
    url: str,
    name: str,
    n: int,
    *,
    seed: int = 0,
    failed: dict[int, str] | None = None,
    running: int = 0,
    start: float | None = None,
) -> None:
    """Add ``n`` finished trials (toy configurations and outcomes; ``failed`` numbers FAIL with
    their error) and ``running`` RUNNING ones to study ``name`` (created if missing), in one
    transaction, as one driving process would have: one trial every 2 s, each evaluated in
    1.5 s (rows inserted as stored, so 2,000 trials take a second)."""
    from sqlalchemy import func, select

    from studies.schema import dumps, trials

    toy_study(name, url)
    if start is None:  # the last trial started a minute ago
        start = time.time() - 2.0 * (n + running) - 60.0
    rng = random.Random(seed)
    failed = failed or {}
    configs = toy_space().sample(n + running, seed=seed)
    store = Storage(url)
    sid = store.get_study(name).id
    rows = []
    with store.write() as conn:
        base = conn.execute(
            select(func.count()).select_from(trials).where(trials.c.study_id == sid)
        ).scalar_one()
        for i, config in enumerate(configs):
            number = base + i
            created = start + 2.0 * number
            row: dict[str, Any] = {
                "study_id": sid, "number": number, "state": "RUNNING", "config": dumps(config),
                "values": None, "metrics": dumps({}), "error": None, "created": created,
                "started": created, "finished": None, "heartbeat": created,
                "worker": "host:100:driver", "retry_of": None, "seconds": None, "position": number,
            }  # fmt: skip
            if i < n:
                row.update(finished=created + 1.5 + rng.random() * 0.1, seconds=1.5, heartbeat=None)
                if number in failed:
                    row.update(state="FAILED", error=failed[number])
                else:
                    out = toy_evaluate(config)
                    row.update(
                        state="COMPLETE",
                        values=dumps({k: out[k] for k in OBJECTIVES}),
                        metrics=dumps({"steps": out["steps"]}),
                    )
            rows.append(row)
        conn.execute(trials.insert(), rows)


@pytest.fixture
def study_url(tmp_path: Any) -> str:
    """A SQLite storage holding study ``toy``: 12 trials, trial 4 FAILED, 1 RUNNING."""
    url = f"sqlite:///{tmp_path / 'study.db'}"
    write_trials(url, "toy", 12, failed={4: "RuntimeError: boom at population 20"}, running=1)
    return url
