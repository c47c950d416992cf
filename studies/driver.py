"""The loop behind `Study.optimize`: claim trials, run them on an executor, record results.

The loop talks to a `studies.source.TrialSource` only (claim, heartbeat, record, requeue, reap,
status), never to a `Study`: `Study.optimize` hands it `Study.trial_source()`, and a test may
hand it an in-memory source. One driving process keeps up to ``n_workers`` trials in flight.
Each turn it (1) claims trials from the source to fill free slots, (2) submits `run_evaluate`
for them, (3) waits up to a heartbeat interval for results and records each, (4) fails trials
past their timeout and (5) refreshes the heartbeat of the trials still running. It stops when
the source holds its budget of trials, none is WAITING and no other live process is running
one. On an exception (Ctrl-C included) the trials this process holds are failed and re-queued
before the exception propagates.

A trial running `SLOW_FACTOR` times the median of the trials finished in the run is reported
while it runs, with how to set a timeout (with none, the default, an evaluate that never returns
holds its worker for good). The default pool starts at most `WORKERS_PER_CPU` processes per CPU
and one per trial of the budget (`machine_workers`), whatever ``n_workers`` asks.

Timeouts: a worker of the default process pool stops its trial with ``SIGALRM``. A trial still
running ``_TIMEOUT_SLACK`` seconds past its timeout (an evaluate that blocks or replaces
``SIGALRM``, or one stuck in C code) is FAILED and its pool is stopped: every worker gets
``SIGTERM``, then ``SIGKILL`` after ``_KILL_GRACE`` seconds, and is reaped; the other trials in
flight are re-queued and a new pool takes over, so no process outlives `run` (the interpreter can
exit). On an executor passed in (Dask, threads) a trial cannot be stopped: it is FAILED at its
timeout but keeps its slot until its future returns (its result is then dropped), so no more than
``n_workers`` trials ever run at once.
"""

from __future__ import annotations

import logging
import multiprocessing
import pickle
import re
import statistics
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from studies.errors import EvaluateError, RepeatedFailureError
from studies.worker import exit_with_parent, run_evaluate
from studies.workers_local import worker_id

if TYPE_CHECKING:
    from studies.source import TrialSource

__all__ = ["RunStats", "machine_workers", "run"]

logger = logging.getLogger(__name__)

_TIMEOUT_SLACK = 2.0  # seconds the driver allows beyond a worker-side SIGALRM timeout
_KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL when a process pool is stopped
#: A trial running this many times the median of the trials finished so far is reported...
SLOW_FACTOR = 10.0
#: ...once it has run at least this many seconds (and at least `SLOW_MIN_FINISHED` finished).
SLOW_FLOOR = 30.0
SLOW_MIN_FINISHED = 3
#: The default process pool runs at most this many workers per CPU of the machine.
WORKERS_PER_CPU = 4


@dataclass
class _Slot:
    number: int
    started: float  # time.monotonic() at submission
    expired: bool = False  # failed at its timeout, still running (an executor's; slot kept)
    reported: bool = False  # reported as running far past the others (`_report_slow`)


class _Pool(ProcessPoolExecutor):
    """The default process pool, which can be stopped with its trials in flight (`kill`)."""

    def kill(self, grace: float = _KILL_GRACE) -> None:
        """Stop every worker: ``SIGTERM``, ``SIGKILL`` after ``grace`` seconds, then reap them.

        `ProcessPoolExecutor.shutdown` never stops a running task, and the interpreter joins the
        pool's processes at exit, so a hung evaluate would keep the program from ending.
        """
        processes = list((self._processes or {}).values())  # private, stable since 3.8
        # private, stable since 3.9 (typeshed mistypes it); shutdown drops it
        manager: threading.Thread | None = getattr(self, "_executor_manager_thread", None)
        self.shutdown(wait=False, cancel_futures=True)
        for p in processes:
            if p.is_alive():
                p.terminate()
        deadline = time.monotonic() + grace
        for p in processes:
            p.join(max(0.0, deadline - time.monotonic()))
        for p in processes:
            if p.is_alive():
                logger.warning("Worker process %s ignored SIGTERM; killing it.", p.pid)
                p.kill()
                p.join(5.0)
        if manager is not None:  # see `run`'s last lines: no manager thread outlives the pool
            manager.join(grace)


@dataclass
class RunStats:
    """Where one `run` call's time went (what `studies.Study.optimize` returns).

    Attributes:
        wall: Seconds the call took.
        claiming: Seconds the driving process spent claiming trials from the source: proposing
            and the storage transactions around it.
        evaluating: Worker seconds of the evaluations that finished in this call (as the
            workers measured them; summed over workers, so up to ``n_workers`` times ``wall``).
        trials: Trials claimed (proposed or taken from the queue) in this call.
        finished: Outcomes recorded in this call.
        n_workers: Trials evaluated at once.
        proposals: Seconds per configuration proposed in this call, in order, as the source
            timed them (`TrialSource.proposals`; a batch's seconds are shared equally by its
            configurations). Trials taken from the queue are not proposals.
    """

    wall: float = 0.0
    claiming: float = 0.0
    evaluating: float = 0.0
    trials: int = 0
    finished: int = 0
    n_workers: int = 1
    proposals: list[float] = field(default_factory=list)

    @property
    def proposing(self) -> float:
        """Seconds the source spent proposing in this call (model fits and acquisition)."""
        return float(sum(self.proposals))

    @property
    def waiting(self) -> float:
        """Seconds of ``wall`` the driving process did not spend proposing: waiting for the
        workers' evaluations, and storing their results."""
        return max(self.wall - self.proposing, 0.0)

    def proposal_summary(self) -> str:
        """``"12 proposals, p50 3.1 s, max 7.9 s"``, or ``"no proposals"``."""
        if not self.proposals:
            return "no proposals"
        ordered = sorted(self.proposals)
        p50 = statistics.median(ordered)
        return f"{len(ordered)} proposals, p50 {p50:.1f} s, max {ordered[-1]:.1f} s"

    def summary(self) -> str:
        """One line: the split, e.g. for a console."""
        return (
            f"{self.wall:.0f} s: proposing {self.proposing:.0f} s in the driving process "
            f"({self.proposal_summary()}), evaluating {self.evaluating:.0f} s of worker time on "
            f"{self.n_workers} workers ({self.trials} trials claimed, {self.finished} finished)"
        )


@dataclass(frozen=True)
class _Job:
    """What one `run` call drives: its source, evaluate and limits."""

    source: TrialSource
    evaluate: Callable[[dict[str, Any]], Mapping[str, Any]]
    worker: str
    n_trials: int
    n_workers: int
    timeout: float | None
    executor: Executor | None


def run(
    source: TrialSource,
    evaluate: Callable[[dict[str, Any]], Mapping[str, Any]],
    n_trials: int,
    n_workers: int,
    executor: Executor | None,
    timeout: float | None,
    progress: bool,
) -> RunStats:
    """Drive ``source`` until it holds ``n_trials`` finished trials (see module docstring).

    Args:
        source: The trials to run (`Study.trial_source()`, or any `TrialSource`).
        evaluate: ``evaluate(config) -> dict``, run in the workers by `run_evaluate`.
        n_trials: The budget: total trials the source should finish.
        n_workers: Trials evaluated at once.
        executor: Where trials run; None: a process pool of ``n_workers``, stopped on return.
        timeout: Seconds one trial may run (None: no limit).
        progress: Show a rich progress bar.

    Returns:
        Where the time went (`RunStats`).

    Raises:
        EvaluateError: If a process pool cannot send ``evaluate`` to its workers.
        RepeatedFailureError: After `TrialSource.max_repeated_failures` equal failures in a row.
    """
    from tuner.errors import SpaceExhaustedError  # tuner and torch load when a study runs

    if executor is None:
        n_workers = machine_workers(n_workers, n_trials)
    job = _Job(source, evaluate, worker_id(), n_trials, n_workers, timeout, executor)
    worker = job.worker
    exhausted = False
    _check_sendable(evaluate, executor)
    stats = RunStats(n_workers=n_workers)
    started = time.monotonic()
    rec = _Recorder(source, worker, stats)
    pool = executor if executor is not None else _process_pool(n_workers)
    running: dict[Future[Any], _Slot] = {}
    interval = source.heartbeat_interval
    last_beat = time.monotonic()
    logger.info("Study %r: worker %s drives it to %d trials.", source.name, worker, n_trials)
    try:
        with _ProgressView(source, n_trials, progress) as view:
            while True:
                try:
                    if not exhausted:
                        pool = _fill(job, rec, pool, running, stats)
                except SpaceExhaustedError as err:
                    exhausted = True
                    logger.warning("%s Finishing the trials in flight, then stopping.", err)
                active = [s.number for s in running.values() if not s.expired]
                if not active:
                    # trials past their timeout that an executor cannot stop are not waited for
                    if exhausted or _finished(source, n_trials):
                        break
                    if not running:
                        view.update()
                        time.sleep(min(interval, 0.5))
                        continue
                done, _ = wait(
                    list(running), timeout=min(interval, 1.0), return_when=FIRST_COMPLETED
                )
                broken = _collect(rec, running, done)
                # trials that finished while those were stored: recorded before the next
                # proposal, which then fills their slots in one batch (one model fit)
                broken |= _collect(rec, running, {f for f in running if f.done()})
                hung = _expire(rec, running, timeout)
                _report_slow(source.name, running, rec.durations, timeout)
                if hung and executor is None:
                    pool = _restart_pool(pool, running, rec, n_workers)
                elif broken and executor is None:
                    pool = _replace_pool(pool, running, rec, n_workers)
                active = [s.number for s in running.values() if not s.expired]
                if active and time.monotonic() - last_beat >= interval / 2:
                    source.heartbeat(worker, active)
                    last_beat = time.monotonic()
                view.update()
    except BaseException as err:
        # every trial this process holds, including ones claimed but not yet submitted
        reason = f"Interrupted: {type(err).__name__} in the driving process; re-queued."
        numbers = source.requeue(worker, None, reason)
        if numbers:
            logger.warning("Trials %s were interrupted and re-queued.", numbers)
        raise
    finally:
        if executor is None:
            if running and isinstance(pool, _Pool):
                pool.kill()  # trials in flight (an exception): no worker outlives the call
            else:
                # no trial runs, so the workers exit at once: wait for them and for the pool's
                # manager thread, which Python 3.11's exit handler would otherwise wake without
                # its lock while it closes its pipe (``OSError: [Errno 9] Bad file descriptor``
                # printed at exit by a program that ends right after `run` returns)
                pool.shutdown(wait=True, cancel_futures=True)
    stats.wall = time.monotonic() - started
    return stats


def _check_sendable(evaluate: Callable[..., Any], executor: Executor | None) -> None:
    """Refuse, before the first trial, an evaluate a process pool cannot send to its workers."""
    if executor is not None and not isinstance(executor, ProcessPoolExecutor):
        return  # threads need no pickling; Dask's executor pickles lambdas with cloudpickle
    try:
        pickle.dumps(evaluate)
    except Exception as err:
        name = getattr(evaluate, "__qualname__", repr(evaluate))
        raise EvaluateError(
            f"evaluate ({name}) cannot be sent to worker processes: {type(err).__name__}: {err}. "
            "Define it with `def` at module level of an importable file (not a lambda, a "
            "closure or a function inside a function), or run it in threads: "
            "optimize(..., executor=concurrent.futures.ThreadPoolExecutor(n))."
        ) from err


class _Recorder:
    """Stores outcomes and stops the run once `StudySettings.max_repeated_failures` trials in a
    row failed with the same error (numbers aside)."""

    def __init__(self, source: TrialSource, worker: str, stats: RunStats | None = None) -> None:
        self.source, self.worker = source, worker
        self.stats = stats if stats is not None else RunStats()
        self.limit = source.max_repeated_failures
        self.key: str | None = None
        self.count = 0
        self.durations: list[float] = []  # seconds of the trials finished in this run

    def __call__(self, number: int, outcome: dict[str, Any]) -> None:
        self.stats.finished += 1
        self.stats.evaluating += float(outcome.get("seconds") or 0.0)
        if outcome.get("seconds"):
            self.durations.append(float(outcome["seconds"]))
        got = self.source.record(self.worker, number, outcome)
        if got is None:
            return
        state, error = got
        if state == "COMPLETE" or error is None:
            self.key, self.count = None, 0
            return
        key = re.sub(r"\d+(\.\d+)?(e[-+]?\d+)?", "#", error)
        self.count = self.count + 1 if key == self.key else 1
        self.key = key
        if self.limit and self.count >= self.limit:
            raise RepeatedFailureError(
                f"Stopped study {self.source.name!r}: the last {self.count} trials failed with the "
                f"same error: {error}. Fix evaluate (call it on one configuration, e.g. "
                "evaluate(study.space.default()), to see the error), then run the study again "
                "to resume; StudySettings(max_repeated_failures=0) never stops."
            )


def _collect(rec: _Recorder, running: dict[Future[Any], _Slot], done: set[Future[Any]]) -> bool:
    """Record finished futures; returns whether a worker process died."""
    broken = False
    for fut in done:
        slot = running.pop(fut)
        outcome, crashed = _outcome(fut)
        broken |= crashed
        if slot.expired:
            logger.info(
                "Trial %d returned after it was failed at its timeout; its result is dropped.",
                slot.number,
            )
            continue
        rec(slot.number, outcome)
    return broken


def _process_pool(n_workers: int) -> _Pool:
    """The default pool: ``n_workers`` processes started with ``fork`` where the platform has it
    (else its default, ``spawn``), chosen for this pool only (never `multiprocessing`'s global
    start method).

    ``fork`` because a worker then runs an evaluate function defined interactively (a notebook,
    ``python -c``), which a spawned worker could not import, and starts with the driving
    process's modules already imported. A process that has run an OpenMP parallel region must
    not fork (libgomp is not fork-safe: the child hangs at its first parallel kernel), so code
    the driving process runs before its workers start keeps OpenMP to one thread. For another
    start method pass ``Study.optimize(executor=ProcessPoolExecutor(mp_context=get_context(
    "spawn")))``.
    """
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else None
    return _Pool(
        max_workers=n_workers,
        mp_context=multiprocessing.get_context(method),
        initializer=exit_with_parent,
    )


def _fill(
    job: _Job,
    rec: _Recorder,
    pool: Executor,
    running: dict[Future[Any], _Slot],
    stats: RunStats,
) -> Executor:
    free = job.n_workers - len(running)
    if free <= 0:
        return pool
    count, seconds = job.source.proposals()
    t0 = time.monotonic()
    try:
        claimed = job.source.claim(job.worker, free, job.n_trials)
    finally:
        stats.claiming += time.monotonic() - t0
        made, took = job.source.proposals()
        if made > count:
            stats.proposals += [(took - seconds) / (made - count)] * (made - count)
    stats.trials += len(claimed)
    for trial in claimed:
        try:
            fut = pool.submit(run_evaluate, job.evaluate, trial.config, job.timeout)
        except BrokenProcessPool:
            if job.executor is not None:
                raise
            pool = _replace_pool(pool, running, rec, job.n_workers)
            fut = pool.submit(run_evaluate, job.evaluate, trial.config, job.timeout)
        running[fut] = _Slot(trial.number, time.monotonic())
    return pool


def _outcome(fut: Future[Any]) -> tuple[dict[str, Any], bool]:
    """The worker's outcome dict, and whether the worker process itself died."""
    try:
        return fut.result(), False
    except BrokenProcessPool as err:
        return {"ok": False, "error": f"WorkerCrashed: the worker process died ({err})"}, True
    except BaseException as err:  # executor-level failures (pickling, cancelled, cluster)
        return {"ok": False, "error": f"ExecutorError: {type(err).__name__}: {err}"}, False


def _replace_pool(
    pool: Executor, running: dict[Future[Any], _Slot], rec: _Recorder, n_workers: int
) -> Executor:
    """Swap a broken process pool for a new one; trials in flight on it are failed."""
    for fut, slot in list(running.items()):
        if fut.done():
            outcome, _ = _outcome(fut)
            rec(slot.number, outcome)
            del running[fut]
    pool.shutdown(wait=False, cancel_futures=True)
    logger.warning("A worker process died; starting a new process pool.")
    return _process_pool(n_workers)


def _expire(rec: _Recorder, running: dict[Future[Any], _Slot], timeout: float | None) -> bool:
    """Fail trials still running ``_TIMEOUT_SLACK`` s past their timeout; returns whether any
    was. A future that cannot be cancelled keeps its slot, marked expired (see the module
    docstring); the default pool is then restarted by the caller (`_restart_pool`)."""
    if timeout is None:
        return False
    now = time.monotonic()
    hung = False
    for fut, slot in list(running.items()):
        if slot.expired or now - slot.started <= timeout + _TIMEOUT_SLACK:
            continue
        hung = True
        slot.expired = True
        if fut.cancel():
            del running[fut]  # had not started: nothing runs
        error = (
            f"TimeoutError: trial exceeded its timeout of {timeout:g} s and did not stop (its "
            "evaluate blocks or replaces SIGALRM, or runs where no signal reaches it); it was "
            "stopped from the driving process"
        )
        rec(slot.number, {"ok": False, "error": error, "seconds": now - slot.started})
    if hung and any(s.expired for s in running.values()):
        logger.warning(
            "Trials %s outlived their timeout and cannot be stopped on this executor; each keeps "
            "its worker slot until it returns.",
            [s.number for s in running.values() if s.expired],
        )
    return hung


def machine_workers(n_workers: int, n_trials: int) -> int:
    """How many worker processes the default pool starts for ``n_workers``: at most
    `WORKERS_PER_CPU` per CPU of the machine and one per trial of the budget (a process per
    requested worker would exhaust memory: ``n_workers=10**6`` started processes until the
    kernel's out-of-memory killer stopped them). Says so when it caps."""
    import os

    cpus = os.cpu_count() or 1
    cap = max(1, min(WORKERS_PER_CPU * cpus, max(n_trials, 1)))
    if n_workers > cap:
        logger.warning(
            "n_workers=%d: this machine runs at most %d worker processes (%d per CPU, %d CPUs; "
            "one per trial of a budget of %d); using %d. Pass an executor (e.g. a Dask "
            "cluster's) to run more trials at once elsewhere.",
            n_workers,
            WORKERS_PER_CPU * cpus,
            WORKERS_PER_CPU,
            cpus,
            n_trials,
            cap,
        )
    return min(n_workers, cap)


def _report_slow(
    name: str, running: dict[Future[Any], _Slot], durations: list[float], timeout: float | None
) -> None:
    """Warn once about each trial running `SLOW_FACTOR` times the median of the trials finished
    in this run (and `SLOW_FLOOR` seconds), with how to bound it: an evaluate that never returns
    otherwise holds its worker with no word."""
    if len(durations) < SLOW_MIN_FINISHED:
        return
    median = statistics.median(durations)
    limit = max(SLOW_FACTOR * median, SLOW_FLOOR)
    now = time.monotonic()
    for slot in running.values():
        ran = now - slot.started
        if slot.reported or slot.expired or ran < limit:
            continue
        slot.reported = True
        how = (
            f"it will be stopped at its timeout of {timeout:g} s"
            if timeout is not None
            else "if it hangs, bound every trial: Study.optimize(..., timeout=SECONDS) or "
            f"`tuner resume {name} --timeout SECONDS`; Ctrl-C stops this run and re-queues it"
        )
        logger.warning(
            "Trial %d of %r has run %.0f s, %.0fx the median of the %d trials finished (%.1f s); "
            "%s.",
            slot.number,
            name,
            ran,
            ran / max(median, 1e-9),
            len(durations),
            median,
            how,
        )


def _restart_pool(
    pool: Executor, running: dict[Future[Any], _Slot], rec: _Recorder, n_workers: int
) -> Executor:
    """Stop the default pool, which runs a trial past its timeout (`_Pool.kill`): results that
    arrived are recorded, the other trials in flight re-queued; returns a new pool."""
    requeue = []
    for fut, slot in list(running.items()):
        del running[fut]
        if slot.expired:
            continue
        if fut.done():
            rec(slot.number, _outcome(fut)[0])
        else:
            requeue.append(slot.number)
    if requeue:
        reason = (
            "Interrupted: its worker pool was stopped to end a trial past its timeout; re-queued."
        )
        rec.source.requeue(rec.worker, requeue, reason)
        logger.warning("Trials %s were interrupted and re-queued.", requeue)
    if isinstance(pool, _Pool):
        pool.kill()
    else:
        pool.shutdown(wait=False, cancel_futures=True)
    logger.warning("A trial did not stop at its timeout; its worker processes were killed.")
    return _process_pool(n_workers)


def _finished(source: TrialSource, n_trials: int) -> bool:
    """Budget reached, nothing WAITING, and no heartbeat-carrying trial RUNNING anywhere."""
    st = source.status()
    if st.used < n_trials or st.waiting or st.live:
        if st.live and st.used >= n_trials and not st.waiting:
            source.reap_stale()
        return False
    return True


def progress_columns() -> list[Any]:
    """The progress bar's columns: the study's name and the best values give way (cut with an
    ellipsis) to the counts and times, which keep their width on a narrow terminal (at 80
    columns the elapsed time used to be cut)."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.table import Column

    def squeezable(ratio: int, minimum: int) -> Column:
        return Column(ratio=ratio, min_width=minimum, no_wrap=True, overflow="ellipsis")

    return [
        TextColumn("[bold]{task.description}", table_column=squeezable(1, 4)),
        BarColumn(bar_width=12),
        MofNCompleteColumn(),
        TextColumn("{task.fields[best]}", table_column=squeezable(3, 8)),
        TimeElapsedColumn(table_column=Column(no_wrap=True, min_width=7)),
        TextColumn("eta", table_column=Column(no_wrap=True, min_width=3)),
        TimeRemainingColumn(table_column=Column(no_wrap=True, min_width=7)),
    ]


class _ProgressView:
    """A rich progress bar: trials finished / budget, best values, elapsed, remaining."""

    def __init__(self, source: TrialSource, n_trials: int, enabled: bool) -> None:
        self.source, self.n_trials, self.enabled = source, n_trials, enabled
        self._last = 0.0

    def __enter__(self) -> _ProgressView:
        if self.enabled:
            from rich.progress import Progress

            self._bar = Progress(*progress_columns(), expand=True)
            self._bar.__enter__()
            self._task = self._bar.add_task(self.source.name, total=self.n_trials, best="")
            self.update(force=True)
        return self

    def update(self, force: bool = False) -> None:
        if not self.enabled or (not force and time.monotonic() - self._last < 0.5):
            return
        self._last = time.monotonic()
        done = self.source.status().finished
        self._bar.update(self._task, completed=min(done, self.n_trials), best=self.source.best())

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.update(force=True)
            self._bar.__exit__(None, None, None)
