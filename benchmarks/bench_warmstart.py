"""Warm start (`StudySettings.warm_start`): cold studies against studies warm-started from a
finished one, with each warm-start model (``mtgp``: a multi-task GP; ``rgpe``: a
ranking-weighted ensemble of per-study GPs), on the same tuner seeds.

Two problems, each a named run of ``benchmarks/results/bench_warmstart.json``:

``synthetic`` (cheap; instant evaluations, one trial at a time): the target is a shifted DTLZ2
(d=6, minimize f1, f2; ``g = sum_i (x_i - 0.75)^2`` over x1..x5, so the space's centre, the
default, is no near-optimum; reference point (1.1, 1.1), best hypervolume 0.4246). Two finished source studies of 25 trials (the cold tuner, seed 100):

* ``related``: DTLZ2 with its optimum at 0.6 instead of 0.75, outcomes on another scale (2f + 0.5),
  over another space: x0..x4 and a parameter ``z`` the target lacks (the target's x5 takes its
  default, 0.5, in the mapped trials);
* ``unrelated``: smooth functions of the target's space that do not move with the target's
  objectives.

Arms (per tuner seed): ``cold`` (the default design of 7, then the flat GP); ``seeded`` (the
source's 2 best configurations queued first, a design of 4 in all, the flat GP: what seeding
alone gives); ``mtgp`` and ``rgpe`` (the same seeding and design, then that warm-start model);
for both sources. ``source-only``: the related source's Pareto set, mapped, evaluated on the target
(no tuning). Reported: median hypervolume after 5, 10, 20 trials, paired differences against
cold, the trial at which a run first reaches cold's final hypervolume, proposal seconds.

``rewrite``: held-out zoo workloads (Llama, ViT) against the main job's study (``--source``, the
database ``make run`` writes; copied before it is read): ``cold`` and ``warm`` studies of
`rewrite_tuner.study` (``warm``: the main job's two best configurations queued after the
informed prior, and the model ``--models`` names).

Usage::

    python -m benchmarks.bench_warmstart --problem synthetic --seeds 5 --trials 20
    python -m benchmarks.bench_warmstart --problem rewrite --source demo-study.db --seeds 3 \
        --trials 20 --models mtgp,rgpe
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._common import RESULTS_DIR, compact_json, machine_info, write_results

HELD_OUT = ("llama", "vit")
MODELS = ("mtgp", "rgpe")
OBJ = {"f1": "minimize", "f2": "minimize"}
REF = (1.1, 1.1)
SOURCE_TRIALS = 25
WARM_DESIGN = 4  # a warm-started study's design: the 2 queued configurations, then 2 Sobol points
QUEUE = {"warm_start_queue": 2, "warm_start_suggest": 0, "warm_start_rank": 0}
"""The warm arms' rule, as their figures were measured: the source's best queued first (the
default before the rank rule, `StudySettings.warm_start_rank`)."""
FILE = RESULTS_DIR / "bench_warmstart.json"


# ---------------------------------------------------------------------------- synthetic
def _dtlz2(x0: float, rest: list[float], centre: float) -> tuple[float, float]:
    """DTLZ2 with the angle kept off the axes (``0.05 + 0.9 x0`` of a right angle): at an
    exact axis one objective is ~1e-17 whatever the rest, which the tuner's outlier rule
    (`tuner.problem.clip_outliers`) reads as a zero spread once half the trials sit there."""
    g = sum((v - centre) ** 2 for v in rest)
    angle = math.pi / 2 * (0.05 + 0.9 * x0)
    return (1 + g) * math.cos(angle), (1 + g) * math.sin(angle)


def best_hypervolume() -> float:
    """The target's best hypervolume (its front, g = 0, on 2001 points)."""
    return hypervolume([list(_dtlz2(i / 2000, [0.75], 0.75)) for i in range(2001)])


def target_evaluate(config: dict[str, Any]) -> dict[str, float]:
    """The target: DTLZ2 with its optimum at x1..x5 = 0.75."""
    f1, f2 = _dtlz2(config["x0"], [config[f"x{i}"] for i in range(1, 6)], 0.75)
    return {"f1": f1, "f2": f2}


def related_evaluate(config: dict[str, Any]) -> dict[str, float]:
    """The related source: DTLZ2 at 0.6 over x0..x4 (x5 absent), outcomes 2f + 0.5."""
    f1, f2 = _dtlz2(config["x0"], [config[f"x{i}"] for i in range(1, 5)], 0.6)
    return {"f1": 2 * f1 + 0.5, "f2": 2 * f2 + 0.5}


def unrelated_evaluate(config: dict[str, Any]) -> dict[str, float]:
    """The unrelated source: smooth functions that do not move with the target's."""
    x = [config[f"x{i}"] for i in range(6)]
    f1 = 1 + 0.5 * math.sin(2 * math.pi * (x[2] + 0.3 * x[4])) + 0.4 * math.cos(3 * math.pi * x[5])
    f2 = 1 + 0.5 * math.cos(2 * math.pi * (x[1] - x[3])) + 0.4 * math.sin(4 * math.pi * x[0])
    return {"f1": f1, "f2": f2}


def _spaces() -> dict[str, Any]:
    from spaces import Float, Space

    unit = {f"x{i}": Float(0.0, 1.0) for i in range(6)}
    related = {**{f"x{i}": Float(0.0, 1.0) for i in range(5)}, "z": Float(0.0, 1.0)}
    return {"target": Space(unit), "related": Space(related), "unrelated": Space(unit)}


def hypervolume(values: list[list[float] | None]) -> float:
    """Dominated hypervolume of minimized (f1, f2) pairs against `REF`."""
    import torch
    from botorch.utils.multi_objective.box_decompositions.dominated import DominatedPartitioning

    ok = [v for v in values if v is not None]
    if not ok:
        return 0.0
    Y = -torch.tensor(ok, dtype=torch.float64)
    ref = -torch.tensor(REF, dtype=torch.float64)
    return float(DominatedPartitioning(ref_point=ref, Y=Y).compute_hypervolume())


def _optimize(study: Any, trials: int) -> Any:
    with ThreadPoolExecutor(max_workers=1) as pool:
        return study.optimize(trials, executor=pool, progress=False)


def make_sources(url: str) -> dict[str, list[dict[str, Any]]]:
    """Run the two source studies; return the configurations seeding queues from each."""
    from studies import Study, StudySettings
    from studies.warmstart import seed_from_related

    spaces = _spaces()
    evaluate = {"related": related_evaluate, "unrelated": unrelated_evaluate}
    seeds: dict[str, list[dict[str, Any]]] = {}
    for name in ("related", "unrelated"):
        t0 = time.perf_counter()
        _optimize(Study(name, spaces[name], OBJ, evaluate[name], storage=url, seed=100), 25)
        probe = Study(
            f"probe-{name}",
            spaces["target"],
            OBJ,
            storage=url,
            settings=StudySettings(warm_start=[name]),
        )
        seeds[name] = [t.config for t in seed_from_related(probe, per_study=2)]
        print(
            f"source {name}: {SOURCE_TRIALS} trials, {time.perf_counter() - t0:.0f} s", flush=True
        )
    return seeds


def run_synthetic(
    arm: str, source: str, seed: int, trials: int, url: str, seeds: list[dict[str, Any]]
) -> dict[str, Any]:
    """One study of ``arm`` (cold, seeded, mtgp, rgpe) with tuner seed ``seed``."""
    from studies import Study, StudySettings

    warm = {"warm_start": [source], "warm_start_model": arm, **QUEUE} if arm in MODELS else {}
    design = {} if arm == "cold" else {"n_initial": WARM_DESIGN}
    settings = StudySettings(**warm, **design)
    name = f"{arm}-{source}-{seed}" if arm != "cold" else f"cold-{seed}"
    study = Study(
        name, _spaces()["target"], OBJ, target_evaluate, storage=url, seed=seed, settings=settings
    )
    if arm != "cold" and not study.trials:  # a warm-started study queued them on creation
        for config in seeds:
            study.enqueue(config)
    t0 = time.perf_counter()
    stats = _optimize(study, trials)
    ordered = sorted(study.trials, key=lambda t: t.number)
    values = [[t.values["f1"], t.values["f2"]] if t.values else None for t in ordered]
    hv = [round(hypervolume(values[:n]), 5) for n in range(1, trials + 1)]
    tuner = next(iter(study._tuners.values()), None)
    fitted = tuner.last_fit if tuner is not None else None
    last = dict(fitted.description) if fitted is not None else {}
    print(
        f"  {name:22s} hv@5 {hv[min(4, trials - 1)]:.4f} @10 {hv[min(9, trials - 1)]:.4f} "
        f"@{trials} {hv[-1]:.4f}  "
        f"proposing {stats.proposing:.0f} s / {time.perf_counter() - t0:.0f} s",
        flush=True,
    )
    return {
        "arm": arm,
        "source": None if arm == "cold" else source,
        "seed": seed,
        "hv": hv,
        "values": [[round(a, 5) for a in v] if v else None for v in values],
        "proposing_s": round(stats.proposing, 2),
        "last_fit": {k: v for k, v in last.items() if k in ("model", "weights", "related", "loo")},
    }


def source_only(url: str) -> dict[str, Any]:
    """The related source's Pareto set mapped onto the target's space, evaluated there."""
    from studies import Study, StudySettings
    from studies.warmstart import seed_from_related

    probe = Study(
        "probe-all",
        _spaces()["target"],
        OBJ,
        storage=url,
        settings=StudySettings(warm_start=["related"]),
    )
    configs = [t.config for t in seed_from_related(probe, per_study=SOURCE_TRIALS)]
    values = [list(target_evaluate(c).values()) for c in configs]
    return {"n": len(configs), "hv_best2": hypervolume(values[:2]), "hv_all": hypervolume(values)}


def _first_at(curve: list[float], target: float, tol: float = 1e-9) -> int | None:
    """The trial (1-based) at which ``curve`` first reaches ``target`` (None: never)."""
    return next((n for n, v in enumerate(curve, 1) if v >= target - tol), None)


def _reach(rows: list[dict[str, Any]], row: dict[str, Any]) -> int | None:
    """The trial at which ``row`` first reaches the same seed's cold final hypervolume."""
    cold = next(r for r in rows if r["arm"] == "cold" and r["seed"] == row["seed"])
    return _first_at(row["hv"], cold["hv"][-1])


def summarize(rows: list[dict[str, Any]], trials: int) -> list[dict[str, Any]]:
    """Per arm and source: median hypervolume at 5, 10, ``trials``; paired differences against
    cold at ``trials``; trials to cold's final hypervolume; median proposal seconds."""
    out = []
    groups = [("cold", None)] + [
        (a, s) for s in ("related", "unrelated") for a in ("seeded", *MODELS)
    ]
    for arm, source in groups:
        runs = [r for r in rows if r["arm"] == arm and r["source"] == source]
        if not runs:
            continue
        cold = {r["seed"]: r for r in rows if r["arm"] == "cold"}
        diffs = [r["hv"][-1] - cold[r["seed"]]["hv"][-1] for r in runs if r["seed"] in cold]
        reach = [_reach(rows, r) for r in runs if r["seed"] in cold]
        out.append(
            {
                "arm": arm,
                "source": source,
                "seeds": len(runs),
                "hv": {
                    n: float(np.median([r["hv"][min(n, trials) - 1] for r in runs]))
                    for n in (5, 10, trials)
                },
                "diff_vs_cold": [round(d, 4) for d in diffs],
                "reach_cold_final": reach,
                "proposing_s": float(np.median([r["proposing_s"] for r in runs])),
            }
        )
    return out


def print_table(summary: list[dict[str, Any]], trials: int, only: dict[str, Any]) -> None:
    print(
        f"\nmedian hypervolume over seeds (best {best_hypervolume():.4f}); diff vs cold at "
        f"{trials}, per seed"
    )
    print(
        f"| arm | source | @5 | @10 | @{trials} | diff vs cold | reaches cold@{trials} at | proposing s |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for s in summary:
        h = s["hv"]
        print(
            f"| {s['arm']} | {s['source'] or '-'} | {h[5]:.4f} | {h[10]:.4f} | {h[trials]:.4f} | "
            f"{s['diff_vs_cold']} | {s['reach_cold_final']} | {s['proposing_s']:.0f} |"
        )
    print(
        f"| source-only | related | {only['n']} configurations: {only['hv_all']:.4f} "
        f"(its best 2: {only['hv_best2']:.4f}) | | | | | |"
    )


def _save(record: dict[str, Any], run: str, machine: dict[str, Any]) -> None:
    """Write ``record`` as run ``run``; a file from before the runs (the rewrite problem's
    record alone) becomes run ``rewrite`` first."""
    if FILE.exists():
        doc = json.loads(FILE.read_text())
        if "runs" not in doc:
            from rewrite.serialize import write_text_atomic

            write_text_atomic(FILE, compact_json({"runs": {"rewrite": doc}}) + "\n")
    write_results("bench_warmstart", record, machine=machine, run=run, dumps=compact_json)


def main_synthetic(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    machine = machine_info()
    seeds = list(range(args.seeds))
    rows: list[dict[str, Any]] = []
    settings = {
        "trials": args.trials,
        "seeds_planned": seeds,
        "source_trials": SOURCE_TRIALS,
        "warm_design": WARM_DESIGN,
        "ref_point": REF,
        "arms": args.arms,
    }
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite:///{Path(tmp) / 'synthetic.db'}"
        queued = make_sources(url)
        only = source_only(url)
        for seed in seeds:
            for arm in args.arms:
                for source in ("related", "unrelated") if arm != "cold" else ("-",):
                    rows.append(
                        run_synthetic(arm, source, seed, args.trials, url, queued.get(source, []))
                    )
            summary = summarize(rows, args.trials)
            done = {"seeds": seeds[: seeds.index(seed) + 1], "best_hv": best_hypervolume()}
            record = {**settings, **done, "source_only": only, "summary": summary, "rows": rows}
            _save(record, "synthetic", machine)
    print_table(summarize(rows, args.trials), args.trials, only)
    print("wrote benchmarks/results/bench_warmstart.json (run 'synthetic')")


# ---------------------------------------------------------------------------- rewrite
def run_arm(arm: str, seed: int, trials: int, source: str, tmp: Path) -> dict[str, Any]:
    """One fresh rewrite study of ``arm`` (``cold``, or a warm-start model) with tuner seed
    ``seed``."""
    from rewrite_tuner.study import rewrite_study
    from studies.settings import StudySettings

    warm = arm in MODELS
    settings = StudySettings(
        warm_start=[{"study": "rewrite-demo", "storage": source}] if warm else (),
        warm_start_model=arm if warm else "mtgp",
        **(QUEUE if warm else {}),
    )
    t0 = time.perf_counter()
    study = rewrite_study(
        HELD_OUT,
        name=f"{arm}-{seed}",
        storage=f"sqlite:///{tmp / f'{arm}-{seed}.db'}",
        seed=seed,
        settings=settings,
    )
    # a warm-started study queues the source's best on creation, before the lead design
    queued = [t.number for t in sorted(study.trials, key=lambda t: t.number)][:2] if warm else []
    stats = study.optimize(trials, n_workers=2, progress=False)
    values = [
        [t.values["anytime_hv"], t.values["final_hv"]] if t.values else None
        for t in sorted(study.trials, key=lambda t: t.number)
    ]
    fitted = next(iter(study._tuners.values())).last_fit if study._tuners else None
    described = dict(fitted.description) if fitted is not None else {}
    print(
        f"  {arm} seed {seed}: best anytime_hv {max(v[0] for v in values if v):.3f}, "
        f"{time.perf_counter() - t0:.0f} s ({stats.summary()})",
        flush=True,
    )
    return {
        "arm": arm,
        "seed": seed,
        "values": values,
        "queued": queued,  # the source's best configurations, in its rank order
        "proposing_s": stats.proposing,
        "wall_s": time.perf_counter() - t0,
        "last_fit": {
            k: v for k, v in described.items() if k in ("model", "weights", "related", "loo")
        },
    }


def _best(values: list[Any], n: int) -> float:
    return max(v[0] for v in values[:n] if v is not None)


def _curve(values: list[Any], trials: int) -> list[float]:
    """The best ``anytime_hv`` by each trial 1..``trials``."""
    return [_best(values, n) for n in range(1, trials + 1)]


def summarize_rewrite(
    rows: list[dict[str, Any]], arms: list[str], trials: int
) -> list[dict[str, Any]]:
    """Per arm: median best ``anytime_hv`` by trial 5, 10 and ``trials``, the trial at which each
    seed first reaches its cold study's final best, median proposing seconds; plus
    ``transferred``: the source's best configuration alone (its value on the held-out suite, the
    first queued trial of the warm studies), with the trial each cold study first beats it."""
    out = []
    cold = {r["seed"]: r for r in rows if r["arm"] == "cold"}
    for arm in arms:
        runs = [r for r in rows if r["arm"] == arm]
        reach = [
            _first_at(_curve(r["values"], trials), _best(cold[r["seed"]]["values"], trials))
            for r in runs
        ]
        at = {
            str(n): float(np.median([_best(r["values"], n) for r in runs])) for n in (5, 10, trials)
        }
        out.append(
            {
                "arm": arm,
                "seeds": [r["seed"] for r in runs],
                "best_anytime_hv": at,
                "reach_cold_final": reach,
                "proposing_s": float(np.median([r["proposing_s"] for r in runs])),
            }
        )
    first = [r for r in rows if r.get("queued")]
    if first:
        alone = [r["values"][r["queued"][0]][0] for r in first if r["values"][r["queued"][0]]]
        beaten = []
        for r in first:
            v = r["values"][r["queued"][0]]
            curve = _curve(cold[r["seed"]]["values"], trials)
            beaten.append(_first_at(curve, v[0], tol=0.0) if v else None)
        out.append(
            {
                "arm": "transferred",
                "anytime_hv": alone,
                "median": float(np.median(alone)),
                "cold_reaches_it_at": beaten,
            }
        )
    return out


def main_rewrite(args: argparse.Namespace) -> None:
    if not Path(args.source).exists():
        raise SystemExit(
            f"--source {args.source!r} does not exist; `make run` writes demo-study.db"
        )
    machine = machine_info()
    rows: list[dict[str, Any]] = []
    arms = ["cold", *args.models]
    settings = {"source": args.source, "trials": args.trials, "held_out": HELD_OUT, "arms": arms}
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "source.db"
        shutil.copy(args.source, source)  # opening it may upgrade its schema: never the user's
        for seed in range(args.seeds):
            for arm in arms:
                rows.append(run_arm(arm, seed, args.trials, f"sqlite:///{source}", Path(tmp)))
                _save({**settings, "rows": rows}, "rewrite", machine)
    summary = summarize_rewrite(rows, arms, args.trials)
    _save({**settings, "summary": summary, "rows": rows}, "rewrite", machine)
    print(f"\nmedian over {args.seeds} tuner seeds (held-out {', '.join(HELD_OUT)}):")
    for s in summary:
        if s["arm"] == "transferred":
            print(
                f"  transferred (the source's best configuration alone) anytime_hv "
                f"{s['median']:.3f}; the cold study first matches it at trial "
                f"{s['cold_reaches_it_at']}"
            )
            continue
        at = s["best_anytime_hv"]
        print(
            f"  {s['arm']:11s} best anytime_hv @5 {at['5']:.3f} @10 {at['10']:.3f} "
            f"@{args.trials} {at[str(args.trials)]:.3f}; reaches cold's final best at trial "
            f"{s['reach_cold_final']}; proposing {s['proposing_s']:.0f} s"
        )
    print("wrote benchmarks/results/bench_warmstart.json (run 'rewrite')")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--problem", choices=("synthetic", "rewrite"), help="default: rewrite with --source"
    )
    ap.add_argument("--source", help="rewrite: the main job's database (demo-study.db)")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--models", default="mtgp,rgpe", help="rewrite: warm-start models, by comma")
    ap.add_argument(
        "--arms", default="cold,seeded,mtgp,rgpe", help="synthetic: arms to run, by comma"
    )
    args = ap.parse_args()
    args.problem = args.problem or ("rewrite" if args.source else "synthetic")
    args.source = args.source or "demo-study.db"
    args.models = [m for m in args.models.split(",") if m]
    args.arms = [a for a in args.arms.split(",") if a]
    unknown = sorted(set(args.models) - set(MODELS)) + sorted(
        set(args.arms) - {"cold", "seeded", *MODELS}
    )
    if unknown:
        ap.error(
            f"unknown models or arms {unknown}; models: {MODELS}, arms: cold, seeded, {MODELS}"
        )
    warnings.filterwarnings("ignore")
    (main_synthetic if args.problem == "synthetic" else main_rewrite)(args)


if __name__ == "__main__":
    main()
