"""Study throughput: one tuner per driving process versus a tuner rebuilt per proposal (issue 21).

The study is README's example: the toy problem (`studies.examples`: 3 parameters, 6 unit-cube
columns, an instant evaluate reporting a tracking metric), the constraint
``search_seconds <= 30``, ``n_workers=2``, seed 0, SQLite. Its evaluations take no time, so the
run measures the driver: model fits and acquisition optimization.

Drivers compared in the same run:
    kept      `Study` as shipped: one tuner and one surrogate per driving process, kept across
              proposals (the structured surrogate's checkpoint cache stays warm)
    rebuilt   the same `Study` with its tuner cache cleared before every proposal (the behaviour
              before issue 21: a new `Tuner` and a new surrogate per allocation)

Surrogates: ``flat`` (`StudySettings(surrogate="flat")`) and ``structured`` (``"auto"``, which
picks `structure.StructuredSurrogate` since the toy evaluate reports the tracking metric
``steps``).

Measured per run: wall and driver CPU seconds (`time.process_time`), trials per minute,
proposal latency (wall seconds of each model-based `Study._propose` call: p50, p95), and the
worker idle fraction ``1 - sum(trial finished - started) / (n_workers * wall)``. The load
average is recorded next to every run; the machine is shared, so compare ratios within a run.

Usage:
    python -m benchmarks.bench_studies --quick     # 20 trials, flat and structured
    python -m benchmarks.bench_studies             # 40 and 150 trials
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import write_results
from studies.examples import toy_evaluate, toy_space
from studies.settings import StudySettings
from studies.study import Study

OBJ = {"latency": "minimize", "search_seconds": "minimize"}


class _TimedStudy(Study):
    """`Study` recording the wall time of every proposal; ``rebuild`` drops its tuners first."""

    rebuild = False
    latencies: list[float]

    def _propose(self, trials: list[Any], n: int, *args: Any) -> list[dict[str, Any]]:
        if self.rebuild:
            self._tuners.clear()
        t0 = time.perf_counter()
        out = super()._propose(trials, n, *args)
        self.latencies.append(time.perf_counter() - t0)
        return out


def run_one(n_trials: int, surrogate: str, driver: str, folder: Path) -> dict[str, Any]:
    """One study of ``n_trials`` trials; returns its measurements."""
    settings = StudySettings(surrogate="auto" if surrogate == "structured" else "flat")
    url = f"sqlite:///{folder / f'{surrogate}-{driver}-{n_trials}.db'}"
    study = _TimedStudy(
        "bench",
        toy_space(),
        OBJ,
        toy_evaluate,
        ["search_seconds <= 30"],
        url,
        seed=0,
        settings=settings,
    )
    study.rebuild = driver == "rebuilt"
    study.latencies = []
    load = os.getloadavg()[0]
    t0, c0 = time.perf_counter(), time.process_time()
    study.optimize(n_trials, n_workers=2, progress=False)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    trials = study.trials
    busy = sum((t.finished or 0) - (t.started or 0) for t in trials if t.started)
    model = [s for s in study.latencies if s > 0.05] or study.latencies  # Sobol ones are instant
    q = statistics.quantiles(model, n=20) if len(model) > 1 else model * 19
    return {
        "n_trials": n_trials,
        "surrogate": surrogate,
        "driver": driver,
        "wall_s": round(wall, 2),
        "cpu_s": round(cpu, 2),
        "trials_per_min": round(60 * len(trials) / wall, 2),
        "proposals": len(study.latencies),
        "proposal_p50_s": round(statistics.median(model), 3),
        "proposal_p95_s": round(q[18], 3),
        "worker_idle": round(1 - busy / (2 * wall), 3),
        "complete": sum(t.state == "COMPLETE" for t in trials),
        "load_before": round(load, 2),
        "load_after": round(os.getloadavg()[0], 2),
    }


def main(argv: list[str] | None = None) -> None:
    """Run the grid, print the table with kept/rebuilt ratios, write the JSON results."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="20 trials only")
    ap.add_argument("--trials", type=int, nargs="*", default=None)
    ap.add_argument("--surrogates", nargs="*", default=["flat", "structured"])
    ap.add_argument("--drivers", nargs="*", default=["kept", "rebuilt"])
    ap.add_argument("--name", default="bench_studies")
    args = ap.parse_args(argv)
    sizes = args.trials or ([20] if args.quick else [40, 150])
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in sizes:
            for surrogate in args.surrogates:
                for driver in args.drivers:
                    row = run_one(n, surrogate, driver, Path(tmp))
                    rows.append(row)
                    print(row, flush=True)
    head = f"{'trials':>6} {'surrogate':>10} {'driver':>8} {'wall s':>7} {'cpu s':>7} "
    print(head + f"{'trials/min':>10} {'p50 s':>6} {'p95 s':>6} {'idle':>5} {'load':>5}")
    for r in rows:
        print(
            f"{r['n_trials']:>6} {r['surrogate']:>10} {r['driver']:>8} {r['wall_s']:>7} "
            f"{r['cpu_s']:>7} {r['trials_per_min']:>10} {r['proposal_p50_s']:>6} "
            f"{r['proposal_p95_s']:>6} {r['worker_idle']:>5} {r['load_before']:>5}"
        )
    ratios = []
    for n in sizes:
        for s in args.surrogates:
            pair = {r["driver"]: r for r in rows if r["n_trials"] == n and r["surrogate"] == s}
            if {"kept", "rebuilt"} <= set(pair):
                ratio = pair["rebuilt"]["cpu_s"] / max(pair["kept"]["cpu_s"], 1e-9)
                ratios.append({"n_trials": n, "surrogate": s, "cpu_rebuilt_over_kept": ratio})
                print(f"{n} trials, {s}: driver CPU rebuilt / kept = {ratio:.2f}")
    path = write_results(args.name, {"seed": 0, "n_workers": 2, "rows": rows, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
