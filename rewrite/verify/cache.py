"""A verdict cache shared by the processes of one machine: a small SQLite file.

Rows are ``(namespace, key) -> JSON record``; keys are content hashes (a rule fingerprint for z3
proofs, the two graphs' structural hashes plus the check settings for random tests), so a cached
verdict can never belong to a different rule or graph. Writes are single-statement transactions
(atomic); SQLite's WAL mode lets many readers proceed while one process writes, and a busy
timeout absorbs write contention. The file carries a ``format_version``; opening a file written by
a newer version fails with an upgrade hint. No pickle: records are JSON.

The default location is ``$REWRITE_CACHE_DIR/verdicts.sqlite`` (default directory
``~/.cache/rewrite-tuner``). ``VerdictCache(None)`` is an in-memory cache for one process.

Thread- and fork-safety: one connection per (process, thread), created lazily. A process forked
from one that used the cache opens its own connection on first use (SQLite connections must not
cross a ``fork``); safe across processes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from rewrite.errors import VerificationError

__all__ = ["FORMAT_VERSION", "VerdictCache", "default_cache", "default_cache_dir"]

#: Version of the on-disk layout.
FORMAT_VERSION = 1


def default_cache_dir() -> Path:
    """``$REWRITE_CACHE_DIR`` or ``~/.cache/rewrite-tuner``."""
    env = os.environ.get("REWRITE_CACHE_DIR")
    return Path(env) if env else Path.home() / ".cache" / "rewrite-tuner"


class VerdictCache:
    """Namespaced JSON records keyed by content hashes, in SQLite.

    Args:
        path: SQLite file (created with its directory), or None for a private in-memory cache.

    Raises:
        VerificationError: If the file was written by a newer format version.
    """

    def __init__(self, path: str | os.PathLike[str] | None) -> None:
        self.path = None if path is None else Path(path)
        self._local = threading.local()
        self._inherited: list[sqlite3.Connection] = []  # a forked parent's, kept open unused
        self._mem: dict[tuple[str, str], dict[str, Any]] | None = {} if path is None else None
        self.hits = self.misses = 0
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._init_schema()

    def _conn(self) -> sqlite3.Connection:
        """This thread's connection in this process, opened on first use.

        A thread-local inherited through ``fork`` holds the parent's connection: it is set aside
        in `_inherited`, never used and never closed (closing it could checkpoint and remove
        the parent's WAL file), and the child opens its own.
        """
        pid = os.getpid()
        conn = getattr(self._local, "conn", None)
        if conn is not None and self._local.pid != pid:
            self._inherited.append(conn)
            conn = None
        if conn is None:
            conn = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            self._local.conn, self._local.pid = conn, pid
        return conn

    def _init_schema(self) -> None:
        c = self._conn()
        c.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
        c.execute(
            "CREATE TABLE IF NOT EXISTS verdicts (ns TEXT NOT NULL, key TEXT NOT NULL, "
            "record TEXT NOT NULL, PRIMARY KEY (ns, key))"
        )
        c.execute("INSERT OR IGNORE INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
        (v,) = c.execute("SELECT v FROM meta WHERE k = 'format_version'").fetchone()
        if int(v) > FORMAT_VERSION:
            raise VerificationError(
                f"verdict cache {self.path} has format_version {v}, newer than this code's "
                f"{FORMAT_VERSION}; upgrade rewrite-tuner or point REWRITE_CACHE_DIR elsewhere."
            )

    def get(self, ns: str, key: str) -> dict[str, Any] | None:
        """The record stored under ``(ns, key)``, or None. A corrupt record counts as missing."""
        if self._mem is not None:
            rec = self._mem.get((ns, key))
        else:
            row = (
                self._conn()
                .execute("SELECT record FROM verdicts WHERE ns = ? AND key = ?", (ns, key))
                .fetchone()
            )
            try:
                rec = None if row is None else json.loads(row[0])
            except json.JSONDecodeError:
                rec = None
        if rec is None:
            self.misses += 1
        else:
            self.hits += 1
        return rec

    def put(self, ns: str, key: str, record: dict[str, Any]) -> None:
        """Store ``record`` (JSON-serializable) under ``(ns, key)``, replacing any old one."""
        if self._mem is not None:
            self._mem[(ns, key)] = dict(record)
            return
        text = json.dumps(record, sort_keys=True)
        self._conn().execute("INSERT OR REPLACE INTO verdicts VALUES (?, ?, ?)", (ns, key, text))

    def __len__(self) -> int:
        if self._mem is not None:
            return len(self._mem)
        return int(self._conn().execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])

    def clear(self, ns: str | None = None) -> None:
        """Delete every record (of namespace ``ns`` when given)."""
        if self._mem is not None:
            for k in [k for k in self._mem if ns is None or k[0] == ns]:
                del self._mem[k]
            return
        if ns is None:
            self._conn().execute("DELETE FROM verdicts")
        else:
            self._conn().execute("DELETE FROM verdicts WHERE ns = ?", (ns,))


_DEFAULT: dict[str, VerdictCache] = {}


def default_cache() -> VerdictCache:
    """The process-wide cache at ``default_cache_dir() / "verdicts.sqlite"``."""
    path = str(default_cache_dir() / "verdicts.sqlite")
    c = _DEFAULT.get(path)
    if c is None:
        c = _DEFAULT[path] = VerdictCache(path)
    return c
