"""Schema setup for `studies.storage.Storage` on open: create the tables on an empty database,
refuse a foreign or newer one, run `schema.MIGRATIONS` on an older one and add the nullable
`schema.ADDED_COLUMNS` it lacks.

Every function here runs inside the caller's write transaction (``conn``) and opens none itself.
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import Connection, inspect, select, text, update

from studies import schema
from studies.errors import FormatVersionError, StorageCorruptError, StorageNotFoundError

__all__ = ["add_missing_columns", "check_version", "migrate", "prepare_schema", "version_row"]


def prepare_schema(conn: Connection, url: str, *, create: bool) -> None:
    """Create the schema on an empty database (if ``create``), migrate an old one, refuse a newer
    or foreign one; inside the caller's write transaction ``conn``.

    Raises:
        StorageNotFoundError: If the database is empty and ``create`` is false.
        StorageCorruptError: If it is not a rewrite-tuner storage or its version row is missing.
        FormatVersionError: If it was written by a newer rewrite-tuner.
    """
    if conn.dialect.name != "sqlite":
        conn.execute(text("SELECT pg_advisory_xact_lock(7311001)"))
    tables = set(inspect(conn).get_table_names())
    if not tables:
        if not create:
            raise StorageNotFoundError(
                f"{url} is an empty database, so it holds no study; nothing was "
                "created. Check the --storage URL, or create a study there first "
                "(`tuner run FILE`, `tuner demo`, or studies.Study(..., storage=URL))."
            )
        schema.metadata.create_all(conn)
        conn.execute(schema.format_version.insert().values(**version_row()))
        return
    if "format_version" not in tables:
        raise StorageCorruptError(
            f"{url} holds tables {sorted(tables)} but no 'format_version' table, so "
            "it is not a rewrite-tuner study storage. Nothing was changed; use another "
            "database file or URL."
        )
    version = conn.execute(select(schema.format_version.c.version)).scalar()
    if version is None:
        raise StorageCorruptError(
            f"{url} has an empty 'format_version' table; the storage is damaged. "
            "Nothing was changed; restore it from a backup or use a new database."
        )
    migrate(conn, int(version), url)
    add_missing_columns(conn)


def version_row() -> dict[str, Any]:
    """The ``format_version`` row this release writes."""
    from studies import __version__

    return {
        "id": 1,
        "version": schema.FORMAT_VERSION,
        "written_by": f"rewrite-tuner {__version__}",
        "updated": time.time(),
    }


def check_version(version: int, url: str) -> None:
    """Raise `FormatVersionError` if schema ``version`` is newer than this release reads."""
    if version > schema.FORMAT_VERSION:
        raise FormatVersionError(
            f"{url} has schema format_version {version}, but this rewrite-tuner reads versions up "
            f"to {schema.FORMAT_VERSION}. Upgrade rewrite-tuner (pip install -U rewrite-tuner); "
            "nothing was changed."
        )


def migrate(conn: Connection, version: int, url: str) -> None:
    """Upgrade a database at schema ``version`` to `schema.FORMAT_VERSION` (refusing a newer one)
    and bring its version row up to date."""
    check_version(version, url)
    while version < schema.FORMAT_VERSION:
        schema.MIGRATIONS[version](conn)
        version += 1
    if conn.execute(select(schema.format_version.c.version)).scalar() != version:
        conn.execute(update(schema.format_version).values(**version_row()))


def add_missing_columns(conn: Connection) -> None:
    """Add the nullable columns of `schema.ADDED_COLUMNS` that an older database lacks (inside the
    open transaction, so concurrent openers add each column once)."""
    insp = inspect(conn)
    for table, column in schema.ADDED_COLUMNS:
        have = {c["name"] for c in insp.get_columns(table)}
        if column.name not in have:
            schema.add_column(conn, table, column)
