"""Warm start on held-out workloads: a cold rewrite study against one warm-started from the main
job's study (`StudySettings.warm_start` plus `studies.warmstart.seed_from_related`).

For each tuner seed, two fresh studies on the held-out zoo models (Llama and ViT, never tuned on
by the main job), same budget and search seeds: ``cold`` (the defaults, the informed prior, a
5-point design, then BO) and ``warm`` (the same, with the main job's two best configurations
queued after the informed prior, and the multi-task GP over its trials, kept only while it
predicts this study's trials better than the flat GP). Prints the median best ``anytime_hv`` by trial 5, 10 and the last, the trial
at which each run first reaches the cold run's final best, and proposal seconds; writes
``benchmarks/results/bench_warmstart.json``.

Usage: ``python -m benchmarks.bench_warmstart --source demo-study.db [--seeds 3] [--trials
20]`` (the source is ``make run``'s study database, copied before it is read; its study
``rewrite-demo``).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import machine_info, write_results

HELD_OUT = ("llama", "vit")


def run_arm(arm: str, seed: int, trials: int, source: str, tmp: Path) -> dict[str, Any]:
    """One fresh study of ``arm`` (``cold`` or ``warm``) with tuner seed ``seed``."""
    from rewrite_tuner.rewrite_study import rewrite_study
    from studies.settings import StudySettings
    from studies.warmstart import seed_from_related

    warm = arm == "warm"
    settings = StudySettings(
        warm_start=[{"study": "rewrite-demo", "storage": source}] if warm else ()
    )
    t0 = time.perf_counter()
    study = rewrite_study(
        HELD_OUT,
        name=f"{arm}-{seed}",
        storage=f"sqlite:///{tmp / f'{arm}-{seed}.db'}",
        seed=seed,
        settings=settings,
    )
    if warm:
        seed_from_related(study, per_study=2)
    stats = study.optimize(trials, n_workers=2, progress=False)
    values = [
        [t.values["anytime_hv"], t.values["final_hv"]] if t.values else None
        for t in sorted(study.trials, key=lambda t: t.number)
    ]
    surrogate = next(iter(study._tuners.values())).surrogate if study._tuners else None
    described = surrogate.describe() if surrogate is not None else {}
    print(
        f"  {arm} seed {seed}: best anytime_hv {max(v[0] for v in values if v):.3f}, "
        f"{time.perf_counter() - t0:.0f} s ({stats.summary()})",
        flush=True,
    )
    return {
        "arm": arm,
        "seed": seed,
        "values": values,
        "proposing_s": stats.proposing,
        "wall_s": time.perf_counter() - t0,
        "last_fit": described,
    }


def _best(values: list[Any], n: int) -> float:
    return max(v[0] for v in values[:n] if v is not None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", default="demo-study.db", help="the main job's study database")
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--trials", type=int, default=20)
    args = ap.parse_args()
    if not Path(args.source).exists():
        ap.error(f"--source {args.source!r} does not exist; `make run` writes demo-study.db")
    warnings.filterwarnings("ignore")
    machine = machine_info()
    rows: list[dict[str, Any]] = []
    settings = {"source": args.source, "trials": args.trials, "held_out": HELD_OUT}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "source.db"
        shutil.copy(args.source, source)  # opening it may upgrade its schema: never the user's
        for seed in range(args.seeds):
            for arm in ("cold", "warm"):
                rows.append(run_arm(arm, seed, args.trials, f"sqlite:///{source}", Path(tmp)))
                write_results("bench_warmstart", {**settings, "rows": rows}, machine=machine)
    print(f"\nmedian over {args.seeds} tuner seeds (held-out {', '.join(HELD_OUT)}):")
    for arm in ("cold", "warm"):
        runs = [r for r in rows if r["arm"] == arm]
        cells = [np.median([_best(r["values"], n) for r in runs]) for n in (5, 10, args.trials)]
        reach = []
        for r in runs:
            cold = next(c for c in rows if c["arm"] == "cold" and c["seed"] == r["seed"])
            target = _best(cold["values"], args.trials)
            hit = [n for n in range(1, args.trials + 1) if _best(r["values"], n) >= target - 1e-9]
            reach.append(hit[0] if hit else None)
        print(
            f"  {arm:5s} best anytime_hv @5 {cells[0]:.3f} @10 {cells[1]:.3f} "
            f"@{args.trials} {cells[2]:.3f}; reaches cold's final best at trial {reach}; "
            f"proposing {np.median([r['proposing_s'] for r in runs]):.0f} s"
        )
    print("wrote benchmarks/results/bench_warmstart.json")


if __name__ == "__main__":
    main()
