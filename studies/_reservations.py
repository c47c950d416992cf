"""Proposal reservations for `studies.storage.Storage` (the ``reservations`` table, format 2).

A driving process reserves proposal positions in its allocation transaction, proposes outside any
transaction and fills the positions in as trials in a second one (`studies.allocation`). Every
function here is a step of the caller's transaction ``conn`` (the study locked for writes) and
opens none itself; times come from the storage's clock (``now``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Connection, func, select, update

from studies import schema
from studies.records import Reservation

__all__ = ["reap", "release", "reserve", "reservations"]

_T = schema.trials
_R = schema.reservations


def reservations(conn: Connection, study_id: int) -> list[Reservation]:
    """The study's live reservations in position order."""
    query = select(_R).where(_R.c.study_id == study_id).order_by(_R.c.position)
    return [
        Reservation(int(r.position), str(r.worker), float(r.created), float(r.heartbeat))
        for r in conn.execute(query)
    ]


def reserve(
    conn: Connection, study_id: int, worker: str, k: int, n_trials: int, now: float
) -> list[int]:
    """Reserve ``k`` consecutive positions for ``worker`` from ``n_trials`` (the trial count), or
    from past the highest position a trial or a live reservation holds if that is further."""
    if k <= 0:
        return []
    tops = [
        conn.execute(select(func.max(t.c.position)).where(t.c.study_id == study_id)).scalar()
        for t in (_T, _R)
    ]
    start = max([n_trials] + [int(v) + 1 for v in tops if v is not None])
    positions = list(range(start, start + k))
    row = {"study_id": study_id, "worker": worker, "created": now, "heartbeat": now}
    conn.execute(_R.insert(), [{**row, "position": p} for p in positions])
    return positions


def release(
    conn: Connection, study_id: int, worker: str, positions: Sequence[int] | None = None
) -> int:
    """Delete ``worker``'s reservations (only ``positions``, if given); returns how many."""
    cond = [_R.c.study_id == study_id, _R.c.worker == worker]
    if positions is not None:
        cond.append(_R.c.position.in_(list(positions)))
    return int(conn.execute(_R.delete().where(*cond)).rowcount)


def reap(
    conn: Connection,
    study_id: int,
    grace_period: float,
    is_dead: Callable[[str], bool],
    alive: str | None,
    now: float,
) -> list[Reservation]:
    """Refresh ``alive``'s reservations, delete the others' that are stale; returns those."""
    if alive is not None:
        conn.execute(
            update(_R).where(_R.c.study_id == study_id, _R.c.worker == alive).values(heartbeat=now)
        )
    stale = [
        r
        for r in reservations(conn, study_id)
        if r.worker != alive and (now - r.heartbeat > grace_period or is_dead(r.worker))
    ]
    for r in stale:
        conn.execute(_R.delete().where(_R.c.study_id == study_id, _R.c.position == r.position))
    return stale
