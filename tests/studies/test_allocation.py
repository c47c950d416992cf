"""Allocation shared by several processes (`studies.allocation`): reserved proposal positions,
the budget, filling proposals in, and reservations freed after a crash.

Two `Study` objects on one storage with different worker names stand for two driving processes;
one allocates from inside the other's proposal, which is exactly the moment a second process
would (the first proposes outside any transaction)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from studies import Study, schema
from studies.examples import toy_evaluate, toy_space
from studies.records import TrialRecord
from studies.storage import Storage
from tests.studies import helpers

OBJ = {"latency": "minimize", "search_seconds": "minimize"}
ROOT = Path(__file__).resolve().parents[2]


def _study(url: str | Storage, n_initial: int = 100, **kw: Any) -> Study:
    settings = helpers.fast_settings(n_initial=n_initial, **kw)
    return Study("s", toy_space(), OBJ, toy_evaluate, storage=url, seed=7, settings=settings)


def _complete(study: Study, trials: list[TrialRecord]) -> None:
    for t in trials:
        out = toy_evaluate(t.config)
        study.tell(t, {k: out[k] for k in OBJ}, metrics={"steps": out["steps"]})


def _positions(study: Study) -> list[int | None]:
    with study.storage.read() as conn:
        query = select(schema.trials.c.position).order_by(schema.trials.c.number)
        return list(conn.execute(query).scalars())


def _during_proposal(study: Study, action: Callable[[], Any]) -> list[Any]:
    """Make ``study``'s next proposal run ``action`` first (another process allocating while this
    one proposes); returns a list that receives ``action``'s result."""
    seen: list[Any] = []
    propose = study._propose

    def wrapped(*args: Any) -> list[dict[str, Any]]:
        if not seen:
            seen.append(action())
        return propose(*args)

    study._propose = wrapped  # type: ignore[method-assign]
    return seen


def test_alone_a_process_proposes_at_the_trial_count(storage_url: str) -> None:
    study = _study(storage_url, n_initial=3)
    _complete(study, study.trial_source().claim("a:1:x", 2, None))
    _complete(
        study, study.trial_source().claim("a:1:x", 3, None)
    )  # one initial-design point, two modelled
    assert _positions(study) == [0, 1, 2, 3, 4]
    assert study.storage.reservations(study.id) == []


@pytest.mark.parametrize("n_initial", [100, 3])
def test_processes_proposing_at_once_propose_differently(
    storage_url: str, n_initial: int, tmp_path: Path
) -> None:
    """The second process reserves the positions after the first's and proposes from them: in
    the initial design the next design points, past it other seeds, with the first's in-flight
    design points pending; each keeps every proposal (no fit wasted). The grace period is long:
    the claims carry no heartbeat, and a first proposal on a loaded machine (imports included)
    can outlast the fast settings' 1 s, which freed the first's reservations in one CI run."""
    slow = {"grace_period": 60.0}
    a, b = _study(storage_url, n_initial, **slow), _study(storage_url, n_initial, **slow)
    _complete(a, a.trial_source().claim("a:1:x", 3, None))
    calls: list[int] = []
    for s in (a, b):
        inner = s._propose

        def counted(*args: Any, inner: Any = inner) -> list[dict[str, Any]]:
            calls.append(1)
            return inner(*args)

        s._propose = counted  # type: ignore[method-assign]
    seen = _during_proposal(a, lambda: b.trial_source().claim("b:1:x", 2, None))
    mine = a.trial_source().claim("a:1:x", 2, None)
    (theirs,) = seen
    assert len(mine) == 2 and len(theirs) == 2 and len(calls) == 2
    assert [t.worker for t in a.trials[3:]] == ["b:1:x"] * 2 + ["a:1:x"] * 2  # b filled first
    assert _positions(a) == [0, 1, 2, 5, 6, 3, 4]
    configs = [repr(sorted(t.config.items())) for t in a.trials]
    assert len(set(configs)) == len(configs)
    if n_initial == 100:  # the design's points at the positions, whoever proposed them
        alone = _study(f"sqlite:///{tmp_path / 'alone.db'}", n_initial)
        _complete(alone, alone.trial_source().claim("c:1:x", 7, None))
        order = [0, 1, 2, 5, 6, 3, 4]
        assert [t.config for t in a.trials] == [alone.trials[p].config for p in order]
    assert a.storage.reservations(a.id) == []


def test_processes_share_the_design_past_queued_trials(storage_url: str, tmp_path: Path) -> None:
    """In a warm-started study, configurations queued after the default take the first
    positions without using up the design's points (`studies.views.design_offset`): both
    processes map a position to the same design point, so their proposals are the design's
    points 1-4 that a study without the queue proposes, none twice."""
    slow = {"grace_period": 60.0}
    _study(storage_url)  # "s", the related study: nothing from it is queued here
    warm = {"warm_start": ["s"], "warm_start_queue": 0, "warm_start_gate": -1e6, **slow}
    a = Study("w", toy_space(), OBJ, toy_evaluate, storage=storage_url, seed=7,
              settings=helpers.fast_settings(n_initial=100, **warm))  # fmt: skip
    b = Study.load("w", storage_url)
    a.enqueue(a.space.default())
    for x in a.space.sample_unit(2, 99):  # two configurations from elsewhere
        a.enqueue(a.space.from_unit(x[None])[0])
    _complete(a, a.trial_source().claim("a:1:x", 3, None))
    seen = _during_proposal(a, lambda: b.trial_source().claim("b:1:x", 2, None))
    _complete(a, a.trial_source().claim("a:1:x", 2, None))
    _complete(b, seen[0])
    assert _positions(a) == [None, None, None, 5, 6, 3, 4]
    alone = _study(f"sqlite:///{tmp_path / 'alone.db'}")
    _complete(alone, alone.trial_source().claim("c:1:x", 5, None))
    design = [t.config for t in alone.trials]
    assert [t.config for t in a.trials[3:]] == [design[3], design[4], design[1], design[2]]


def test_reservations_count_against_the_budget(storage_url: str) -> None:
    a, b = _study(storage_url), _study(storage_url)
    seen = _during_proposal(a, lambda: b.trial_source().claim("b:1:x", 2, 3))
    assert len(a.trial_source().claim("a:1:x", 2, 3)) == 2
    assert len(seen[0]) == 1  # a held two of the three
    seen = _during_proposal(a, lambda: b.trial_source().claim("b:1:x", 2, 4))
    assert len(a.trial_source().claim("a:1:x", 1, 4)) == 1
    assert seen == [[]]  # a held the last one: b waits, it does not propose
    assert a.progress()["used"] == 4


def test_a_proposal_another_process_added_meanwhile_is_dropped(storage_url: str) -> None:
    """The clash is caught when filling in; the proposal is dropped (the next allocation proposes
    again with the newcomer pending), not re-fitted in a loop; the reservation is freed."""
    a, b = _study(storage_url), _study(storage_url)
    taken: list[TrialRecord] = []
    calls: list[int] = []

    def same_as_b(trials: Any, n: int, *rest: Any) -> list[dict[str, Any]]:
        calls.append(n)
        taken.extend(b.trial_source().claim("b:1:x", 1, None))
        return [taken[0].config] + [toy_space().sample(1, 99)[0]] * (n - 1)

    a._propose = same_as_b  # type: ignore[method-assign]
    got = a.trial_source().claim("a:1:x", 2, None)
    assert calls == [2] and len(got) == 1 and got[0].config != taken[0].config
    assert [t.worker for t in a.trials] == ["b:1:x", "a:1:x"]
    assert a.storage.reservations(a.id) == []


def test_a_failed_proposal_releases_its_reservation(storage_url: str) -> None:
    study = _study(storage_url)

    def broken(*args: Any) -> list[dict[str, Any]]:
        raise RuntimeError("surrogate blew up")

    study._propose = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="blew up"):
        study.trial_source().claim("a:1:x", 2, 2)
    assert study.storage.reservations(study.id) == []
    del study._propose
    assert len(study.trial_source().claim("a:1:x", 2, 2)) == 2


def test_a_stale_reservation_is_freed(storage_url: str) -> None:
    """A reservation whose process stopped reporting holds the budget until the grace period
    ends (or at once when its process is known dead on this host); then it is freed."""
    clock = helpers.FakeClock()
    store = Storage(storage_url, clock=clock)
    study = _study(store)
    with store.write() as conn:
        store.reserve(conn, study.id, "elsewhere:1:x", 2)
    assert study.trial_source().claim("a:1:x", 2, 2) == []
    clock.advance(study.settings.grace_period + 0.1)
    got = study.trial_source().claim("a:1:x", 2, 2)
    assert len(got) == 2 and store.reservations(study.id) == []
    assert _positions(study) == [0, 1]  # the freed positions are proposed again
    # a dead process on this host: freed without waiting (`Study.reap_stale` does it too)
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    with store.write() as conn:
        store.reserve(conn, study.id, f"{socket.gethostname()}:{dead}:x", 1)
    study.reap_stale()
    assert store.reservations(study.id) == []


def test_sigkill_while_proposing_loses_nothing(sqlite_url: str) -> None:
    """A driver killed in the middle of a proposal leaves its reservation behind; the next
    allocation frees it (the process is dead) and the study finishes its budget, every completed
    trial kept."""
    study = _study(sqlite_url, n_initial=2)
    study.optimize(3, progress=False)
    before = {t.number: t.values for t in study.trials}
    cmd = [
        sys.executable,
        "-m",
        "tests.studies.crash_child",
        sqlite_url,
        "6",
        "--name",
        "s",
        "--seed",
        "7",
        "--n-initial",
        "2",
        "--hang-in-propose",
    ]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:  # type: ignore[union-attr]
            lines.append(line.strip())
            if line.strip() == "proposing":
                break
        assert "proposing" in lines, lines
        held = study.storage.reservations(study.id)
        assert held and all(r.worker.split(":")[1] == str(proc.pid) for r in held)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc.stdout.close()  # type: ignore[union-attr]
    study.optimize(6, progress=False)
    trials = study.trials
    assert {t.number: t.values for t in trials[:3]} == before
    assert study.progress()["finished"] == 6 and len(trials) == 6
    assert all(t.state == "COMPLETE" for t in trials)
    assert study.storage.reservations(study.id) == []
    assert study.storage.integrity_check() == "ok"


def test_a_trial_requeued_while_reserving_is_claimed_not_proposed_again(
    storage_url: str,
) -> None:
    """A trial re-queued between the claim and the snapshot is claimed on a second pass: a tuner
    would hand its config out again as a new trial."""
    a, b = _study(storage_url), _study(storage_url)
    (held,) = b.trial_source().claim("b:1:x", 1, None)
    store = a.storage
    read = store.read
    calls: list[int] = []

    def requeue_first() -> Any:
        if not calls:
            calls.append(1)
            store.requeue(a.id, [held.number], "b:1:x", "Interrupted: b stopped; re-queued.")
        return read()

    store.read = requeue_first  # type: ignore[method-assign]
    got = a.trial_source().claim("a:1:x", 1, None)
    assert [t.retry_of for t in got] == [held.number] and got[0].config == held.config
    assert [t.state for t in a.trials] == ["FAILED", "RUNNING"]
    assert store.reservations(a.id) == []
