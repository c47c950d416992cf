"""Fault soak: a 200-trial study driven by 2-4 processes while drivers and workers are SIGKILLed
at random (issue 36). Not a timed benchmark: it counts what the faults cost.

Backends:
    sqlite     drivers with their default process pools on one SQLite file
    postgres   the same on PostgreSQL (``--postgres URL`` or ``RT_POSTGRES_URL``; ``.ci/postgres.sh``)
    dask       drivers on SQLite sending trials to one Dask scheduler with 4 worker processes
               (``dask worker --no-nanny``); the kills hit registered workers mid-trial and the
               soak starts a replacement for each (with nannies restarting them, all four were
               gone after 24 kills in the first soak and the study waited for workers forever)

On sqlite and postgres each kill hits, at random (seeded), a driving process (half the kills:
its RUNNING trials and its proposal reservations are left behind; a new driver is started so
2-4 keep running) or one worker process of a driver's pool (the trials in flight on that pool are
FAILED ``WorkerCrashed``, as a crashing evaluate would be). The kills are paced by the study's
progress so that they spread over its first ~80% (``--kills`` of them, 100 by default), each
after a random delay, so they land mid-trial, mid-proposal and mid-transaction. After the last
kill the surviving drivers finish the study.

The evaluate sleeps 0.2-1.0 s (from the configuration) and returns the toy problem. Settings: the
capped test tuner, the flat surrogate, heartbeat 0.5 s, grace period 5 s, dead local drivers
reaped at once, ``max_repeated_failures=0`` (crashed workers never stop a driver).

Counted per backend:
    lost            completed trials seen at some check (after every kill, and at the end) that
                    are later missing or changed (must be 0)
    duplicated      configurations run twice (trials other than re-queued copies sharing a
                    configuration, stale trials re-queued more than once, or one configuration
                    COMPLETE twice) (must be 0)
    hangs           drivers still running 600 s after the last kill, or a study that never
                    reaches its budget (must be 0)
    requeued        stale trials re-queued (StaleTrial: their driver died), and interrupted ones
    worker_crashed  trials FAILED because their worker process was killed
    integrity       `Storage.integrity_check`: SQLite's ``PRAGMA integrity_check``, and on both
                    backends the logical check (trial numbers 0..n-1, re-queued copies of FAILED
                    trials, each re-queued once, no orphan rows); on PostgreSQL also ``amcheck``
                    on the study tables' indexes where the extension can be created
    consistency     the end state: finished == budget, nothing RUNNING or WAITING, no proposal
                    reservation left

Usage:
    python -m benchmarks.soak_faults                         # sqlite and dask (+ postgres if set)
    python -m benchmarks.soak_faults --backends sqlite --kills 20 --trials 60   # a short one
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
import uuid
import zlib
from pathlib import Path
from typing import Any

from benchmarks._common import machine_info, write_results
from studies.examples import toy_evaluate, toy_space

OBJ = {"latency": "minimize", "search_seconds": "minimize"}
ROOT = Path(__file__).resolve().parents[1]
FAST_TUNER = {"num_restarts": 1, "raw_samples": 16, "maxiter": 5, "mc_samples": 16}
HANG_AFTER_S = 600.0  # a driver still running this long after the last kill is a hang


def soak_evaluate(config: dict[str, Any]) -> dict[str, float]:
    """The toy problem taking 0.2-1.0 s (fixed per configuration), so kills land mid-trial."""
    key = zlib.crc32(json.dumps(config, sort_keys=True).encode())
    time.sleep(0.2 + 0.8 * (key % 1000) / 1000)
    return toy_evaluate(config)


def _settings() -> Any:
    from studies.settings import StudySettings

    return StudySettings(
        heartbeat_interval=0.5,
        grace_period=5.0,
        n_initial=8,
        surrogate="flat",
        max_repeated_failures=0,
        tuner_options=FAST_TUNER,
    )


def _open(url: str, name: str) -> Any:
    from studies.study import Study

    return Study(name, toy_space(), OBJ, soak_evaluate, storage=url, seed=0, settings=_settings())


def child(args: argparse.Namespace) -> None:
    """One driving process: open the study, print ``ready``, drive it to the budget."""
    import torch

    torch.set_num_threads(1)
    study = _open(args.url, args.study)
    print("ready", flush=True)
    if args.dask:
        import distributed

        with distributed.Client(args.dask, timeout=60) as client:
            study.optimize(args.trials, n_workers=2, executor=client.get_executor(), progress=False)
    else:
        study.optimize(args.trials, n_workers=2, progress=False)
    print("done", flush=True)


class Drivers:
    """The driving processes of one soak: start, kill, reap."""

    def __init__(self, url: str, name: str, trials: int, dask: str | None, log: Path) -> None:
        self.cmd = [sys.executable, "-m", "benchmarks.soak_faults", "--child", "--url", url]
        self.cmd += ["--study", name, "--trials", str(trials)]
        if dask:
            self.cmd += ["--dask", dask]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
        self.log = log
        self.live: list[subprocess.Popen[bytes]] = []
        self.failed: list[int] = []  # exit codes of drivers that ended neither done nor killed
        self.started = 0

    def start(self) -> None:
        with open(self.log, "ab") as err:
            proc = subprocess.Popen(
                self.cmd, cwd=ROOT, env=self.env, stdout=subprocess.DEVNULL, stderr=err
            )
        self.live.append(proc)
        self.started += 1

    def reap(self) -> None:
        """Forget drivers that exited (0: done; SIGKILL: killed; anything else: a failure)."""
        for p in list(self.live):
            code = p.poll()
            if code is None:
                continue
            self.live.remove(p)
            if code not in (0, -signal.SIGKILL):
                self.failed.append(code)

    def kill(self, proc: subprocess.Popen[bytes]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.live.remove(proc)

    def stop_all(self) -> None:
        for p in list(self.live):
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
        self.live.clear()


class DaskWorkers:
    """The Dask workers of a soak: plain worker processes on one scheduler, each killed one
    replaced at once by a new one (what a cluster manager does), so the cluster keeps ``n``."""

    def __init__(self, address: str, n: int, log: Path) -> None:
        self.cmd = [sys.executable, "-m", "distributed.cli.dask_worker", address]
        self.cmd += ["--nthreads", "1", "--no-nanny", "--no-dashboard", "--death-timeout", "60"]
        self.env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
        self.log = log
        self.live: list[subprocess.Popen[bytes]] = []
        for _ in range(n):
            self.start()

    def start(self) -> None:
        with open(self.log, "ab") as out:
            self.live.append(
                subprocess.Popen(self.cmd, cwd=ROOT, env=self.env, stdout=out, stderr=out)
            )

    def kill_registered(self, client: Any, rng: random.Random) -> bool:
        """SIGKILL one worker the scheduler knows (it may be running a trial) and start its
        replacement; False when none has registered yet."""
        registered = set(client.run(os.getpid).values())
        procs = [p for p in self.live if p.poll() is None and p.pid in registered]
        if not procs:
            return False
        proc = rng.choice(procs)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        self.live.remove(proc)
        self.start()
        return True

    def stop_all(self) -> None:
        for p in self.live:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=30)
        self.live.clear()


def _pool_workers(pid: int) -> list[int]:
    """Worker processes of a driver's process pool (its child processes)."""
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children() if c.status() != "zombie"]
    except psutil.Error:
        return []


def _kill_pid(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return False
    return True


class Ledger:
    """Every COMPLETE trial seen so far, to catch one lost or changed later."""

    def __init__(self) -> None:
        self.seen: dict[int, tuple[str, Any]] = {}
        self.lost: set[int] = set()

    def check(self, trials: list[Any]) -> None:
        now = {
            t.number: (json.dumps(t.config, sort_keys=True), t.values)
            for t in trials
            if t.state == "COMPLETE"
        }
        self.lost |= {n for n, before in self.seen.items() if now.get(n) != before}
        for number, record in now.items():
            self.seen.setdefault(number, record)


def consistency(trials: list[Any], budget: int, reservations: int) -> list[str]:
    """Problems with the end state of a finished study (empty: as it should be). The invariants
    of every write are `Storage.integrity_check`'s."""
    problems = []
    left = [t.number for t in trials if t.state in ("RUNNING", "WAITING")]
    if left:
        problems.append(f"trials {left} are still RUNNING or WAITING")
    finished = sum(t.state.is_finished for t in trials) - sum(
        t.retry_of is not None for t in trials
    )
    if finished != budget:
        problems.append(f"{finished} trials finished, budget {budget}")
    if reservations:
        problems.append(f"{reservations} proposal reservations left")
    return problems


def duplicates(trials: list[Any]) -> int:
    """Configurations run more often than the re-queue rules allow."""
    firsts = [json.dumps(t.config, sort_keys=True) for t in trials if t.retry_of is None]
    retried = [t.retry_of for t in trials if t.retry_of is not None]
    complete = [json.dumps(t.config, sort_keys=True) for t in trials if t.state == "COMPLETE"]
    return (
        (len(firsts) - len(set(firsts)))
        + (len(retried) - len(set(retried)))
        + (len(complete) - len(set(complete)))
    )


def _pg_amcheck(url: str) -> str:
    """``amcheck`` on the indexes of the study tables ("ok", the problems, or "n/a")."""
    from sqlalchemy import create_engine, text
    from sqlalchemy.pool import NullPool

    engine = create_engine(url, poolclass=NullPool)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE EXTENSION IF NOT EXISTS amcheck"))
        with engine.begin() as conn:
            rows = conn.execute(
                text(
                    "SELECT c.relname FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                    "JOIN pg_class t ON t.oid = i.indrelid JOIN pg_am a ON a.oid = c.relam "
                    "WHERE t.relname IN ('studies', 'trials', 'reservations') "
                    "AND a.amname = 'btree'"
                )
            ).scalars()
            names = list(rows)
            for name in names:
                conn.execute(text("SELECT bt_index_check(CAST(:n AS regclass), true)"), {"n": name})
        return f"ok ({len(names)} indexes)"
    except Exception as err:  # noqa: BLE001 - reported, not fatal
        return f"n/a ({type(err).__name__}: {str(err).splitlines()[0][:120]})"
    finally:
        engine.dispose()


def soak(backend: str, url: str, args: argparse.Namespace, folder: Path) -> dict[str, Any]:
    """One soak on one backend; returns its counts."""
    from studies.study import Study

    rng = random.Random(args.seed)
    name = f"soak-{uuid.uuid4().hex[:8]}"
    _open(url, name)  # created once, before any driver races to create it
    cluster = client = workers = None
    if backend == "dask":
        import distributed

        cluster = distributed.LocalCluster(n_workers=0, processes=True, dashboard_address=None)
        workers = DaskWorkers(cluster.scheduler_address, 4, folder / "dask-workers.log")
        client = distributed.Client(cluster)
        client.wait_for_workers(4, timeout=120)
    drivers = Drivers(
        url,
        name,
        args.trials,
        cluster.scheduler_address if cluster else None,
        folder / f"{backend}-drivers.log",
    )
    for _ in range(3):
        drivers.start()
    ledger = Ledger()
    kinds: collections.Counter[str] = collections.Counter()
    t0 = time.monotonic()
    store = Study.load(name, url)
    stalls = 0
    try:
        while sum(kinds.values()) < args.kills:
            k = sum(kinds.values())
            pace = int(0.8 * args.trials * k / args.kills)
            waited = time.monotonic()
            while store.progress()["finished"] < pace and time.monotonic() - waited < 30:
                time.sleep(0.2)
                drivers.reap()
            if time.monotonic() - waited >= 30:
                stalls += 1
            time.sleep(rng.uniform(0.0, 0.8))
            drivers.reap()
            if store.progress()["finished"] >= args.trials:
                break  # the study finished before every kill was made
            kinds[_kill_one(backend, drivers, client, workers, rng)] += 1
            drivers.reap()
            while len(drivers.live) < rng.randint(2, 4) or len(drivers.live) < 2:
                drivers.start()
            ledger.check(store.trials)
        last_kill = time.monotonic()
        hangs = 0
        while drivers.live and time.monotonic() - last_kill < HANG_AFTER_S:
            time.sleep(0.5)
            drivers.reap()
            if not drivers.live and store.progress()["finished"] < args.trials:
                drivers.start()  # every driver was killed or failed: one more finishes it
        hangs += len(drivers.live)
    finally:
        drivers.stop_all()
        if client is not None:
            client.close()
        if workers is not None:
            workers.stop_all()
        if cluster is not None:
            cluster.close()
    trials = store.trials
    ledger.check(trials)
    held = len(store.storage.reservations(store.id))
    problems = consistency(trials, args.trials, held)
    if store.progress(trials)["finished"] < args.trials:
        hangs += 1
    integrity = store.storage.integrity_check()
    if backend == "postgres":
        integrity = f"{integrity}; amcheck {_pg_amcheck(url)}"
    return {
        "backend": backend,
        "trials": args.trials,
        "kills": sum(kinds.values()),
        "kills_by_target": dict(kinds),
        "drivers_started": drivers.started,
        "wall_s": round(time.monotonic() - t0, 1),
        "lost": len(ledger.lost),
        "duplicated": duplicates(trials),
        "hangs": hangs,
        "driver_failures": drivers.failed,
        "pace_stalls": stalls,
        "rows": len(trials),
        "complete": sum(t.state == "COMPLETE" for t in trials),
        "requeued_stale": sum("StaleTrial" in (t.error or "") for t in trials),
        "requeued_interrupted": sum((t.error or "").startswith("Interrupted") for t in trials),
        "worker_crashed": sum("WorkerCrashed" in (t.error or "") for t in trials),
        "executor_errors": sum("ExecutorError" in (t.error or "") for t in trials),
        "integrity": integrity,
        "consistency": problems or "ok",
    }


def _kill_one(
    backend: str, drivers: Drivers, client: Any, workers: DaskWorkers | None, rng: random.Random
) -> str:
    """SIGKILL one process; returns what it was."""
    if workers is not None:
        while not workers.kill_registered(client, rng):  # replacements still starting
            time.sleep(0.5)
        return "dask_worker"
    drivers.reap()
    if not drivers.live:
        drivers.start()
    if rng.random() < 0.5:  # a pool worker of a driver that has one (started ones may not yet)
        workers = [w for p in drivers.live for w in _pool_workers(p.pid)]
        if workers and _kill_pid(rng.choice(workers)):
            return "pool_worker"
    drivers.kill(rng.choice(drivers.live))
    return "driver"


def main(argv: list[str] | None = None) -> None:
    """Run the soak on each backend, print the counts, write the JSON results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--study", help=argparse.SUPPRESS)
    ap.add_argument("--dask", help=argparse.SUPPRESS)
    ap.add_argument("--trials", type=int, default=200)
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", nargs="*", choices=["sqlite", "postgres", "dask"])
    ap.add_argument("--postgres", default=os.environ.get("RT_POSTGRES_URL"))
    ap.add_argument("--name", default="soak_faults")
    args = ap.parse_args(argv)
    if args.child:
        child(args)
        return
    backends = args.backends or ["sqlite", "dask"] + (["postgres"] if args.postgres else [])
    if "postgres" in backends and not args.postgres:
        ap.error("--backends postgres needs --postgres URL or RT_POSTGRES_URL (.ci/postgres.sh)")
    machine = machine_info()
    rows = []
    payload: dict[str, Any] = {"seed": args.seed, "trials": args.trials, "kills": args.kills}
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            db = Path(tmp) / f"soak-{backend}.db"
            url = args.postgres if backend == "postgres" else f"sqlite:///{db}"
            row = soak(backend, url, args, Path(tmp))
            rows.append(row)
            print(json.dumps(row), flush=True)
            write_results(args.name, {**payload, "rows": rows}, machine=machine)
    print(
        f"{'backend':>8} {'kills':>5} {'lost':>4} {'dup':>3} {'hangs':>5} {'requeued':>8} "
        f"{'crashed':>7} {'integrity':>10} consistency"
    )
    for r in rows:
        print(
            f"{r['backend']:>8} {r['kills']:>5} {r['lost']:>4} {r['duplicated']:>3} "
            f"{r['hangs']:>5} {r['requeued_stale']:>8} {r['worker_crashed']:>7} "
            f"{str(r['integrity'])[:10]:>10} {r['consistency']}"
        )
    path = write_results(args.name, {**payload, "rows": rows}, machine=machine)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
