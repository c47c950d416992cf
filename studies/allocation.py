"""Trial allocation and reaping for one study: the transactions behind `Study.allocate`.

Several processes may drive one study at once. Each allocation runs in three steps, and only the
first and the last hold the study's lock (two short write transactions, milliseconds each):

1. **Claim and reserve** (locked): re-queue stale trials and delete stale reservations (`reap`),
   claim WAITING trials, then reserve a proposal *position* for each slot still free
   (`Storage.reserve`), as many as the budget allows once every live reservation is counted.
2. **Propose** (no transaction): read a snapshot of the trials and the other processes'
   reservations, and propose one configuration per reserved position. A proposal is seeded by
   its position (`tuner.engine.propose`), so two processes that read the same snapshot propose
   different configurations instead of the same one; the other processes' reserved positions
   whose configuration is predictable (the initial design's point at that position) are pending
   points. RUNNING and WAITING trials are pending points, as always.
3. **Fill in** (locked): insert the proposals as RUNNING trials carrying their positions and
   delete the reservations. A proposal equal to a trial another process added since the snapshot
   is dropped, not re-proposed (the caller's next allocation proposes with that trial pending),
   and no more are inserted than the budget still allows.

A process proposing alone reserves the trial count as its position: exactly the seed and the
design point a tuner rebuilt from the stored trials would use, so single-driver seeded runs
repeat bit for bit. A process killed while proposing leaves its reservations behind; the next
allocation of any process deletes them once they are stale (heartbeat past the grace period, or
a dead process on this host), which frees their budget: nothing was stored, nothing is lost.

These functions hold no state: the storage, the study's id and its settings are passed in.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from studies.views import used
from studies.workers_local import dead_local_worker, never_dead

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from studies.records import TrialRecord
    from studies.settings import StudySettings
    from studies.storage import Storage

__all__ = ["CLAIM_ATTEMPTS", "Propose", "allocate", "fill", "reap"]

# the log lines of allocation are the study's, under the logger they always had
logger = logging.getLogger("studies.study")

#: Claims retried per `allocate` call while other processes keep re-queueing trials between the
#: claim and the snapshot (each retry claims them; no proposal is made in between).
CLAIM_ATTEMPTS = 8


class Propose(Protocol):
    """``propose(trials, n, position, reserved)``: ``n`` new configurations for the snapshot
    ``trials``, seeded by the proposal ``position`` of the first, with the other processes'
    reserved positions ``reserved`` in flight."""

    def __call__(
        self, trials: list[TrialRecord], n: int, position: int, reserved: Sequence[int]
    ) -> list[dict[str, Any]]: ...


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
    """Hand ``worker`` up to ``k`` RUNNING trials of study ``study_id`` (see `Study.allocate`
    and the module docstring)."""
    out: list[TrialRecord] = []
    for _attempt in range(CLAIM_ATTEMPTS):
        with storage.write() as conn:
            storage.lock_study(conn, study_id)
            reap(storage, conn, study_id, settings, alive=worker)
            storage.release(conn, study_id, worker)  # left by a failed release: not in flight
            while len(out) < k:
                claimed = storage.claim_waiting(conn, study_id, worker, heartbeat)
                if claimed is None:
                    break
                out.append(claimed)
            room = k - len(out)
            if budget is not None and room > 0:
                held = len(storage.reservations(study_id, conn))
                room = min(room, budget - storage.count_used(conn, study_id) - held)
            if room <= 0:
                return out
            positions = storage.reserve(conn, study_id, worker, room)
        try:
            with storage.read() as conn:  # one snapshot: the trials and the reservations agree
                trials = storage.trials(study_id, conn)
                reserved = [r.position for r in storage.reservations(study_id, conn)]
            if any(t.state == "WAITING" for t in trials):
                # re-queued since the claim: claim it first (a tuner hands WAITING trials out
                # before proposing, and its config must not be inserted a second time)
                with storage.write() as conn:
                    storage.release(conn, study_id, worker, positions)
                continue
            others = [p for p in reserved if p not in positions]
            proposed = propose(trials, len(positions), positions[0], others)
            with storage.write() as conn:
                storage.lock_study(conn, study_id)
                out += fill(
                    storage, conn, study_id, trials, proposed, positions, worker, budget, heartbeat
                )
        except BaseException:
            # best effort: a stale reservation is reaped anyway
            with contextlib.suppress(Exception), storage.write() as conn:
                storage.release(conn, study_id, worker, positions)
            raise
        return out
    return out


def fill(
    storage: Storage,
    conn: Connection,
    study_id: int,
    trials: list[TrialRecord],
    configs: list[dict[str, Any]],
    positions: Sequence[int],
    worker: str,
    budget: int | None,
    heartbeat: bool = True,
) -> list[TrialRecord]:
    """Insert the proposals ``configs`` made on the snapshot ``trials`` for ``worker``'s reserved
    ``positions`` as RUNNING trials, and release the reservations (inside the allocation
    transaction, the study locked). Returns the trials inserted.

    A proposal equal to a trial other processes added since the snapshot is dropped (they proposed
    it first); the rest are kept, as many as the budget allows once the other processes'
    reservations are counted (all of them unless this process's reservations were reaped while it
    proposed)."""
    now = trials
    if storage.count_trials(conn, study_id) != len(trials):
        now = storage.trials(study_id, conn)
    added = [t.config for t in now[len(trials) :]]
    keep = [(p, c) for p, c in zip(positions, configs, strict=True) if c not in added]
    if len(keep) < len(configs):
        logger.info(
            "%d proposal(s) equal trials another process added meanwhile; dropped.",
            len(configs) - len(keep),
        )
    storage.release(conn, study_id, worker, positions)
    if budget is not None:
        held = len(storage.reservations(study_id, conn))
        keep = keep[: max(budget - used(now) - held, 0)]
    return [
        storage.add_trial(conn, study_id, c, worker=worker, heartbeat=heartbeat, position=p)
        for p, c in keep
    ]


def reap(
    storage: Storage,
    conn: Connection,
    study_id: int,
    settings: StudySettings,
    alive: str | None = None,
) -> list[int]:
    """Re-queue the study's stale trials and delete its stale reservations inside the caller's
    write transaction (the study locked): `Storage.reap_stale` and `Storage.reap_reservations`
    with the study's grace period, and its dead-local-worker check when
    `StudySettings.reap_dead_local_workers` is on. Returns the numbers of the trials re-queued."""
    is_dead = dead_local_worker if settings.reap_dead_local_workers else never_dead
    stale = storage.reap_stale(conn, study_id, settings.grace_period, is_dead, alive=alive)
    for number in stale:
        logger.warning("Trial %d went stale (worker gone); its config was re-queued.", number)
    gone = storage.reap_reservations(conn, study_id, settings.grace_period, is_dead, alive=alive)
    if gone:
        logger.warning(
            "Freed %d proposal reservation(s) of workers that stopped reporting (%s).",
            len(gone),
            ", ".join(sorted({r.worker for r in gone})),
        )
    return stale
