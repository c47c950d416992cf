"""Structured surrogate versus flat qLogNEHVI and Ax on function-network problems.

Problems (all maximized, two objectives, the intermediate nodes reported as tracking metrics):

* ``ackley6``: the Ackley function network of Astudillo & Frazier, "Bayesian Optimization of
  Function Networks", NeurIPS 2021 (arXiv 2112.15311), as defined in ``ssethz/mcbo``
  ``scripts/functions.py`` (MIT), shifted: ``x in [0, 1]^6``, ``z = 4 (x - 0.3)`` (the original
  ``z = 4 (x - 0.5)`` puts the optimum at the center of the cube, where Ax's default design
  starts); nodes
  ``f1 = mean(z^2)``, ``f2 = mean(cos(2 pi z))``; ``o1 = 20 exp(-0.2 sqrt(f1)) + exp(f2) - 20 - e``.
  Made bi-objective here with ``f3 = mean((z - 1)^2)``, ``o2 = -f3``. Reference point (-7, -10).
* ``alpine2``: the Alpine2 chain of the same paper / repository: ``z = 10 x``, ``x in [0, 1]^6``;
  ``y1 = -sqrt(z1) sin(z1)``, ``y_k = sqrt(z_k) sin(z_k) y_(k-1)``; ``o1 = y6``. Second objective
  ``o2 = -mean((x - 0.3)^2)`` (node ``g``). Reference point (0, -0.5).
* ``dropwave``: the Dropwave network of the same paper / repository,
  ``x in [0, 1]^2``, shifted like Ackley (``z = 10.24 (x - 0.35)``; the original is
  ``10.24 x - 5.12``); ``y1 = ||z||``, ``o1 = (1 + cos(12 y1)) / (2 + 0.5 y1^2)``. Second objective
  ``o2 = -||z - (2, 2)|| / 5`` (node ``r``). Reference point (0, -2).
* ``rosenbrock5``: the toy chain, the Rosenbrock function network of the same paper / repository:
  ``x in [0, 1]^5``, shifted: ``z = 4 (x - 0.625)`` (the original ``z = 4 (x - 0.5)`` scores
  -4 at the cube's center, better than 99.9% of the cube); ``y1 = -100 (z2 - z1^2)^2 - (1 - z1)^2``,
  ``y_k = -100 (z_(k+1) - z_k^2)^2 - (1 - z_k)^2 + y_(k-1)`` for ``k = 2..4`` (``z`` indexed from
  1), ``o1 = y4`` (optimum 0 at ``z = 1``, ``x = 0.875``; -234 at the center). Second objective
  ``o2 = -mean((x - 0.3)^2)`` (node ``g``), as for Alpine2. Reference point (-500, -0.5): ``o1`` is
  heavy-tailed (median -2606 over the cube, 90th percentile -476).
* ``branincurrin``: BoTorch's ``BraninCurrin`` (Belakaria et al. 2019; max HV 59.36 for the
  negated problem, ref (-18, -6)); unstructured, only nuisance metrics.
* ``vehiclesafety``: BoTorch's ``VehicleSafety`` (Tanabe & Ishibuchi 2020; 5 inputs, 3
  objectives, max HV 246.82 with BoTorch's reference point); unstructured, only nuisance
  metrics.

Each problem also reports ``k`` nuisance metric columns (``--nuisance``): half independent noise,
half random smooth functions of ``x`` that do not reach an objective.

Methods: ``flat`` (the tuner's default `FlatSurrogate`), ``learned`` (`StructuredSurrogate`,
structure learned from the metrics, model selection on), ``true`` (`StructuredSurrogate` with the
true DAG, model selection off: the BOFN-style GP network), ``ax`` (Ax 1.x ``Client`` default
generation strategy, peer). Recorded per trial: dominated hypervolume of the observed objectives
and the proposal wall time.

Usage: ``python benchmarks/bench_structure.py [--quick] [--seeds N] [--trials T]``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_type_hints

import numpy as np
import torch
from botorch.utils.multi_objective.hypervolume import Hypervolume
from botorch.utils.multi_objective.pareto import is_non_dominated

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from spaces import Float, Space  # noqa: E402
from structure import (  # noqa: E402
    Edge,
    LearnConfig,
    NetworkConfig,
    Structure,
    StructuredConfig,
    StructuredSurrogate,
)
from tuner import FlatSurrogate, Tuner  # noqa: E402
from tuner.options import TunerOptions  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Problem:
    """A bi-objective function network: ``evaluate(x) -> (objectives, metrics)``."""

    name: str
    dim: int
    ref: tuple[float, ...]  # one entry per objective o1, o2, ...
    evaluate: Callable[[np.ndarray], tuple[dict[str, float], dict[str, float]]]
    true_edges: tuple[tuple[str, str], ...]  # over parameter names x0.. and metric names
    metrics: tuple[str, ...]


def _ackley(x: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    z = 4.0 * (x - 0.3)
    f1, f2, f3 = (
        float(np.mean(z**2)),
        float(np.mean(np.cos(2 * math.pi * z))),
        float(np.mean((z - 1) ** 2)),
    )
    o1 = 20 * math.exp(-0.2 * math.sqrt(f1)) + math.exp(f2) - 20 - math.e
    return {"o1": o1, "o2": -f3}, {"f1": f1, "f2": f2, "f3": f3}


def _alpine(x: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    z = 10.0 * x
    ys, y = {}, 1.0
    for k in range(6):
        y = (-1.0 if k == 0 else y) * math.sqrt(z[k]) * math.sin(z[k])
        ys[f"y{k + 1}"] = y
    g = float(np.mean((x - 0.3) ** 2))
    return {"o1": ys["y6"], "o2": -g}, {**{k: v for k, v in ys.items() if k != "y6"}, "g": g}


def _dropwave(x: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    z = 10.24 * (x - 0.35)
    y1 = float(np.linalg.norm(z))
    r = float(np.linalg.norm(z - 2.0)) / 5.0
    return {"o1": (1 + math.cos(12 * y1)) / (2 + 0.5 * y1**2), "o2": -r}, {"y1": y1, "r": r}


def _rosenbrock(x: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
    z = 4.0 * (x - 0.625)
    ys, y = {}, 0.0
    for k in range(4):
        y += -100.0 * (z[k + 1] - z[k] ** 2) ** 2 - (1.0 - z[k]) ** 2
        ys[f"y{k + 1}"] = float(y)
    g = float(np.mean((x - 0.3) ** 2))
    return {"o1": ys["y4"], "o2": -g}, {**{k: v for k, v in ys.items() if k != "y4"}, "g": g}


def _botorch_problem(name: str) -> Callable[[np.ndarray], tuple[dict[str, float], dict]]:
    """A negated (maximized) BoTorch multi-objective test problem on the unit cube."""

    from botorch.test_functions import multi_objective as mo

    f = getattr(mo, name)(negate=True)
    lo, hi = f.bounds[0], f.bounds[1]

    def evaluate(x: np.ndarray) -> tuple[dict[str, float], dict[str, float]]:
        X = lo + (hi - lo) * torch.as_tensor(x, dtype=torch.float64).unsqueeze(0)
        return {f"o{i + 1}": float(v) for i, v in enumerate(f(X)[0])}, {}

    return evaluate


def _px(d: int) -> list[str]:
    return [f"x{i}" for i in range(d)]


def _objectives(problem: Problem) -> tuple[str, ...]:
    return tuple(f"o{i + 1}" for i in range(len(problem.ref)))


PROBLEMS = {
    "ackley6": Problem(
        "ackley6", 6, (-7.0, -10.0), _ackley,
        tuple((p, m) for p in _px(6) for m in ("f1", "f2", "f3"))
        + (("f1", "o1"), ("f2", "o1"), ("f3", "o2")),
        ("f1", "f2", "f3"),
    ),
    "alpine2": Problem(
        "alpine2", 6, (0.0, -0.5), _alpine,
        tuple((f"x{k}", f"y{k + 1}") for k in range(5)) + tuple((f"y{k}", f"y{k + 1}") for k in range(1, 5))
        + (("x5", "o1"), ("y5", "o1")) + tuple((p, "g") for p in _px(6)) + (("g", "o2"),),
        ("y1", "y2", "y3", "y4", "y5", "g"),
    ),
    "dropwave": Problem(
        "dropwave", 2, (0.0, -2.0), _dropwave,
        (("x0", "y1"), ("x1", "y1"), ("y1", "o1"), ("x0", "r"), ("x1", "r"), ("r", "o2")),
        ("y1", "r"),
    ),
    "rosenbrock5": Problem(
        "rosenbrock5", 5, (-500.0, -0.5), _rosenbrock,
        (("x0", "y1"), ("x1", "y1")) + tuple((f"x{k}", f"y{k + 1}") for k in range(1, 3))
        + tuple((f"x{k + 1}", f"y{k + 1}") for k in range(1, 3))
        + tuple((f"y{k}", f"y{k + 1}") for k in range(1, 3))
        + (("x3", "o1"), ("x4", "o1"), ("y3", "o1")) + tuple((p, "g") for p in _px(5))
        + (("g", "o2"),),
        ("y1", "y2", "y3", "g"),
    ),
    "branincurrin": Problem(
        "branincurrin", 2, (-18.0, -6.0), _botorch_problem("BraninCurrin"), (), ()
    ),
    "vehiclesafety": Problem(
        "vehiclesafety", 5, (-1864.72022, -11.81993945, -0.2903999384),
        _botorch_problem("VehicleSafety"), (), (),
    ),
}  # fmt: skip


def nuisance(x: np.ndarray, k: int, seed: int, rng: np.random.Generator) -> dict[str, float]:
    """``k`` nuisance metrics: even indices pure noise, odd ones a fixed random smooth f(x)."""
    out = {}
    w = np.random.default_rng(seed + 1000).standard_normal((k, x.size))
    for i in range(k):
        out[f"nuis{i}"] = (
            float(rng.standard_normal()) if i % 2 == 0 else float(np.sin(3 * w[i] @ x))
        )
    return out


def true_structure(problem: Problem) -> Structure:
    return Structure(
        tuple(_px(problem.dim)), problem.metrics, _objectives(problem),
        tuple(Edge(s, t, 1.0, "required") for s, t in problem.true_edges),
    )  # fmt: skip


def make_surrogate(
    method: str, problem: Problem, quick: bool, overrides: Mapping[str, Any] | None = None
) -> Any:
    # Every GP under one iteration cap: 50 with --quick, else the tuner's default.
    fit = {"maxiter": 50 if quick else TunerOptions().fit_maxiter}
    flat = FlatSurrogate(fit)
    if method == "flat":
        return flat
    learn = LearnConfig(bootstrap=6 if quick else 12)
    network = NetworkConfig(64, 256, fit_options=fit)
    if method == "learned":
        config = StructuredConfig(learn=learn, network=network, **(overrides or {}))
        return StructuredSurrogate(config=config, flat=flat)
    config = StructuredConfig(selection=False, min_trials=4, learn=learn, network=network)
    return StructuredSurrogate(config=config, flat=flat, structure=true_structure(problem))


def hypervolume(Y: np.ndarray, ref: tuple[float, ...]) -> float:
    if len(Y) == 0:
        return 0.0
    Yt = torch.as_tensor(Y, dtype=torch.float64)
    front = Yt[is_non_dominated(Yt)]
    return float(Hypervolume(torch.tensor(ref, dtype=torch.float64)).compute(front))


def run_tuner(
    problem: Problem,
    method: str,
    seed: int,
    trials: int,
    k: int,
    quick: bool,
    overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    space = Space({p: Float(0.0, 1.0) for p in _px(problem.dim)})
    # The problems' optima sit near the center of the cube (the space's default): start from a
    # Sobol design instead, as the function-network papers do.
    options = (
        TunerOptions(
            num_restarts=4, raw_samples=128, maxiter=50, mc_samples=64, start_with_default=False
        )
        if quick
        else TunerOptions(start_with_default=False)
    )
    surrogate = make_surrogate(method, problem, quick, overrides)
    tuner = Tuner(
        space,
        dict.fromkeys(_objectives(problem), "maximize"),
        seed=seed,
        surrogate=surrogate,
        options=options,
    )
    rng = np.random.default_rng(seed)
    Y, times, models = [], [], []
    for _ in range(trials):
        t0 = time.perf_counter()
        (trial,) = tuner.ask(1)
        times.append(time.perf_counter() - t0)
        x = np.array([trial.config[p] for p in _px(problem.dim)])
        values, metrics = problem.evaluate(x)
        tuner.tell(trial.id, values, metrics={**metrics, **nuisance(x, k, seed, rng)})
        Y.append([values[o] for o in _objectives(problem)])
        models.append(
            surrogate.describe().get("model", "sobol") if hasattr(surrogate, "describe") else ""
        )
    return {"Y": Y, "times": times, "models": models, "final_describe": _compact(surrogate)}


def _compact(surrogate: Any) -> dict[str, Any]:
    info = surrogate.describe() if hasattr(surrogate, "describe") else {}
    return {k: info.get(k) for k in ("model", "reason", "scores", "edges") if k in info}


def run_ax(problem: Problem, seed: int, trials: int) -> dict[str, Any]:
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    client = Client(random_seed=seed)
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=p, parameter_type="float", bounds=(0.0, 1.0))
            for p in _px(problem.dim)
        ]
    )
    client.configure_optimization(objective=", ".join(_objectives(problem)))
    Y, times = [], []
    for _ in range(trials):
        t0 = time.perf_counter()
        ((index, params),) = client.get_next_trials(max_trials=1).items()
        times.append(time.perf_counter() - t0)
        values, _ = problem.evaluate(np.array([params[p] for p in _px(problem.dim)]))
        client.complete_trial(index, raw_data=values)
        Y.append([values[o] for o in _objectives(problem)])
    return {"Y": Y, "times": times, "models": [], "final_describe": {}}


def hv_curve(run: dict[str, Any], ref: tuple[float, ...], budget: int) -> list[float]:
    """Hypervolume of the run's observed objectives after each of its first `budget` trials."""
    return [hypervolume(np.array(run["Y"][: t + 1]), ref) for t in range(budget)]


def summarize(runs: list[dict[str, Any]], ref: tuple[float, ...], budget: int) -> dict[str, Any]:
    curves = np.array([hv_curve(r, ref, budget) for r in runs])
    return {
        "hv_median": float(np.median(curves[:, -1])),
        "hv_q25": float(np.quantile(curves[:, -1], 0.25)),
        "hv_q75": float(np.quantile(curves[:, -1], 0.75)),
        "curve_median": np.median(curves, axis=0).tolist(),
        "n_runs": len(runs),
        "proposal_s_mean": float(np.mean([np.mean(r["times"]) for r in runs])),
        "network_share": float(np.mean([m == "network" for r in runs for m in r["models"]]))
        if runs[0]["models"]
        else None,
    }


def trials_to_reach(curve: list[float], target: float) -> int | None:
    return next((t + 1 for t, v in enumerate(curve) if v >= target - 1e-12), None)


def environment() -> dict[str, Any]:
    import botorch
    import gpytorch

    versions = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "botorch": botorch.__version__,
        "gpytorch": gpytorch.__version__,
    }
    for mod in ("ax", "causallearn"):
        try:
            from importlib.metadata import version

            versions[mod] = version({"ax": "ax-platform", "causallearn": "causal-learn"}[mod])
        except Exception:  # noqa: BLE001 - optional peers
            versions[mod] = None
    return {
        "machine": platform.machine(), "processor": platform.processor(), "cpus": os.cpu_count(),
        "load_avg_start": os.getloadavg(), "platform": platform.platform(), "versions": versions,
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small budget: 2 problems, 20 trials")
    parser.add_argument(
        "--seeds", type=int, default=None, help="seeds per cell (default 10, quick 2)"
    )
    parser.add_argument(
        "--first-seed",
        type=int,
        default=0,
        help="seeds run are FIRST_SEED ... FIRST_SEED + SEEDS - 1 (more seeds for a cell: run "
        "the next ones into another file and --merge the two)",
    )
    parser.add_argument(
        "--trials", type=int, default=None, help="trials per run (default 50, quick 20)"
    )
    parser.add_argument(
        "--problems", default=None, help="comma-separated subset of " + ",".join(PROBLEMS)
    )
    parser.add_argument("--methods", default="flat,learned,true,ax")
    parser.add_argument(
        "--nuisance", default=None, help="comma-separated k values (default 0,10,30; quick 10)"
    )
    parser.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="FIELD=VALUE",
        help="numeric `StructuredConfig` fields of `learned`, e.g. tolerance=2 relearn_every=1",
    )
    parser.add_argument(
        "--ax-seeds", type=int, default=None, help="run Ax on the first N seeds only (slow)"
    )
    parser.add_argument(
        "--out",
        default=None,
        help="JSON path (default benchmarks/results/bench_structure[_quick].json)",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        default=None,
        help="combine the cells of these result files (runs split across processes) into --out",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.merge:
        return merge(
            [Path(p) for p in args.merge], Path(args.out or RESULTS / "bench_structure.json")
        )
    quick = args.quick
    overrides = _config_overrides(args.config)
    if args.first_seed < 0:
        raise SystemExit(f"--first-seed must be >= 0, got {args.first_seed}.")
    seeds = args.seeds or (2 if quick else 10)
    budget = args.trials or (20 if quick else 50)
    problems = (args.problems or ("ackley6,branincurrin" if quick else ",".join(PROBLEMS))).split(
        ","
    )
    ks = [int(k) for k in (args.nuisance or ("10" if quick else "0,10,30")).split(",")]
    methods = args.methods.split(",")
    out = (
        Path(args.out) if args.out else RESULTS / f"bench_structure{'_quick' if quick else ''}.json"
    )
    record: dict[str, Any] = {
        "benchmark": "bench_structure", "command": " ".join(["python", *sys.argv]),
        "started": datetime.now(UTC).isoformat(), "quick": quick,
        "seeds": list(range(args.first_seed, args.first_seed + seeds)), "budget": budget, "config": overrides, "environment": environment(), "cells": [],
    }  # fmt: skip
    for name in problems:
        problem = PROBLEMS[name]
        # Only `learned` reads the metrics: flat, true (a fixed DAG over the problem's own
        # metrics) and Ax give the same runs for every k, so they run once per problem.
        same_for_every_k: dict[str, dict[str, Any]] = {}
        # Without metrics of its own a problem is only worth running with nuisance metrics.
        for k in [k for k in ks if k > 0 or problem.metrics] or ks[:1]:
            cell: dict[str, Any] = {"problem": name, "nuisance": k, "methods": {}}
            for method in [m for m in methods if m != "true" or problem.metrics]:
                if method in same_for_every_k:
                    cell["methods"][method] = dict(same_for_every_k[method], reused=True)
                    continue
                runs = []
                n_seeds = min(seeds, args.ax_seeds or seeds) if method == "ax" else seeds
                for seed in range(args.first_seed, args.first_seed + n_seeds):
                    run = (
                        run_ax(problem, seed, budget)
                        if method == "ax"
                        else run_tuner(problem, method, seed, budget, k, quick, overrides)
                    )
                    run["seed"] = seed
                    runs.append(run)
                    print(f"{name} k={k} {method} seed={seed} hv={hypervolume(np.array(run['Y']), problem.ref):.4f} "
                          f"t={np.mean(run['times']):.2f}s", flush=True)  # fmt: skip
                cell["methods"][method] = {
                    "summary": summarize(runs, problem.ref, budget),
                    "runs": runs,
                }
                if method != "learned":
                    same_for_every_k[method] = cell["methods"][method]
            _add_ratios(cell, budget, problem.ref)
            record["cells"].append(cell)
            _write(out, record)
    record["finished"] = datetime.now(UTC).isoformat()
    _write(out, record)
    print_table(record)
    print(f"wrote {out}")
    return 0


def _config_overrides(pairs: list[str]) -> dict[str, Any]:
    """``["tolerance=2", ...]`` -> ``{"tolerance": 2.0}``, checked against `StructuredConfig`."""
    types = {n: t for n, t in get_type_hints(StructuredConfig).items() if t in (int, float)}
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or name not in types:
            raise SystemExit(
                f"--config takes FIELD=VALUE with FIELD one of {sorted(types)}, got {pair!r}."
            )
        try:
            number = float(value)
        except ValueError:
            raise SystemExit(f"--config {name} needs a number, got {value!r}.") from None
        out[name] = types[name](number)
    StructuredConfig(**out)  # its own checks (e.g. tolerance >= 0)
    return out


def merge(paths: list[Path], out: Path) -> int:
    """Combine result files (runs split across processes by problem, k, method or seeds) into
    one and print its table: cells of one problem and k are joined; a method found in several
    files keeps the runs of all of them, a later file's run replacing an earlier one's of the
    same seed; summaries and ratios to flat are recomputed."""
    records = [json.loads(p.read_text()) for p in paths]
    record = dict(records[0])
    if len({r["budget"] for r in records}) > 1:
        raise SystemExit(
            f"--merge needs files of one trial budget, got {[r['budget'] for r in records]}."
        )
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    for r in records:
        for cell in r["cells"]:
            key = (cell["problem"], cell["nuisance"])
            merged = cells.setdefault(key, {**cell, "methods": {}})["methods"]
            for method, m in cell["methods"].items():
                # Files before `--first-seed` hold the runs of their `seeds`, in order.
                runs = {run.get("seed", r["seeds"][i]): run for i, run in enumerate(m["runs"])}
                summary = m["summary"]
                if method in merged:  # runs of several files: summarized again below
                    runs = {run["seed"]: run for run in merged[method]["runs"]} | runs
                    summary = None
                merged[method] = {
                    **m,
                    "summary": summary,
                    "runs": [dict(run, seed=seed) for seed, run in sorted(runs.items())],
                }
    budget = record["budget"]
    for (name, _), cell in cells.items():
        for m in cell["methods"].values():
            if m["summary"] is None:
                m["summary"] = summarize(m["runs"], PROBLEMS[name].ref, budget)
        _add_ratios(cell, budget, PROBLEMS[name].ref)
    record["seeds"] = sorted(
        {run["seed"] for c in cells.values() for m in c["methods"].values() for run in m["runs"]}
    )
    record["cells"] = list(cells.values())
    # A merged file contributes the files it was merged from.
    record["merged_from"] = [
        source
        for p, r in zip(paths, records)
        for source in r.get("merged_from")
        or [{k: r.get(k) for k in ("command", "started", "finished")} | {"file": p.name}]
    ]
    _write(out, record)
    print_table(record)
    print(f"wrote {out}")
    return 0


def _add_ratios(cell: dict[str, Any], budget: int, ref: tuple[float, ...]) -> None:
    """Per method: trials its median curve needs to reach flat's final median HV; paired per
    seed (same initial design), the median trials to reach that seed's flat final HV (never:
    ``budget + 1``), the share of seeds reaching it within half the budget, and the median
    final-HV difference to flat with its two-sided Wilcoxon signed-rank p-value; time ratio."""
    methods = cell["methods"]
    if "flat" not in methods:
        return
    target = methods["flat"]["summary"]["hv_median"]
    flat_t = methods["flat"]["summary"]["proposal_s_mean"]
    curves = {
        name: {r["seed"]: hv_curve(r, ref, budget) for r in m["runs"]}
        for name, m in methods.items()
    }
    flat_final = {seed: c[-1] for seed, c in curves["flat"].items()}
    for name, m in methods.items():
        s = m["summary"]
        s["trials_to_flat_final"] = trials_to_reach(s["curve_median"], target)
        # Paired by seed (a method may have fewer seeds than flat, Ax for one).
        paired = [(c, flat_final[seed]) for seed, c in curves[name].items() if seed in flat_final]
        reach = [trials_to_reach(c, f) or budget + 1 for c, f in paired]
        final = [c[-1] for c, _ in paired]
        flat_paired = [f for _, f in paired]
        s["paired_reach"] = reach
        s["paired_reach_median"] = float(np.median(reach))
        s["paired_within_half"] = float(np.mean([r <= budget / 2 for r in reach]))
        s["paired_hv_diff_median"], s["paired_p"] = _paired_test(final, flat_paired)
        s["time_ratio_vs_flat"] = s["proposal_s_mean"] / flat_t if flat_t > 0 else None


def _paired_test(final: list[float], flat_final: list[float]) -> tuple[float, float]:
    """Median over seeds of (final HV - that seed's flat final HV), and the two-sided Wilcoxon
    signed-rank p-value of the differences (1.0 when all are zero: identical runs)."""
    from scipy.stats import wilcoxon

    diff = [a - b for a, b in zip(final, flat_final)]
    if not any(abs(d) > 1e-12 for d in diff):
        return 0.0, 1.0
    return float(np.median(diff)), float(wilcoxon(diff).pvalue)


def _write(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, path)


def print_table(record: dict[str, Any]) -> None:
    budget = record["budget"]
    print(f"\nhypervolume after {budget} trials: median [q25, q75] over n seeds")
    print(
        "reach: trials the median curve needs to reach flat's final median HV; paired: median "
        "over seeds of the trials to reach that seed's flat final HV (never = budget + 1); "
        "<=B/2: share of seeds doing so within half the budget; dHV: median paired final-HV "
        "difference to flat, p: its Wilcoxon signed-rank p-value"
    )
    header = (
        f"{'problem':14} {'k':>3} {'method':8} {'n':>3} {'HV median':>10} {'[q25, q75]':>22} "
        f"{'reach':>6} {'paired':>6} {'<=B/2':>6} {'dHV':>8} {'p':>6} {'t/iter s':>9} {'t ratio':>7} {'net %':>6}"
    )
    print(header)
    print("-" * len(header))
    for cell in record["cells"]:
        for method, m in cell["methods"].items():
            s = m["summary"]
            reach = s.get("trials_to_flat_final")
            share = s.get("network_share")
            paired = s.get("paired_reach_median")
            half = s.get("paired_within_half")
            dhv, p = s.get("paired_hv_diff_median"), s.get("paired_p")
            print(
                f"{cell['problem']:14} {cell['nuisance']:>3} {method:8} {s.get('n_runs', 0):>3} "
                f"{s['hv_median']:>10.4f} [{s['hv_q25']:>9.4f}, {s['hv_q75']:>9.4f}] "
                f"{reach if reach else '-':>6} {'-' if paired is None else f'{paired:.0f}':>6} "
                f"{'-' if half is None else f'{half:.1f}':>6} "
                f"{'-' if dhv is None else f'{dhv:+.3g}':>8} {'-' if p is None else f'{p:.3f}':>6} "
                f"{s['proposal_s_mean']:>9.2f} {s.get('time_ratio_vs_flat') or 0:>7.2f} "
                f"{'' if share is None else f'{100 * share:.0f}':>6}"
            )


if __name__ == "__main__":
    raise SystemExit(main())
