"""The loop behind `Study.optimize`: allocate trials, run them on an executor, record results.

One driving process keeps up to ``n_workers`` trials in flight. Each turn it (1) asks the study
for trials to fill free slots (stale trials re-queued, WAITING ones claimed, new ones proposed, all
in one transaction), (2) submits `run_evaluate` for them, (3) waits up to a heartbeat interval for
results and records each in its own transaction, (4) fails trials past their timeout and
(5) refreshes the heartbeat of the trials still running. It stops when the study holds its budget
of trials, none is WAITING and no other live process is running one. On an exception (Ctrl-C
included) the trials in flight are failed and re-queued before the exception propagates.

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
import time
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from studies.errors import EvaluateError, RepeatedFailureError
from studies.pareto import feasible
from studies.worker import exit_with_parent, run_evaluate
from studies.workers_local import worker_id

if TYPE_CHECKING:
    from studies.records import TrialRecord
    from studies.study import Study

__all__ = ["run"]

logger = logging.getLogger(__name__)

_TIMEOUT_SLACK = 2.0  # seconds the driver allows beyond a worker-side SIGALRM timeout
_KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL when a process pool is stopped


@dataclass
class _Slot:
    number: int
    started: float  # time.monotonic() at submission
    expired: bool = False  # failed at its timeout, still running (an executor's; slot kept)


class _Pool(ProcessPoolExecutor):
    """The default process pool, which can be stopped with its trials in flight (`kill`)."""

    def kill(self, grace: float = _KILL_GRACE) -> None:
        """Stop every worker: ``SIGTERM``, ``SIGKILL`` after ``grace`` seconds, then reap them.

        `ProcessPoolExecutor.shutdown` never stops a running task, and the interpreter joins the
        pool's processes at exit, so a hung evaluate would keep the program from ending.
        """
        processes = list((self._processes or {}).values())  # private, stable since 3.8
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


def run(
    study: Study,
    n_trials: int,
    n_workers: int,
    executor: Executor | None,
    timeout: float | None,
    progress: bool,
) -> None:
    """Drive ``study`` until it holds ``n_trials`` finished trials (see module docstring)."""
    from tuner.errors import SpaceExhaustedError  # tuner and torch load when a study runs

    worker = worker_id()
    exhausted = False
    _check_sendable(study, executor)
    rec = _Recorder(study, worker)
    pool = executor if executor is not None else _process_pool(n_workers)
    running: dict[Future[Any], _Slot] = {}
    interval = study.settings.heartbeat_interval
    last_beat = time.monotonic()
    logger.info("Study %r: worker %s drives it to %d trials.", study.name, worker, n_trials)
    try:
        with _ProgressView(study, n_trials, progress) as view:
            while True:
                try:
                    if not exhausted:
                        pool = _fill(rec, pool, running, n_workers, n_trials, timeout, executor)
                except SpaceExhaustedError as err:
                    exhausted = True
                    logger.warning("%s Finishing the trials in flight, then stopping.", err)
                active = [s.number for s in running.values() if not s.expired]
                if not active:
                    # trials past their timeout that an executor cannot stop are not waited for
                    if exhausted or _finished(study, n_trials):
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
                if hung and executor is None:
                    pool = _restart_pool(pool, running, rec, n_workers)
                elif broken and executor is None:
                    pool = _replace_pool(pool, running, rec, n_workers)
                active = [s.number for s in running.values() if not s.expired]
                if active and time.monotonic() - last_beat >= interval / 2:
                    study.storage.heartbeat(study.id, active, worker)
                    last_beat = time.monotonic()
                view.update()
    except BaseException as err:
        # every trial this process holds, including ones allocated but not yet submitted
        numbers = [t.number for t in study.trials if t.state == "RUNNING" and t.worker == worker]
        if numbers:
            reason = f"Interrupted: {type(err).__name__} in the driving process; re-queued."
            study.storage.requeue(study.id, numbers, worker, reason)
            logger.warning("Trials %s were interrupted and re-queued.", numbers)
        raise
    finally:
        if executor is None:
            if running and isinstance(pool, _Pool):
                pool.kill()  # trials in flight (an exception): no worker outlives the call
            else:
                pool.shutdown(wait=False, cancel_futures=True)


def _check_sendable(study: Study, executor: Executor | None) -> None:
    """Refuse, before the first trial, an evaluate a process pool cannot send to its workers."""
    if executor is not None and not isinstance(executor, ProcessPoolExecutor):
        return  # threads need no pickling; Dask's executor pickles lambdas with cloudpickle
    try:
        pickle.dumps(study.evaluate)
    except Exception as err:
        name = getattr(study.evaluate, "__qualname__", repr(study.evaluate))
        raise EvaluateError(
            f"evaluate ({name}) cannot be sent to worker processes: {type(err).__name__}: {err}. "
            "Define it with `def` at module level of an importable file (not a lambda, a "
            "closure or a function inside a function), or run it in threads: "
            "optimize(..., executor=concurrent.futures.ThreadPoolExecutor(n))."
        ) from err


class _Recorder:
    """Stores outcomes and stops the run once `StudySettings.max_repeated_failures` trials in a
    row failed with the same error (numbers aside)."""

    def __init__(self, study: Study, worker: str) -> None:
        self.study, self.worker = study, worker
        self.limit = study.settings.max_repeated_failures
        self.key: str | None = None
        self.count = 0

    def __call__(self, number: int, outcome: dict[str, Any]) -> None:
        got = self.study.record(number, outcome, self.worker)
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
                f"Stopped study {self.study.name!r}: the last {self.count} trials failed with the "
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
    rec: _Recorder,
    pool: Executor,
    running: dict[Future[Any], _Slot],
    n_workers: int,
    n_trials: int,
    timeout: float | None,
    executor: Executor | None,
) -> Executor:
    free = n_workers - len(running)
    study, evaluate = rec.study, rec.study.evaluate
    if free <= 0 or evaluate is None:
        return pool
    for trial in study.allocate(rec.worker, free, n_trials):
        try:
            fut = pool.submit(run_evaluate, evaluate, trial.config, timeout)
        except BrokenProcessPool:
            if executor is not None:
                raise
            pool = _replace_pool(pool, running, rec, n_workers)
            fut = pool.submit(run_evaluate, evaluate, trial.config, timeout)
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
        study = rec.study
        reason = (
            "Interrupted: its worker pool was stopped to end a trial past its timeout; re-queued."
        )
        study.storage.requeue(study.id, requeue, rec.worker, reason)
        logger.warning("Trials %s were interrupted and re-queued.", requeue)
    if isinstance(pool, _Pool):
        pool.kill()
    else:
        pool.shutdown(wait=False, cancel_futures=True)
    logger.warning("A trial did not stop at its timeout; its worker processes were killed.")
    return _process_pool(n_workers)


def _finished(study: Study, n_trials: int) -> bool:
    """Budget reached, nothing WAITING, and no heartbeat-carrying trial RUNNING anywhere."""
    trials = study.trials
    counts = study.progress(trials)
    live = [t for t in trials if t.state == "RUNNING" and t.heartbeat is not None]
    if counts["used"] < n_trials or counts["waiting"] or live:
        if live and counts["used"] >= n_trials and not counts["waiting"]:
            study.reap_stale()
        return False
    return True


def best_values(study: Study, trials: list[TrialRecord]) -> str:
    """``"f1=0.12 f2=3.4"``: each objective's best value over feasible trials."""
    ok = feasible(trials, study.constraints)
    if not ok:
        return "no feasible trial yet"
    parts = []
    for k, d in study.objectives.items():
        vals = [t.values[k] for t in ok if t.values]
        best = max(vals) if d == "maximize" else min(vals)
        parts.append(f"{k}={best:.4g}")
    return "best " + " ".join(parts)


class _ProgressView:
    """A rich progress bar: trials finished / budget, best values, elapsed, remaining."""

    def __init__(self, study: Study, n_trials: int, enabled: bool) -> None:
        self.study, self.n_trials, self.enabled = study, n_trials, enabled
        self._last = 0.0

    def __enter__(self) -> _ProgressView:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._bar = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[best]}"),
                TimeElapsedColumn(),
                TextColumn("eta"),
                TimeRemainingColumn(),
            )
            self._bar.__enter__()
            self._task = self._bar.add_task(self.study.name, total=self.n_trials, best="")
            self.update(force=True)
        return self

    def update(self, force: bool = False) -> None:
        if not self.enabled or (not force and time.monotonic() - self._last < 0.5):
            return
        self._last = time.monotonic()
        trials = self.study.trials
        done = self.study.progress(trials)["finished"]
        self._bar.update(
            self._task, completed=min(done, self.n_trials), best=best_values(self.study, trials)
        )

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self.update(force=True)
            self._bar.__exit__(None, None, None)
