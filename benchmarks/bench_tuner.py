"""Multi-objective tuner versus its peers, side by side in one run (issue 6).

Methods (all minimize both objectives, one trial at a time):
    tuner        this project's `tuner.Tuner` with its defaults (Sobol design, batched
                 SingleTaskGP, qLogNEHVI, inferred reference point)
    ax           Ax 1.x `Client` with its default generation strategy (center + Sobol + MBM)
    optuna_tpe   Optuna `TPESampler(seed=...)` (multi-objective TPE, default settings)
    optuna_nsga2 Optuna `NSGAIISampler(population_size=10, seed=...)`: the default population of
                 50 would be pure random sampling within a 40-trial budget
    sobol        scrambled Sobol sample of the space (`Space.sample`)

Problems:
    branincurrin BoTorch `BraninCurrin` (d=2), reference point (18, 6), max HV 59.36
    dtlz2        BoTorch `DTLZ2(dim=6, num_objectives=2)`, reference point (1.1, 1.1)
    simplex16    16 unit-cube columns: x in [0, 1]^8 and an 8-way simplex block w (7 degrees of
                 freedom), rule priors in miniature.
                 f1 = |w - p|^2 (1 + mean x) + mean((x - 0.2)^2)
                 f2 = |w - r|^2 (2 - mean x) + mean((x - 0.8)^2)
                 p = (.4, .3, .1, .1, .05, .05, 0, 0), r = reversed p; reference point (1.5, 1.5).
                 Peers without simplex support see 7 free weights with ``sum <= 1`` and
                 w7 = 1 - sum (Ax), or 8 uniforms mapped to the simplex by -log(u) / sum (Optuna).

Measured: dominated hypervolume of the first 10, 20 and 40 trials; median and interquartile range
over seeds. Proposal wall time (one `ask(1)` / `get_next_trials(1)`, after n random completed
trials) at n = 25, 50, 100, 200, this tuner versus Ax, with the ratio. torch runs on one thread
for every method (``torch.set_num_threads(1)``).

Usage:
    python -m benchmarks.bench_tuner --quick           # 1 seed, budgets 10 20, n = 25 50
    python -m benchmarks.bench_tuner                   # 5 seeds, budgets 10 20 40, all n
    python -m benchmarks.bench_tuner --summarize benchmarks/results/bench_tuner.jsonl

Every finished run is appended to a journal, ``benchmarks/results/.journal/<name>.jsonl`` (not
committed), as it completes, so a run cut short still leaves its data; the final table and every
record go to ``benchmarks/results/<name>.json`` and the journal is removed. ``--summarize``
re-tabulates journals or earlier results files together (e.g. runs made in parallel, one seed
each). ``--tuner-options '{"num_restarts": 5}'`` runs this tuner with other `TunerOptions`
(recorded with the results).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from botorch.test_functions.multi_objective import DTLZ2, BraninCurrin
from botorch.utils.multi_objective.box_decompositions.dominated import (
    DominatedPartitioning,
)

from benchmarks._common import (
    RESULTS_DIR,
    machine_info,
    paired_test,
    round_floats,
    write_results,
)
from spaces import Float, Simplex, Space
from tuner import Trial, TrialState, Tuner, TunerOptions

METHODS = ("tuner", "ax", "optuna_tpe", "optuna_nsga2", "sobol")
OBJECTIVES = {"f1": "minimize", "f2": "minimize"}
_P = (0.4, 0.3, 0.1, 0.1, 0.05, 0.05, 0.0, 0.0)


# ---------------------------------------------------------------------------- problems
@dataclass(frozen=True)
class Problem:
    """A benchmark problem: a space, a vectorized objective and a reference point."""

    name: str
    space: Space
    n_x: int  # plain [0, 1] columns named x0..x{n_x-1}
    n_w: int  # simplex parts w0..w{n_w-1} (0: none)
    f: Callable[[torch.Tensor, torch.Tensor | None], torch.Tensor]
    ref_point: tuple[float, float]

    def evaluate(self, x: Sequence[float], w: Sequence[float] | None) -> dict[str, float]:
        X = torch.tensor([list(x)], dtype=torch.float64)
        W = None if w is None else torch.tensor([list(w)], dtype=torch.float64)
        y = self.f(X, W)[0]
        return {"f1": float(y[0]), "f2": float(y[1])}

    def split(self, config: dict[str, Any]) -> tuple[list[float], list[float] | None]:
        x = [float(config[f"x{i}"]) for i in range(self.n_x)]
        w = [float(config["w"][f"w{k}"]) for k in range(self.n_w)] if self.n_w else None
        return x, w


def _botorch_problem(name: str, fn: Any, dim: int) -> Problem:
    space = Space({f"x{i}": Float(0.0, 1.0) for i in range(dim)})
    return Problem(name, space, dim, 0, lambda X, W: fn(X), tuple(fn.ref_point.tolist()))


def _simplex16(X: torch.Tensor, W: torch.Tensor | None) -> torch.Tensor:
    assert W is not None
    p = torch.tensor(_P, dtype=torch.float64)
    r = p.flip(0)
    m = X.mean(-1)
    f1 = ((W - p) ** 2).sum(-1) * (1 + m) + ((X - 0.2) ** 2).mean(-1)
    f2 = ((W - r) ** 2).sum(-1) * (2 - m) + ((X - 0.8) ** 2).mean(-1)
    return torch.stack([f1, f2], -1)


def make_problems() -> dict[str, Problem]:
    """The three benchmark problems by name."""
    params: dict[str, Any] = {f"x{i}": Float(0.0, 1.0) for i in range(8)}
    params["w"] = Simplex([f"w{k}" for k in range(8)])
    return {
        "branincurrin": _botorch_problem("branincurrin", BraninCurrin(), 2),
        "dtlz2": _botorch_problem("dtlz2", DTLZ2(dim=6, num_objectives=2), 6),
        "simplex16": Problem("simplex16", Space(params), 8, 8, _simplex16, (1.5, 1.5)),
    }


def hypervolume(problem: Problem, Y: Sequence[dict[str, float]]) -> float:
    """Dominated hypervolume of minimized outcomes w.r.t. the problem's reference point."""
    if not Y:
        return 0.0
    T = -torch.tensor([[y["f1"], y["f2"]] for y in Y], dtype=torch.float64)
    ref = -torch.tensor(problem.ref_point, dtype=torch.float64)
    return float(DominatedPartitioning(ref_point=ref, Y=T).compute_hypervolume())


# ---------------------------------------------------------------------------- methods
JOURNAL_DIR = RESULTS_DIR / ".journal"
TUNER_OPTIONS = TunerOptions()  # replaced by --tuner-options


def run_tuner(problem: Problem, budget: int, seed: int) -> list[dict[str, float]]:
    tuner = Tuner(problem.space, OBJECTIVES, seed=seed, options=TUNER_OPTIONS)
    out = []
    for _ in range(budget):
        (trial,) = tuner.ask(1)
        y = problem.evaluate(*problem.split(trial.config))
        tuner.tell(trial.id, y)
        out.append(y)
    return out


def run_sobol(problem: Problem, budget: int, seed: int) -> list[dict[str, float]]:
    return [problem.evaluate(*problem.split(c)) for c in problem.space.sample(budget, seed)]


def _ax_client(problem: Problem, seed: int) -> Any:
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    n_free = max(problem.n_w - 1, 0)
    params = [
        RangeParameterConfig(name=f"x{i}", parameter_type="float", bounds=(0.0, 1.0))
        for i in range(problem.n_x)
    ] + [
        RangeParameterConfig(name=f"w{k}", parameter_type="float", bounds=(0.0, 1.0))
        for k in range(n_free)
    ]
    constraints = [" + ".join(f"w{k}" for k in range(n_free)) + " <= 1.0"] if n_free else None
    for name in list(logging.Logger.manager.loggerDict):  # Ax sets INFO on each of its loggers
        if name.startswith("ax"):
            logging.getLogger(name).setLevel(logging.ERROR)
    client = Client(random_seed=seed)
    client.configure_experiment(parameters=params, parameter_constraints=constraints)
    client.configure_optimization(objective="-f1, -f2")
    return client


def _ax_split(problem: Problem, params: dict[str, Any]) -> tuple[list[float], list[float] | None]:
    x = [float(params[f"x{i}"]) for i in range(problem.n_x)]
    if not problem.n_w:
        return x, None
    free = [max(float(params[f"w{k}"]), 0.0) for k in range(problem.n_w - 1)]
    w = free + [max(1.0 - sum(free), 0.0)]
    total = sum(w)
    return x, [v / total for v in w]


def run_ax(problem: Problem, budget: int, seed: int) -> list[dict[str, float]]:
    client = _ax_client(problem, seed)
    out: list[dict[str, float]] = []
    while len(out) < budget:
        for idx, params in client.get_next_trials(max_trials=1).items():
            y = problem.evaluate(*_ax_split(problem, params))
            client.complete_trial(idx, raw_data=y)
            out.append(y)
    return out[:budget]


def _optuna_run(problem: Problem, budget: int, sampler: Any) -> list[dict[str, float]]:
    import optuna

    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    out: list[dict[str, float]] = []

    def objective(trial: Any) -> tuple[float, float]:
        x = [trial.suggest_float(f"x{i}", 0.0, 1.0) for i in range(problem.n_x)]
        w = None
        if problem.n_w:
            e = [-math.log(max(trial.suggest_float(f"u{k}", 0.0, 1.0), 1e-12)) for k in range(8)]
            w = [v / sum(e) for v in e] if sum(e) > 0 else [1.0 / problem.n_w] * problem.n_w
        y = problem.evaluate(x, w)
        out.append(y)
        return y["f1"], y["f2"]

    study.optimize(objective, n_trials=budget)
    return out


def run_optuna_tpe(problem: Problem, budget: int, seed: int) -> list[dict[str, float]]:
    import optuna

    return _optuna_run(problem, budget, optuna.samplers.TPESampler(seed=seed))


def run_optuna_nsga2(problem: Problem, budget: int, seed: int) -> list[dict[str, float]]:
    import optuna

    return _optuna_run(
        problem, budget, optuna.samplers.NSGAIISampler(population_size=10, seed=seed)
    )


RUNNERS: dict[str, Callable[[Problem, int, int], list[dict[str, float]]]] = {
    "tuner": run_tuner,
    "ax": run_ax,
    "optuna_tpe": run_optuna_tpe,
    "optuna_nsga2": run_optuna_nsga2,
    "sobol": run_sobol,
}


# ---------------------------------------------------------------------------- timing
def _random_data(problem: Problem, n: int, seed: int) -> list[tuple[dict[str, Any], dict]]:
    configs = problem.space.sample(n, 10_000 + seed)
    return [(c, problem.evaluate(*problem.split(c))) for c in configs]


def time_tuner(
    problem: Problem, data: list[tuple[dict[str, Any], dict]], seed: int
) -> tuple[float, float]:
    trials = [
        Trial(id=i, config=c, state=TrialState.COMPLETE, values=y) for i, (c, y) in enumerate(data)
    ]
    tuner = Tuner(problem.space, OBJECTIVES, seed=seed, trials=trials, options=TUNER_OPTIONS)
    t0, c0 = time.perf_counter(), time.process_time()
    tuner.ask(1)
    return time.perf_counter() - t0, time.process_time() - c0


def time_ax(
    problem: Problem, data: list[tuple[dict[str, Any], dict]], seed: int
) -> tuple[float, float]:
    """Ax's own initial trials (it only leaves Sobol for trials it generated), then the data."""
    client = _ax_client(problem, seed)
    n_own = 0
    while True:  # Ax's own center + Sobol trials, then its first model trial
        for idx, params in client.get_next_trials(max_trials=1).items():
            client.complete_trial(idx, raw_data=problem.evaluate(*_ax_split(problem, params)))
            n_own += 1
        node = client._generation_strategy.current_node_name  # noqa: SLF001
        if node not in ("Sobol", "CenterOfSearchSpace") or n_own >= len(data):
            break
    for config, y in data[n_own:]:
        x, w = problem.split(config)
        params = {f"x{i}": v for i, v in enumerate(x)}
        if w is not None:
            free = w[: problem.n_w - 1]
            shrink = min(1.0, (1.0 - 1e-9) / max(sum(free), 1e-12))  # keep sum <= 1 exactly
            params.update({f"w{k}": v * shrink for k, v in enumerate(free)})
        client.complete_trial(client.attach_trial(params), raw_data=y)
    t0, c0 = time.perf_counter(), time.process_time()
    client.get_next_trials(max_trials=1)
    return time.perf_counter() - t0, time.process_time() - c0


# ---------------------------------------------------------------------------- driver
def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(record, default=str) + "\n")
        fh.flush()


def read_records(path: Path) -> list[dict[str, Any]]:
    """Run records of a journal (one JSON object per line) or of a results file."""
    if path.suffix == ".json":
        return [r for r in json.loads(path.read_text())["records"] if r.get("kind") != "meta"]
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    return [r for r in rows if r.get("kind") != "meta"]


def run_quality(args: argparse.Namespace, problems: dict[str, Problem], log: Path) -> None:
    budget = max(args.budgets)
    for seed in args.seeds:  # seed outermost: a run cut short still covers every problem
        for name in args.problems:
            problem = problems[name]
            for method in args.methods:
                t0 = time.perf_counter()
                try:
                    Y = RUNNERS[method](problem, budget, seed)
                    hv = {str(b): hypervolume(problem, Y[:b]) for b in args.budgets}
                    rec = {
                        "kind": "quality",
                        "problem": name,
                        "method": method,
                        "seed": seed,
                        "hv": hv,
                        "seconds": time.perf_counter() - t0,
                    }
                except Exception as err:  # a peer's crash is a result, not the end of the run
                    rec = {
                        "kind": "quality",
                        "problem": name,
                        "method": method,
                        "seed": seed,
                        "error": f"{type(err).__name__}: {err}",
                    }
                _append(log, rec)
                print(
                    f"  {name:12s} {method:12s} seed {seed}: "
                    f"{rec.get('hv', rec.get('error'))} ({rec.get('seconds', 0):.0f} s)",
                    flush=True,
                )


def run_timing(args: argparse.Namespace, problems: dict[str, Problem], log: Path) -> None:
    """Interleave the tuner and Ax on the same random data so both see the same load."""
    for name in args.timing_problems:
        problem = problems[name]
        warm = _random_data(problem, 12, 99)  # untimed: lazy imports and first-call set-up
        time_tuner(problem, warm, 0)
        time_ax(problem, warm, 0)
        for n in args.timing_n:
            for rep in range(args.timing_reps):
                data = _random_data(problem, n, rep)
                for method, fn in (("tuner", time_tuner), ("ax", time_ax)):
                    rec: dict[str, Any] = {"kind": "timing", "problem": name, "method": method}
                    rec.update(n=n, rep=rep)
                    try:
                        rec["seconds"], rec["cpu_seconds"] = fn(problem, data, rep)
                    except Exception as err:
                        rec["error"] = f"{type(err).__name__}: {err}"
                    _append(log, rec)
                    shown = (
                        rec.get("error") or f"{rec['seconds']:.2f} s ({rec['cpu_seconds']:.2f} cpu)"
                    )
                    print(f"  timing {name} n={n} {method}: {shown}", flush=True)


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {"median": math.nan, "q25": math.nan, "q75": math.nan, "n": 0}
    if len(values) == 1:
        return {"median": values[0], "q25": values[0], "q75": values[0], "n": 1}
    q = statistics.quantiles(values, n=4, method="inclusive")
    return {"median": statistics.median(values), "q25": q[0], "q75": q[2], "n": len(values)}


def summarize(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and IQR per (problem, method, budget); timing medians and tuner/Ax ratios."""
    quality: dict[str, Any] = {}
    for r in (r for r in records if r["kind"] == "quality" and "hv" in r):
        for b, hv in r["hv"].items():
            quality.setdefault(r["problem"], {}).setdefault(r["method"], {}).setdefault(b, [])
            quality[r["problem"]][r["method"]][b].append(hv)
    quality = {
        p: {m: {b: _stats(v) for b, v in by_b.items()} for m, by_b in by_m.items()}
        for p, by_m in quality.items()
    }
    timing: dict[str, Any] = {}
    for r in (r for r in records if r["kind"] == "timing" and "seconds" in r):
        slot = timing.setdefault(r["problem"], {}).setdefault(str(r["n"]), {})
        slot.setdefault(r["method"], []).append(r["seconds"])
        slot.setdefault(r["method"] + "_cpu", []).append(r.get("cpu_seconds", math.nan))
    for by_n in timing.values():
        for slot in by_n.values():
            for m in list(slot):
                slot[m] = _stats(slot[m])
            for suffix in ("", "_cpu"):
                t, a = slot.get("tuner" + suffix), slot.get("ax" + suffix)
                if t and a and a["median"] > 0:
                    slot["ratio_tuner_over_ax" + suffix] = t["median"] / a["median"]
    errors = [r for r in records if "error" in r]
    return {"quality": quality, "paired": paired(records), "timing": timing, "errors": errors}


def paired(records: list[dict[str, Any]]) -> dict[str, Any]:
    """This tuner against each peer, seed by seed, per (problem, budget): the seeds both ran,
    on how many the tuner is ahead, the median difference and the Wilcoxon p-value."""
    hv: dict[tuple[str, str], dict[int, dict[str, float]]] = {}
    for r in (r for r in records if r["kind"] == "quality" and "hv" in r):
        hv.setdefault((r["problem"], r["method"]), {})[r["seed"]] = r["hv"]
    out: dict[str, Any] = {}
    for (problem, peer), theirs in sorted(hv.items()):
        mine = hv.get((problem, "tuner"), {})
        seeds = sorted(set(mine) & set(theirs))
        if peer == "tuner" or len(seeds) < 2:
            continue
        for b in sorted(set(mine[seeds[0]]) & set(theirs[seeds[0]]), key=int):
            a, c = [mine[s][b] for s in seeds], [theirs[s][b] for s in seeds]
            diff, p = paired_test(a, c)
            out.setdefault(problem, {}).setdefault(peer, {})[b] = {
                "n": len(seeds),
                "ahead": sum(x > y for x, y in zip(a, c, strict=True)),
                "median_diff": diff,
                "p": p,
            }
    return out


def print_tables(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """Print the hypervolume and timing tables; return CSV rows."""
    rows: list[dict[str, Any]] = []
    print("\nDominated hypervolume, median [q25, q75] over seeds (higher is better)")
    for p, by_m in summary["quality"].items():
        budgets = sorted({b for by_b in by_m.values() for b in by_b}, key=int)
        w = max(13, *(len(m) + 3 for m in by_m))  # "vs " + the longest method name
        print(f"\n{p}\n  {'method':{w}s}" + "".join(f"{'n=' + b:>28s}" for b in budgets))
        for m, by_b in by_m.items():
            cells = []
            for b in budgets:
                s = by_b.get(b)
                if s is None:
                    cells.append(f"{'-':>28s}")
                    continue
                cells.append(f"{s['median']:10.4f} [{s['q25']:7.4f},{s['q75']:7.4f}]".rjust(28))
                rows.append({"table": "hypervolume", "problem": p, "method": m, "budget": b, **s})
            print(f"  {m:{w}s}" + "".join(cells))
        for peer in ("ax", "optuna_tpe", "optuna_nsga2", "sobol"):
            if "tuner" in by_m and peer in by_m:
                ratios = [
                    by_m["tuner"][b]["median"] / by_m[peer][b]["median"]
                    if b in by_m[peer] and by_m[peer][b]["median"] > 0
                    else math.nan
                    for b in budgets
                    if b in by_m["tuner"]
                ]
                print(f"  {'tuner/' + peer:{w}s}" + "".join(f"{r:28.3f}" for r in ratios))
        for peer, by_b in summary.get("paired", {}).get(p, {}).items():
            cells = [
                f"ahead {c['ahead']}/{c['n']}, p {c['p']:.2f}".rjust(28) if c else f"{'-':>28s}"
                for c in (by_b.get(b) for b in budgets)
            ]
            print(f"  {'vs ' + peer:{w}s}" + "".join(cells) + "  (paired by seed, Wilcoxon)")
    print("\nProposal time per iteration, median seconds: wall (cpu); lower is better")
    for p, by_n in summary["timing"].items():
        print(f"\n{p}\n  {'n':>5s} {'tuner':>16s} {'ax':>16s} {'tuner/ax':>16s}")
        for n, slot in sorted(by_n.items(), key=lambda kv: int(kv[0])):
            cells = []
            for key in ("tuner", "ax", "ratio_tuner_over_ax"):
                wall, cpu = slot.get(key, math.nan), slot.get(key + "_cpu", math.nan)
                wall = wall["median"] if isinstance(wall, dict) else wall
                cpu = cpu["median"] if isinstance(cpu, dict) else cpu
                cells.append(f"{wall:8.2f} ({cpu:5.2f})")
            print(f"  {n:>5s} " + " ".join(cells))
            for m in ("tuner", "ax", "tuner_cpu", "ax_cpu"):
                if m in slot:
                    rows.append(
                        {"table": "timing", "problem": p, "method": m, "budget": n, **slot[m]}
                    )
    if summary["errors"]:
        print(f"\n{len(summary['errors'])} runs failed; see 'errors' in the JSON.")
    return rows


def write_all(
    name: str,
    args: argparse.Namespace,
    records: list[dict[str, Any]],
    machine: dict[str, Any] | None = None,
) -> None:
    """Tabulate `records` and save them (`machine`: the run's, taken at its start)."""
    summary = summarize(records)
    rows = print_tables(summary)
    path = write_results(
        name,
        round_floats(
            {
                "args": vars(args),
                "seeds": args.seeds,
                "summary": summary,
                "table": rows,
                "records": records,
            }
        ),
        machine=machine,
    )
    print(f"\nwrote {path}")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="1 seed, budgets 10 20, n = 25 50")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 2 3 4")
    ap.add_argument("--budgets", type=int, nargs="+", default=None, help="default 10 20 40")
    ap.add_argument("--problems", nargs="+", default=["branincurrin", "dtlz2", "simplex16"])
    ap.add_argument("--methods", nargs="+", default=list(METHODS), choices=METHODS)
    ap.add_argument("--timing-problems", nargs="*", default=None, help="default dtlz2 simplex16")
    ap.add_argument("--timing-n", type=int, nargs="+", default=None, help="default 25 50 100 200")
    ap.add_argument("--timing-reps", type=int, default=None, help="default 2 (quick: 1)")
    ap.add_argument("--skip-quality", action="store_true")
    ap.add_argument("--name", default=None, help="result file stem (default bench_tuner[_quick])")
    ap.add_argument(
        "--summarize",
        type=Path,
        nargs="+",
        default=None,
        help="only tabulate these journals (.jsonl) or results files (.json)",
    )
    ap.add_argument(
        "--tuner-options",
        type=json.loads,
        default={},
        help="TunerOptions fields for this tuner, as JSON (default: its defaults)",
    )
    args = ap.parse_args(argv)
    q = args.quick
    args.seeds = args.seeds or ([0] if q else [0, 1, 2, 3, 4])
    args.budgets = sorted(args.budgets or ([10, 20] if q else [10, 20, 40]))
    args.timing_problems = (
        args.timing_problems
        if args.timing_problems is not None
        else (["dtlz2"] if q else ["dtlz2", "simplex16"])
    )
    args.timing_n = args.timing_n or ([25, 50] if q else [25, 50, 100, 200])
    args.timing_reps = args.timing_reps or (1 if q else 2)
    args.name = args.name or ("bench_tuner_quick" if q else "bench_tuner")
    return args


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore")
    logging.getLogger("ax").setLevel(logging.ERROR)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    global TUNER_OPTIONS  # noqa: PLW0603 - one run, one set of options
    TUNER_OPTIONS = TunerOptions.from_dict(args.tuner_options)
    if args.summarize is not None:
        write_all(args.name, args, [r for f in args.summarize for r in read_records(f)])
        return
    log = JOURNAL_DIR / f"{args.name}.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    machine = machine_info()
    _append(log, {"kind": "meta", "machine": machine, "args": vars(args)})
    problems = make_problems()
    if not args.skip_quality:
        run_quality(args, problems, log)
    run_timing(args, problems, log)
    write_all(args.name, args, read_records(log), machine)
    log.unlink()


if __name__ == "__main__":
    main()
