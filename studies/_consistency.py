"""The logical consistency check behind `studies.storage.Storage.integrity_check` (both backends):
the invariants every write keeps, read back with SQL inside the caller's transaction.

- a study's trial numbers run 0..n-1 (the unique constraint rules out repeats);
- every state is one of `schema.TRIAL_STATES`, and a COMPLETE trial has values;
- a re-queued copy (``retry_of``) re-runs a FAILED trial of its study, and no trial is re-queued
  twice;
- trials and reservations belong to a study that exists.
"""

from __future__ import annotations

from sqlalchemy import Connection, and_, func, or_, select

from studies import schema

__all__ = ["consistency_problems"]

_S, _T, _R = schema.studies, schema.trials, schema.reservations
_SHOWN = 10  # problems listed per kind


def consistency_problems(conn: Connection) -> list[str]:
    """Every broken invariant found (empty: consistent), at most ``_SHOWN`` of each kind."""
    out: list[str] = []
    counts = select(
        _T.c.study_id, func.count(), func.min(_T.c.number), func.max(_T.c.number)
    ).group_by(_T.c.study_id)
    for sid, n, lo, hi in conn.execute(counts):
        if (lo, hi) != (0, n - 1):
            out.append(f"study id {sid}: its {n} trials are numbered {lo}..{hi}, not 0..{n - 1}")
    states = select(_T.c.study_id, _T.c.number, _T.c.state).where(
        or_(
            _T.c.state.not_in(schema.TRIAL_STATES),
            and_(_T.c.state == "COMPLETE", _T.c["values"].is_(None)),
        )
    )
    for sid, number, state in conn.execute(states.limit(_SHOWN)):
        why = "without values" if state == "COMPLETE" else f"not one of {schema.TRIAL_STATES}"
        out.append(f"study id {sid}, trial {number}: state {state!r} {why}")
    orig = _T.alias("orig")
    joined = _T.outerjoin(
        orig, and_(orig.c.study_id == _T.c.study_id, orig.c.number == _T.c.retry_of)
    )
    retries = (
        select(_T.c.study_id, _T.c.number, _T.c.retry_of, orig.c.state)
        .select_from(joined)
        .where(_T.c.retry_of.is_not(None), or_(orig.c.id.is_(None), orig.c.state != "FAILED"))
    )
    for sid, number, of, state in conn.execute(retries.limit(_SHOWN)):
        out.append(
            f"study id {sid}, trial {number}: re-runs trial {of}, which is {state or 'missing'}"
        )
    twice = (
        select(_T.c.study_id, _T.c.retry_of, func.count())
        .where(_T.c.retry_of.is_not(None))
        .group_by(_T.c.study_id, _T.c.retry_of)
        .having(func.count() > 1)
    )
    for sid, of, n in conn.execute(twice.limit(_SHOWN)):
        out.append(f"study id {sid}: trial {of} was re-queued {n} times")
    for table in (_T, _R):
        orphans = (
            select(func.count()).select_from(table).where(table.c.study_id.not_in(select(_S.c.id)))
        )
        n = conn.execute(orphans).scalar_one()
        if n:
            out.append(f"{n} rows of '{table.name}' belong to no study")
    return out
