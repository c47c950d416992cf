"""Trial allocation and reaping for one study: the transactions behind `Study.allocate`.

Proposing runs outside any transaction on a snapshot of the stored trials (so other processes'
heartbeats and results are never blocked behind a model fit); `allocate` inserts the proposals in
a transaction that checks them against the trials other processes added meanwhile (`still_new`).
These functions hold no state: the storage, the study's id and its settings are passed in.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from studies.views import used
from studies.workers_local import dead_local_worker, never_dead

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from studies.records import TrialRecord
    from studies.settings import StudySettings
    from studies.storage import Storage

__all__ = ["PROPOSE_ATTEMPTS", "allocate", "reap", "still_new"]

# the log lines of allocation are the study's, under the logger they always had
logger = logging.getLogger("studies.study")

#: Proposals retried per `allocate` call when other processes keep adding trials.
PROPOSE_ATTEMPTS = 8

#: ``propose(trials, n)``: up to ``n`` new configurations for the snapshot ``trials``.
Propose = Callable[[list["TrialRecord"], int], list[dict[str, Any]]]


def allocate(
    storage: Storage,
    study_id: int,
    settings: StudySettings,
    propose: Propose,
    worker: str,
    k: int,
    budget: int | None,
    heartbeat: bool = True,
) -> list[TrialRecord]:
    """Hand ``worker`` up to ``k`` RUNNING trials of study ``study_id`` (see `Study.allocate`)."""
    out: list[TrialRecord] = []
    for _attempt in range(PROPOSE_ATTEMPTS):
        with storage.write() as conn:
            storage.lock_study(conn, study_id)
            reap(storage, conn, study_id, settings, alive=worker)
            while len(out) < k:
                claimed = storage.claim_waiting(conn, study_id, worker, heartbeat)
                if claimed is None:
                    break
                out.append(claimed)
        trials = storage.trials(study_id)
        room = k - len(out)
        if budget is not None:
            room = min(room, budget - used(trials))
        if room <= 0:
            return out
        if any(t.state == "WAITING" for t in trials):
            continue  # re-queued meanwhile: claim it first
        proposed = propose(trials, room)
        with storage.write() as conn:
            storage.lock_study(conn, study_id)
            configs = still_new(storage, conn, study_id, trials, proposed, budget)
            if configs is None:
                continue  # another process proposed the same: propose again
            for config in configs:
                out.append(
                    storage.add_trial(conn, study_id, config, worker=worker, heartbeat=heartbeat)
                )
            return out
    return out


def still_new(
    storage: Storage,
    conn: Connection,
    study_id: int,
    trials: list[TrialRecord],
    configs: list[dict[str, Any]],
    budget: int | None,
) -> list[dict[str, Any]] | None:
    """The proposals made on the snapshot ``trials`` that may be inserted now (inside the
    allocation transaction): all of them when no trial was added since; when other
    processes added trials meanwhile, as many as the budget still allows, or ``None`` if one
    of them equals a newcomer (two drivers proposed from the same snapshot: propose again,
    with the newcomers pending)."""
    if storage.count_trials(conn, study_id) == len(trials):
        return configs
    now = storage.trials(study_id, conn)
    added = [t.config for t in now[len(trials) :]]
    if any(c in added for c in configs):
        return None
    room = len(configs) if budget is None else min(len(configs), budget - used(now))
    return configs[: max(room, 0)]


def reap(
    storage: Storage,
    conn: Connection,
    study_id: int,
    settings: StudySettings,
    alive: str | None = None,
) -> list[int]:
    """Re-queue the study's stale trials inside the caller's write transaction (the study
    locked): `Storage.reap_stale` with the study's grace period, and its dead-local-worker check
    when `StudySettings.reap_dead_local_workers` is on. Returns their numbers."""
    is_dead = dead_local_worker if settings.reap_dead_local_workers else never_dead
    stale = storage.reap_stale(conn, study_id, settings.grace_period, is_dead, alive=alive)
    for number in stale:
        logger.warning("Trial %d went stale (worker gone); its config was re-queued.", number)
    return stale
