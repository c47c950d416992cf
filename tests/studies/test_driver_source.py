"""The optimize loop against a minimal in-memory `TrialSource`: no `Study`, no storage.

The source keeps its trials in a list and checks the contract as the driver uses it: claims stay
within the budget, at most ``n_workers`` trials run at once (counted where evaluate runs, not
where the driver thinks), heartbeats only name the worker's RUNNING trials, and every trial is
recorded once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

import studies.driver as driver
from studies.errors import RepeatedFailureError
from studies.source import SourceStatus, TrialSource


@dataclass
class _Trial:
    number: int
    config: dict[str, Any]
    state: str = "RUNNING"
    worker: str | None = None
    error: str | None = None
    result: dict[str, float] | None = None
    retry_of: int | None = None


@dataclass
class MemorySource:
    """A `TrialSource` in a list (configs ``{"x": 0}``, ``{"x": 1}``, ...)."""

    name: str = "memory"
    heartbeat_interval: float = 0.1
    max_repeated_failures: int = 0
    trials: list[_Trial] = field(default_factory=list)
    beats: list[tuple[float, tuple[int, ...]]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    propose_seconds: float = 0.0  # each new configuration takes this long to propose
    made: int = 0
    proposing: float = 0.0

    def claim(self, worker: str, k: int, budget: int | None) -> list[_Trial]:
        out = [t for t in self.trials if t.state == "WAITING"][:k]
        for t in out:
            t.state, t.worker = "RUNNING", worker
        while len(out) < k and (budget is None or self._used() < budget):
            t0 = time.perf_counter()
            time.sleep(self.propose_seconds)
            self.made, self.proposing = self.made + 1, self.proposing + time.perf_counter() - t0
            t = _Trial(len(self.trials), {"x": len(self.trials)}, worker=worker)
            self.trials.append(t)
            out.append(t)
        return out

    def proposals(self) -> tuple[int, float]:
        return self.made, self.proposing

    def heartbeat(self, worker: str, numbers: Sequence[int]) -> None:
        held = {t.number for t in self.trials if t.state == "RUNNING" and t.worker == worker}
        assert set(numbers) <= held, (numbers, held)
        self.beats.append((time.monotonic(), tuple(numbers)))

    def record(
        self, worker: str, number: int, outcome: Mapping[str, Any]
    ) -> tuple[str, str | None] | None:
        t = self.trials[number]
        assert t.state == "RUNNING" and t.worker == worker, t  # recorded once, by its holder
        t.state = "COMPLETE" if outcome["ok"] else "FAILED"
        t.result, t.error = outcome.get("result"), outcome.get("error")
        return t.state, t.error

    def requeue(self, worker: str, numbers: Sequence[int] | None, reason: str) -> list[int]:
        held = [t for t in self.trials if t.state == "RUNNING" and t.worker == worker]
        done = [t.number for t in held if numbers is None or t.number in numbers]
        for n in done:
            self.trials[n].state, self.trials[n].error = "FAILED", reason
            self.trials.append(_Trial(len(self.trials), self.trials[n].config, "WAITING", None))
            self.trials[-1].retry_of = n
        return done

    def reap_stale(self) -> list[int]:
        return []

    def status(self) -> SourceStatus:
        waiting = sum(t.state == "WAITING" for t in self.trials)
        live = sum(t.state == "RUNNING" for t in self.trials)
        finished = sum(t.state in ("COMPLETE", "FAILED") for t in self.trials)
        retries = sum(t.retry_of is not None for t in self.trials)
        return SourceStatus(finished - retries, self._used(), waiting, live)

    def best(self) -> str:
        return "best -"

    def _used(self) -> int:
        return sum(t.retry_of is None for t in self.trials)


class _Gauge:
    """Counts evaluations running at once, where they run."""

    def __init__(self) -> None:
        self.lock, self.now, self.peak = threading.Lock(), 0, 0

    def __call__(self, seconds: float) -> None:
        with self.lock:
            self.now += 1
            self.peak = max(self.peak, self.now)
        try:
            time.sleep(seconds)
        finally:
            with self.lock:
                self.now -= 1


def test_memory_source_satisfies_the_protocol() -> None:
    source: TrialSource = MemorySource()  # mypy checks the structure; this checks it runs
    assert source.status() == SourceStatus(0, 0, 0, 0)


def test_loop_fills_slots_beats_and_records_every_trial() -> None:
    source, gauge = MemorySource(), _Gauge()

    def evaluate(config: dict[str, Any]) -> dict[str, float]:
        gauge(0.25)
        return {"f": float(config["x"])}

    with ThreadPoolExecutor(4) as pool:  # more threads than slots: the driver must hold back
        driver.run(source, evaluate, 6, 2, pool, None, False)
    assert [t.state for t in source.trials] == ["COMPLETE"] * 6
    assert [t.result for t in source.trials] == [{"f": float(i)} for i in range(6)]
    assert gauge.peak == 2
    assert source.beats and all(1 <= len(n) <= 2 for _, n in source.beats)


def test_timeout_fails_the_trial_but_keeps_its_slot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A thread cannot be stopped: its trial is FAILED at the timeout, and no new trial takes
    its slot until it returns (no more than ``n_workers`` evaluations ever run)."""
    monkeypatch.setattr(driver, "_TIMEOUT_SLACK", 0.1)
    source, gauge = MemorySource(), _Gauge()

    def evaluate(config: dict[str, Any]) -> dict[str, float]:
        gauge(1.2 if config["x"] == 0 else 0.05)
        return {"f": 1.0}

    with ThreadPoolExecutor(4) as pool:
        driver.run(source, evaluate, 4, 2, pool, 0.3, False)
    states = [t.state for t in source.trials]
    assert states == ["FAILED", "COMPLETE", "COMPLETE", "COMPLETE"]
    assert str(source.trials[0].error).startswith("TimeoutError")
    assert gauge.peak <= 2


def test_repeated_failures_stop_and_held_trials_are_requeued() -> None:
    source = MemorySource(max_repeated_failures=3)
    started = threading.Event()

    def evaluate(config: dict[str, Any]) -> dict[str, float]:
        if config["x"] == 0:  # still running when the run stops: handed back
            started.set()
            time.sleep(0.5)
            return {"f": 0.0}
        started.wait()
        raise ValueError(f"bad config {config['x']}")

    with ThreadPoolExecutor(2) as pool, pytest.raises(RepeatedFailureError, match="bad config"):
        driver.run(source, evaluate, 20, 2, pool, None, False)
    first = source.trials[0]
    assert first.state == "FAILED" and str(first.error).startswith(
        "Interrupted: RepeatedFailureError"
    )
    assert [t.state for t in source.trials[1:4]] == ["FAILED"] * 3
    assert source.trials[-1].state == "WAITING" and source.trials[-1].retry_of == 0


def square(config: dict[str, Any]) -> dict[str, float]:
    return {"f": float(config["x"]) ** 2}


def test_default_process_pool_with_a_memory_source() -> None:
    """The source stays in the driving process; only evaluate and configs go to the workers."""
    source = MemorySource()
    driver.run(source, square, 3, 2, None, 5.0, False)
    assert [t.result for t in source.trials] == [{"f": 0.0}, {"f": 1.0}, {"f": 4.0}]


def test_run_stats_time_every_proposal_and_add_up() -> None:
    """The driver times each configuration the source proposes (a re-queued trial is none) and
    the wall time splits into proposing and the rest; no timing magnitudes are asserted."""
    source = MemorySource(propose_seconds=0.02)
    source.trials.append(_Trial(0, {"x": -1}, "WAITING"))  # queued: claimed, not proposed
    with ThreadPoolExecutor(2) as pool:
        stats = driver.run(source, square, 4, 2, pool, None, False)
    assert (stats.trials, stats.finished, len(stats.proposals)) == (4, 4, 3)
    assert all(p > 0 for p in stats.proposals)
    assert stats.proposing == pytest.approx(sum(stats.proposals))
    assert stats.proposing <= stats.claiming <= stats.wall
    assert stats.proposing + stats.waiting == pytest.approx(stats.wall)
    assert stats.proposal_summary().startswith("3 proposals, p50 ")
    assert "(3 proposals, p50" in stats.summary()
