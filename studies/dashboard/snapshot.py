"""`Snapshot`: one consistent read of a study, and `Watcher`, which keeps it current cheaply.

A `Watcher` polls `ReadOnlyStorage.stamp` (one aggregate query) and re-reads only when the stamp
changed, and then only the trials that can have changed: finished trials (COMPLETE, FAILED) never
change again, so they are kept and only newer or unfinished ones are read. Thread-safe: the
dashboard's request threads share one `Watcher` per study.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from studies.dashboard.readonly import ReadOnlyStorage, Stamp
from studies.errors import StorageCorruptError
from studies.records import Reservation, StudyRecord, TrialRecord

if TYPE_CHECKING:
    from spaces import Space

__all__ = ["Snapshot", "Watcher"]


@dataclass(frozen=True)
class Snapshot:
    """A study as stored at one moment (read in one transaction).

    Attributes:
        record: The study row.
        space: Its search space.
        trials: Every trial, in number order.
        reservations: Proposals drivers are computing.
        stamp: `ReadOnlyStorage.stamp` at the read.
        read_at: When it was read, Unix seconds (this machine's clock).
        url: The storage URL, password masked.
        version: Increases by one at every re-read that found a change (pages use it to redraw
            only what changed).
    """

    record: StudyRecord
    space: Space
    trials: tuple[TrialRecord, ...]
    reservations: tuple[Reservation, ...]
    stamp: Stamp
    read_at: float
    url: str
    version: int = 0
    cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def name(self) -> str:
        """The study's name."""
        return self.record.name

    @property
    def objectives(self) -> dict[str, str]:
        """Objective name to direction."""
        return dict(self.record.objectives)

    @property
    def constraints(self) -> list[str]:
        """Outcome constraints as strings."""
        return list(self.record.constraints)


class Watcher:
    """The latest `Snapshot` of one study, re-read only when it changed (module docstring).

    Args:
        storage: Where the study is.
        name: The study's name.
    """

    def __init__(self, storage: ReadOnlyStorage, name: str) -> None:
        self.storage = storage
        self.name = name
        self._lock = threading.Lock()
        self._snapshot: Snapshot | None = None
        self._finished: dict[int, TrialRecord] = {}
        self._space_json: Any = None
        self._space: Space | None = None

    def snapshot(self) -> Snapshot:
        """The study as stored now (the previous snapshot when nothing changed).

        Raises:
            StudyError: As `ReadOnlyStorage.read` and `ReadOnlyStorage.study` (the study or the
                database does not exist, or cannot be read).
        """
        with self._lock, self.storage.read() as conn:
            record = self.storage.study(self.name, conn)
            stamp = self.storage.stamp(record, conn)
            old = self._snapshot
            if old is not None and old.stamp == stamp and old.record == record:
                return old
            if old is not None and old.record.id != record.id:  # the study was re-created
                self._finished.clear()
            since = 0  # every trial below it is finished and kept
            while since in self._finished:
                since += 1
            fresh = self.storage.trials(record, conn, since=since)
            reservations = self.storage.reservations(record, conn)
            for t in fresh:
                if t.state.is_finished:
                    self._finished[t.number] = t
            merged = {**self._finished, **{t.number: t for t in fresh}}
            trials = tuple(merged[n] for n in sorted(merged))
            snap = Snapshot(
                record=record,
                space=self._space_of(record),
                trials=trials,
                reservations=tuple(reservations),
                stamp=stamp,
                read_at=time.time(),
                url=self.storage.url,
                version=(old.version + 1) if old is not None else 1,
            )
            self._snapshot = snap
            return snap

    def _space_of(self, record: StudyRecord) -> Space:
        """The study's `spaces.Space`, parsed once."""
        from spaces import Space

        if self._space is None or self._space_json != record.space:
            try:
                self._space = Space.from_dict(record.space)
            except (ValueError, TypeError, KeyError) as err:
                raise StorageCorruptError(
                    f"The stored study {record.name!r} in {self.storage.url} is damaged: its "
                    f"'space' column does not describe a space ({type(err).__name__}: {err}). "
                    "Nothing was changed."
                ) from err
            self._space_json = record.space
        return self._space
