"""The relational schema of a study storage and its migrations.

Four tables (SQLAlchemy Core, portable between SQLite and PostgreSQL):

- ``format_version``: one row, the schema version the database was written with.
- ``studies``: one row per study (unique name, space / objectives / constraints / settings as JSON
  text, seed, budget, evaluate reference, creation time) and, since version 3, its ``context``:
  the JSON object every evaluation receives beside its configuration (what an application's
  evaluate needs that is not tuned, e.g. workloads and a calibration), stored once here instead
  of in every trial's configuration; ``NULL`` for studies without one and every older row.
- ``trials``: one row per trial (study, number, state, config / values / metrics as JSON text, error,
  created / started / finished / heartbeat times as Unix seconds, worker, ``retry_of``, and the
  worker-measured evaluation time ``seconds``) and, since version 2, the proposal ``position``
  it was proposed at (the index that seeds the proposal and picks its initial-design point;
  ``NULL`` for re-queued copies, trials told by hand before version 2 and every older row).
- ``reservations`` (version 2): one row per proposal a driving process has reserved and is still
  computing outside any transaction (study, position, worker, created / heartbeat times). A row
  lives from the allocation transaction that reserves it to the one that fills it in as a trial
  (or releases it); a driver killed in between leaves it behind until another process reaps it
  (`studies.allocation`). It counts against the study's budget.

JSON is stored as text written by `dumps` (strict: no NaN or infinity, which PostgreSQL's JSON types
would reject anyway), never pickle. Upgrading a database from version ``v`` to ``v + 1`` runs
``MIGRATIONS[v]`` inside one transaction; every past version keeps a golden database under
``tests/data/`` that the test-suite upgrades.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable
from typing import Any

from sqlalchemy import (
    Column,
    Connection,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
    text,
)

from studies.errors import StudyError

__all__ = [
    "ADDED_COLUMNS",
    "add_column",
    "FORMAT_VERSION",
    "MAX_SEED",
    "MIGRATIONS",
    "TRIAL_STATES",
    "reservations",
    "check_seed",
    "dumps",
    "format_version",
    "loads",
    "metadata",
    "studies",
    "trials",
]

#: Schema version written by this release. 2: ``trials.position`` and the ``reservations``
#: table (proposals computed outside the study's lock). 3: ``studies.context``.
FORMAT_VERSION = 3

#: Allowed values of ``trials.state``.
TRIAL_STATES = ("WAITING", "RUNNING", "COMPLETE", "FAILED")

metadata = MetaData()

format_version = Table(
    "format_version",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("version", Integer, nullable=False),
    Column("written_by", String(64), nullable=False),
    Column("updated", Float, nullable=False),
)

studies = Table(
    "studies",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(255), nullable=False, unique=True),
    Column("space", Text, nullable=False),
    Column("objectives", Text, nullable=False),
    Column("constraints", Text, nullable=False),
    Column("settings", Text, nullable=False),
    Column("seed", Integer, nullable=False),
    Column("budget", Integer, nullable=True),
    Column("evaluate_ref", Text, nullable=True),
    Column("created", Float, nullable=False),
    # version 3: the study's context (see the module docstring); added by MIGRATIONS[2]
    Column("context", Text, nullable=True),
)

trials = Table(
    "trials",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study_id", Integer, ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
    Column("number", Integer, nullable=False),
    Column("state", String(16), nullable=False),
    Column("config", Text, nullable=False),
    Column("values", Text, nullable=True),
    Column("metrics", Text, nullable=False),
    Column("error", Text, nullable=True),
    Column("created", Float, nullable=False),
    Column("started", Float, nullable=True),
    Column("finished", Float, nullable=True),
    Column("heartbeat", Float, nullable=True),
    Column("worker", String(255), nullable=True),
    Column("retry_of", Integer, nullable=True),
    # Added after format_version 1 without a bump: nullable, added on open where missing
    # (`ADDED_COLUMNS`), and ignored by readers that predate it.
    Column("seconds", Float, nullable=True),
    # version 2: the proposal position (see the module docstring); added by MIGRATIONS[1]
    Column("position", Integer, nullable=True),
    UniqueConstraint("study_id", "number", name="uq_trials_study_number"),
    Index("ix_trials_study_state", "study_id", "state"),
)

reservations = Table(
    "reservations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("study_id", Integer, ForeignKey("studies.id", ondelete="CASCADE"), nullable=False),
    Column("position", Integer, nullable=False),
    Column("worker", String(255), nullable=False),
    Column("created", Float, nullable=False),
    Column("heartbeat", Float, nullable=False),
    UniqueConstraint("study_id", "position", name="uq_reservations_study_position"),
)


#: Nullable columns added to existing tables on open, (table, column), so a database written before
#: they existed gains them without a ``format_version`` bump (older readers ignore them).
ADDED_COLUMNS = (("trials", trials.c.seconds),)


def dumps(obj: Any) -> str:
    """Serialize to strict JSON text (sorted keys, no NaN / infinity).

    Raises:
        ValueError: If ``obj`` holds a non-finite float or a value JSON cannot represent.
    """
    return json.dumps(obj, sort_keys=True, allow_nan=False, separators=(",", ":"))


def _reject_constant(name: str) -> float:
    raise ValueError(f"stored JSON must not contain {name}, but it does.")


def loads(text: str | None) -> Any:
    """Parse JSON text written by `dumps`; ``None`` stays ``None``.

    Raises:
        ValueError: If the text is not valid strict JSON.
    """
    if text is None:
        return None
    return json.loads(text, parse_constant=_reject_constant)


def finite(x: float) -> bool:
    """Whether ``x`` is a finite real number (bools excluded)."""
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


#: The largest seed: the ``studies.seed`` column is a signed 64-bit integer.
MAX_SEED = 2**63 - 1


def check_seed(seed: Any) -> int:
    """``seed`` as an int in ``[0, MAX_SEED]`` (the tuner takes ints >= 0; the storage holds
    signed 64-bit integers).

    Raises:
        StudyError: For anything else (bools, floats and strings included).
    """
    if (
        isinstance(seed, bool)
        or not isinstance(seed, numbers.Integral)
        or not (0 <= int(seed) <= MAX_SEED)
    ):
        raise StudyError(
            f"seed must be an int in [0, 2**63 - 1], got {seed!r}; pass e.g. seed=0 (a float or "
            "a string is not rounded or parsed)."
        )
    return int(seed)


def add_column(conn: Connection, table: str, column: Column[Any]) -> None:
    """``ALTER TABLE table ADD COLUMN`` for the nullable ``column`` (inside the caller's
    transaction), in the dialect of ``conn``."""
    kind = column.type.compile(dialect=conn.dialect)
    prep = conn.dialect.identifier_preparer
    conn.execute(
        text(f"ALTER TABLE {prep.quote(table)} ADD COLUMN {prep.quote(column.name)} {kind}")
    )


def _v1_to_v2(conn: Connection) -> None:
    """Version 2: ``trials.position`` and the ``reservations`` table."""
    add_column(conn, "trials", trials.c.position)
    reservations.create(conn)


def _v2_to_v3(conn: Connection) -> None:
    """Version 3: ``studies.context`` (``NULL`` for the studies already stored)."""
    add_column(conn, "studies", studies.c.context)


#: ``MIGRATIONS[v](connection)`` upgrades a version-``v`` database to version ``v + 1`` in place.
#: It runs inside the caller's transaction and must not commit.
MIGRATIONS: dict[int, Callable[[Connection], None]] = {1: _v1_to_v2, 2: _v2_to_v3}
