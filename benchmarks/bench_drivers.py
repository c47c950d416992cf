"""Several driving processes on one study: trials per minute and each driver's share (issue 36).

The study is `bench_studies`' (README's example): the toy problem, the constraint
``search_seconds <= 30``, seed 0, ``n_workers=2`` per driver, default `StudySettings` (the
``auto`` surrogate picks the structured one). 1, 2 and 4 drivers, each a separate process,
are started together on one study (SQLite, and PostgreSQL when ``--postgres URL`` or
``RT_POSTGRES_URL`` names a server, e.g. ``.ci/postgres.sh``) and drive it to ``n`` trials with
an instant evaluate (the run measures the drivers: proposals and storage) or a 1 s one
(``time.sleep(1)``: it measures how the drivers share evaluation slots).

Every driver imports and opens the study first, then all get "go" at once; the clock runs from
"go" until the last driver returns. Per run: trials per minute, each driver's share of the
trials, its proposals (calls of `Study._propose`), its proposals dropped because another driver
had added the same configuration (the fit was wasted), stale trials, duplicate configurations,
and the load average. ``--tuner fast`` caps the acquisition effort (the test suite's options:
1 restart, 16 raw samples), which makes a proposal ~10x cheaper: on a 2-core machine the
default effort makes the drivers' proposals, not the evaluations, the bottleneck.

Usage:
    python -m benchmarks.bench_drivers --quick                    # 1 and 2 drivers, 20 trials
    python -m benchmarks.bench_drivers --drivers 1 2 4 --trials 40 --evaluate instant sleep1
    python -m benchmarks.bench_drivers --child ...                # one driver (internal)
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchmarks._common import machine_info, write_results
from studies.examples import toy_evaluate, toy_space

OBJ = {"latency": "minimize", "search_seconds": "minimize"}
ROOT = Path(__file__).resolve().parents[1]
#: The test suite's capped tuner (`tests/studies/helpers.FAST_TUNER`).
FAST_TUNER = {"num_restarts": 1, "raw_samples": 16, "maxiter": 5, "mc_samples": 16}


def sleep1(config: dict[str, Any]) -> dict[str, float]:
    """The toy problem taking 1 s (an evaluation that is not free)."""
    time.sleep(1.0)
    return toy_evaluate(config)


EVALUATES = {"instant": toy_evaluate, "sleep1": sleep1}


class _Dropped(logging.Handler):
    """Counts the allocation's "proposal(s) ... dropped" log lines."""

    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if "dropped" in msg and "proposal" in msg:
            self.count += int(msg.split()[0])


def child(args: argparse.Namespace) -> None:
    """One driving process: open the study, print ``ready``, wait for a line, drive it."""
    from studies.settings import StudySettings
    from studies.study import Study

    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    options = FAST_TUNER if args.tuner == "fast" else {}
    settings = StudySettings(tuner_options=options)
    study = Study(
        args.study,
        toy_space(),
        OBJ,
        EVALUATES[args.evaluate],
        ["search_seconds <= 30"],
        args.url,
        seed=0,
        settings=settings,
    )
    dropped = _Dropped()
    logging.getLogger("studies.study").addHandler(dropped)
    logging.getLogger("studies.study").setLevel(logging.INFO)
    seconds: list[float] = []
    propose = study._propose

    def timed(*a: Any) -> list[dict[str, Any]]:
        t0 = time.perf_counter()
        try:
            return propose(*a)
        finally:
            seconds.append(time.perf_counter() - t0)

    study._propose = timed  # type: ignore[method-assign]
    study._tuner(study.trials)  # imports the tuner's libraries before the clock starts
    print("ready", flush=True)
    sys.stdin.readline()
    t0 = time.perf_counter()
    study.optimize(args.trials, n_workers=args.workers, progress=False)
    wall = time.perf_counter() - t0
    report = {
        "pid": os.getpid(),
        "wall_s": wall,
        "proposals": len(seconds),
        "propose_s": sum(seconds),
        "dropped": dropped.count,
    }
    print("result " + json.dumps(report), flush=True)


def run_one(
    url: str, n_drivers: int, n_trials: int, evaluate: str, tuner: str, threads: int, workers: int
) -> dict[str, Any]:
    """Start ``n_drivers`` driver processes on a new study; returns the run's measurements."""
    from studies.study import Study

    name = f"drivers-{uuid.uuid4().hex[:8]}"
    cmd = [sys.executable, "-m", "benchmarks.bench_drivers", "--child", "--url", url]
    cmd += ["--study", name, "--trials", str(n_trials), "--evaluate", evaluate]
    cmd += ["--tuner", tuner, "--threads", str(threads), "--workers", str(workers)]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONWARNINGS": "ignore"}
    procs = [
        subprocess.Popen(
            cmd,
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(n_drivers)
    ]
    try:
        for p in procs:  # every driver has imported and opened the study
            line = p.stdout.readline()  # type: ignore[union-attr]
            if line.strip() != "ready":
                raise RuntimeError(f"driver failed to start: {line}{p.stderr.read()}")  # type: ignore[union-attr]
        load = os.getloadavg()[0]
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
        reports = []
        for p in procs:
            out, err = p.communicate(timeout=3600)
            if p.returncode != 0:
                raise RuntimeError(f"driver exited {p.returncode}: {err[-3000:]}")
            line = next(x for x in out.splitlines() if x.startswith("result "))
            reports.append(json.loads(line[len("result ") :]))
        wall = time.perf_counter() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    trials = Study.load(name, url).trials
    pid_of = {str(r["pid"]): r for r in reports}
    per = collections.Counter(
        t.worker.split(":")[1] for t in trials if t.state == "COMPLETE" and t.worker
    )
    configs = [json.dumps(t.config, sort_keys=True) for t in trials]
    finished = sum(t.state.is_finished for t in trials) - sum(
        t.retry_of is not None for t in trials
    )
    total = max(sum(per.values()), 1)
    drivers = []
    for pid, r in pid_of.items():
        drivers.append(
            {
                "trials": per.get(pid, 0),
                "share": round(per.get(pid, 0) / total, 3),
                "proposals": r["proposals"],
                "propose_s": round(r["propose_s"], 2),
                "dropped": r["dropped"],
            }
        )
    drivers.sort(key=lambda d: -d["trials"])
    return {
        "backend": url.split(":", 1)[0].split("+")[0],
        "drivers": n_drivers,
        "n_trials": n_trials,
        "evaluate": evaluate,
        "tuner": tuner,
        "threads": threads,
        "workers_per_driver": workers,
        "wall_s": round(wall, 2),
        "trials_per_min": round(60 * finished / wall, 2),
        "finished": finished,
        "complete": sum(t.state == "COMPLETE" for t in trials),
        "stale": sum("StaleTrial" in (t.error or "") for t in trials),
        "duplicates": len(configs) - len(set(configs)),
        "min_share": min(d["share"] for d in drivers),
        "per_driver": drivers,
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> None:
    """Run the grid (or one driver with ``--child``), print the table, write the JSON results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    ap.add_argument("--study", help=argparse.SUPPRESS)
    ap.add_argument("--quick", action="store_true", help="1 and 2 drivers, 20 trials, SQLite")
    ap.add_argument("--drivers", type=int, nargs="*", default=[1, 2, 4])
    ap.add_argument("--trials", type=int, nargs="*", default=[40])
    ap.add_argument("--evaluate", nargs="*", choices=sorted(EVALUATES), default=["instant"])
    ap.add_argument("--backends", nargs="*", choices=["sqlite", "postgres"], default=None)
    ap.add_argument("--postgres", default=os.environ.get("RT_POSTGRES_URL"))
    ap.add_argument("--tuner", choices=["default", "fast"], default="default")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per driver (0: torch's)")
    ap.add_argument("--workers", type=int, default=2, help="evaluation slots per driver")
    ap.add_argument("--name", default="bench_drivers")
    ap.add_argument("--run", default=None, help="run name in the file (default: trials<N>)")
    args = ap.parse_args(argv)
    if args.child:
        args.trials = args.trials[0]
        args.evaluate = args.evaluate[0]
        child(args)
        return
    if args.quick:
        args.drivers, args.trials = [1, 2], [20]
    backends = args.backends or (["sqlite", "postgres"] if args.postgres else ["sqlite"])
    if "postgres" in backends and not args.postgres:
        ap.error("--backends postgres needs --postgres URL or RT_POSTGRES_URL (.ci/postgres.sh)")
    machine = machine_info()
    run = args.run or "trials" + "_".join(str(n) for n in args.trials)
    rows: list[dict[str, Any]] = []
    settings = {
        "seed": 0,
        "workers_per_driver": args.workers,
        "tuner": args.tuner,
        "tuner_options": FAST_TUNER if args.tuner == "fast" else "StudySettings() defaults",
        "torch_threads_per_driver": args.threads or "torch default",
        "constraint": "search_seconds <= 30",
    }
    with tempfile.TemporaryDirectory() as tmp:
        for backend in backends:
            for evaluate in args.evaluate:
                for n in args.trials:
                    for d in args.drivers:
                        url = (
                            f"sqlite:///{Path(tmp) / f'{evaluate}-{n}-{d}.db'}"
                            if backend == "sqlite"
                            else args.postgres
                        )
                        row = run_one(url, d, n, evaluate, args.tuner, args.threads, args.workers)
                        rows.append(row)
                        print(json.dumps(row), flush=True)
                        payload = {**settings, "rows": rows}
                        write_results(args.name, payload, machine=machine, run=run)
    _table(rows)
    path = write_results(args.name, {**settings, "rows": rows}, machine=machine, run=run)
    print(f"wrote {path}")


def _table(rows: list[dict[str, Any]]) -> None:
    print(
        f"{'backend':>8} {'evaluate':>8} {'trials':>6} {'drivers':>7} {'wall s':>7} "
        f"{'trials/min':>10} {'x one':>6} {'shares':>20} {'dropped':>7} {'dup':>3}"
    )
    for r in rows:
        one = next(
            (
                o
                for o in rows
                if o["drivers"] == 1
                and (o["backend"], o["evaluate"], o["n_trials"])
                == (r["backend"], r["evaluate"], r["n_trials"])
            ),
            None,
        )
        ratio = f"{r['trials_per_min'] / one['trials_per_min']:.2f}" if one else "-"
        shares = "/".join(f"{d['share']:.2f}" for d in r["per_driver"])
        dropped = sum(d["dropped"] for d in r["per_driver"])
        print(
            f"{r['backend']:>8} {r['evaluate']:>8} {r['n_trials']:>6} {r['drivers']:>7} "
            f"{r['wall_s']:>7} {r['trials_per_min']:>10} {ratio:>6} {shares:>20} {dropped:>7} "
            f"{r['duplicates']:>3}"
        )


if __name__ == "__main__":
    main()
