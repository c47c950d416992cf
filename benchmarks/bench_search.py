"""Benchmark of `rewrite.search`: stochastic Pareto search vs greedy vs best-first, and islands.

For each zoo model (12-layer GPT-2, BERT-base, a Llama-3-8B-shaped decoder cut to a few layers,
ResNet-50), every strategy runs with the same wall-time budget for each seed, with the verified
rule catalogue, the H100 cost model and objectives (latency, peak memory). Reported: final
hypervolume (costs normalized by the input's, reference point 1.1 per objective), best latency
reduction, steps per second. Then the stochastic search runs with 1 and 2 worker processes
(islands through a `ProcessPoolExecutor`) for the same budget, and steps per second are compared.

Fairness: the strategies share one verdict cache per model (as the workers of a host do), and
the order of strategies rotates with the seed, so no strategy always pays the cold cache.
Final whole-graph checks are off here (they run after the budget; the tests cover them).

Scale targets (issue 22), each run in a fresh process with a cold verdict cache (rule gate
included) and the default search config (verification on, final checks on), 300 steps, seed 0:
GPT-2 124M at seq 256 (target 10 s), the same with every check at the real shapes (the peer: how
verification ran before shape reduction), a 32-layer Llama-3-8B-shaped decoder (target 60 s
and peak RSS under 4 GB), and a sweep over Llama-shaped decoders of 1 to 72 layers (about 100
to 5,000 nodes) for seconds per step against node count, plotted to
``results/<name>_nodes.png`` (the file's ``targets`` run; the comparison is its ``comparison`` run). Wall time, CPU time and the load average are recorded per run.

Usage::

    python -m benchmarks.bench_search            # full: 4 models x 3 strategies x 3 seeds, targets
    python -m benchmarks.bench_search --quick    # small models, short budgets, 1 seed
    python -m benchmarks.bench_search --targets  # only the scale targets and the node sweep
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from benchmarks._common import RESULTS_DIR, write_results
from rewrite.optimize.api import search
from rewrite.optimize.config import SearchConfig

STRATEGIES = ("stochastic", "greedy", "best_first")
MODELS: dict[str, dict[str, Any]] = {
    "gpt2": {"name": "gpt2", "size": "full"},
    "bert": {"name": "bert", "size": "full"},
    "llama": {"name": "llama", "size": "full", "num_hidden_layers": 4},
    "resnet": {"name": "resnet", "size": "full"},
}


def build(spec: dict[str, Any], quick: bool) -> Any:
    """Build a zoo graph (small sizes in quick mode)."""
    from rewrite import zoo

    spec = dict(spec)
    name = spec.pop("name")
    if quick:
        return zoo.build(name)
    return zoo.build(name, **spec)


def one_run(graph: Any, strategy: str, seed: int, budget: float, cache: str, **kw: Any) -> dict:
    """One timed search; returns its figures."""
    cfg = SearchConfig(
        strategy=strategy,
        seed=seed,
        time_budget=budget,
        max_steps=10**12,
        epsilon=0.0,
        final_check=False,
        **kw.pop("config", {}),
    )
    res = search(graph, cfg, verify_cache=cache, **kw)
    m = res.metrics()
    return {
        "strategy": strategy,
        "seed": seed,
        "hypervolume": res.hypervolume,
        "latency_reduction": res.reduction("latency"),
        "peak_memory_reduction": res.reduction("peak_memory"),
        "steps": res.stats.steps,
        "steps_per_s": m["steps_per_s"],
        "wall_time": res.wall_time,
        "frontier": len(res.pareto),
        "stop": res.stop_reason,
        "time_verify": m["time.verify"],
        "time_match": m["time.match"],
    }


def compare(models: list[str], seeds: int, budget: float, quick: bool, tmp: str) -> dict:
    """Strategies side by side on each model."""
    out: dict[str, Any] = {}
    for model in models:
        t0 = time.perf_counter()
        graph = build(MODELS[model], quick)
        print(
            f"\n{model}: {len(graph)} nodes, built in {time.perf_counter() - t0:.1f} s", flush=True
        )
        cache = os.path.join(tmp, f"{model}.sqlite")
        runs = []
        for seed in range(seeds):
            order = STRATEGIES[seed % 3 :] + STRATEGIES[: seed % 3]
            for strategy in order:
                r = one_run(graph, strategy, seed, budget, cache)
                runs.append(r)
                print(
                    f"  seed {seed} {strategy:10s} hv={r['hypervolume']:.5f} "
                    f"lat-red={r['latency_reduction']:.4f} steps={r['steps']} "
                    f"({r['steps_per_s']:.1f}/s) verify={r['time_verify']:.1f}s stop={r['stop']}",
                    flush=True,
                )
        out[model] = {"nodes": len(graph), "runs": runs}
    return out


def scaling(model: str, budget: float, quick: bool, tmp: str, seed: int = 0) -> dict:
    """Steps per second of the stochastic search with 1 and 2 worker processes.

    A first untimed run (same seed) warms the shared verdict cache; then the runs go in the
    order 1, 2, 2, 1 processes so neither count systematically meets a colder cache or a quieter
    machine, and each count reports the mean of its two runs.
    """
    graph = build(MODELS[model], quick)
    cache = os.path.join(tmp, f"{model}-scaling.sqlite")
    one_run(graph, "stochastic", seed, budget, cache)  # warm the verdict cache
    runs: dict[int, list[dict]] = {1: [], 2: []}
    for workers in (1, 2, 2, 1):
        with ProcessPoolExecutor(max_workers=workers) as pool:
            r = one_run(
                graph,
                "stochastic",
                seed,
                budget,
                cache,
                executor=pool,
                config={"workers": workers, "island_steps": 25},
            )
        runs[workers].append(r)
        print(
            f"  {model} workers={workers}: {r['steps']} steps in {r['wall_time']:.1f} s = "
            f"{r['steps_per_s']:.1f} steps/s, hv={r['hypervolume']:.5f}",
            flush=True,
        )
    sps = {w: _mean([r["steps_per_s"] for r in rs]) for w, rs in runs.items()}
    return {"runs": runs, "steps_per_s": sps, "speedup": sps[2] / max(sps[1], 1e-9)}


TARGETS: dict[str, dict[str, Any]] = {
    "gpt2": {"model": {"name": "gpt2", "size": "full", "seq_len": 256}, "seconds": 10.0},
    "gpt2-real": {
        "model": {"name": "gpt2", "size": "full", "seq_len": 256},
        "real_shapes": True,
    },
    "llama": {"model": {"name": "llama", "size": "full"}, "seconds": 60.0, "rss_gb": 4.0},
}
SWEEP_LAYERS = (1, 2, 4, 8, 16, 32, 72)


def _real_shapes(make: Any) -> Any:
    """The peer: ``make_verifier`` whose verifiers check every region and graph at the real
    shapes (as verification ran before shape reduction)."""

    def make_real(*args: Any, **kw: Any) -> Any:
        v = make(*args, **kw)
        check = v.check
        v.check = lambda a, b, *, reduce=False, deadline=None: check(a, b, deadline=deadline)
        return v

    return make_real


def child(spec: dict[str, Any]) -> dict[str, Any]:
    """One target run in this (fresh) process: build the model, search with a cold cache."""
    import rewrite.optimize.api as api

    os.environ["REWRITE_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench_cold_")
    warnings.filterwarnings("ignore")
    load = os.getloadavg()
    t0 = time.perf_counter()
    graph = build(spec["model"], quick=False)
    built, rss_built = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if spec.get("real_shapes"):
        api.make_verifier = _real_shapes(api.make_verifier)  # type: ignore[assignment]
    c0, t0 = time.process_time(), time.perf_counter()
    res = search(graph, SearchConfig(max_steps=spec.get("steps", 300), seed=spec.get("seed", 0)))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    m = res.metrics()
    return {
        "nodes": len(graph),
        "build_s": built,
        "rss_build_mb": rss_built / 1024,
        "rss_peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "wall_s": wall,
        "cpu_s": cpu,
        "steps": res.stats.steps,
        "steps_per_s": res.stats.steps / wall,
        "time_verify": m["time.verify"],
        "time_cost": m["time.cost"],
        "time_match": m["time.match"],
        "hypervolume": res.hypervolume,
        "checked": [s.checked for s in res.pareto],
        "load_before": load,
        "load_after": os.getloadavg(),
    }


def run_child(spec: dict[str, Any]) -> dict[str, Any]:
    """`child` in a fresh interpreter (its peak RSS is its own)."""
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.bench_search", "--child", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parents[1],  # the repository root: `benchmarks` importable
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def targets(names: list[str]) -> dict[str, Any]:
    """The issue-22 targets (see the module docstring)."""
    out = {}
    for name in names:
        spec = TARGETS[name]
        r = out[name] = {**run_child(spec), **{k: v for k, v in spec.items() if k != "model"}}
        ok = r["wall_s"] <= spec.get("seconds", float("inf")) and r[
            "rss_peak_mb"
        ] <= 1024 * spec.get("rss_gb", float("inf"))
        r["meets_target"] = ok
        print(
            f"  {name}: {r['nodes']} nodes, 300 steps in {r['wall_s']:.1f} s wall / "
            f"{r['cpu_s']:.1f} s CPU (verify {r['time_verify']:.1f} s), peak RSS "
            f"{r['rss_peak_mb']:.0f} MB, checked {sorted(set(r['checked']))}, load "
            f"{r['load_before'][0]:.1f}->{r['load_after'][0]:.1f}"
            + ("" if "seconds" not in spec else f", target {'met' if ok else 'MISSED'}"),
            flush=True,
        )
    return out


def node_sweep(
    layers: tuple[int, ...] = SWEEP_LAYERS, known: dict[int, dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Seconds per step of the default search on Llama-shaped decoders of ``layers`` layers
    (``known``: runs already made, by layer count, e.g. the 32-layer target)."""
    runs = []
    for n in layers:
        spec = {"model": {"name": "llama", "size": "full", "num_hidden_layers": n}}
        r = {**((known or {}).get(n) or run_child(spec)), "layers": n}
        runs.append(r)
        print(
            f"  {n:3d} layers, {r['nodes']:5d} nodes: {1e3 * r['cpu_s'] / r['steps']:7.2f} ms CPU "
            f"per step, {r['steps_per_s']:6.1f} steps/s wall, load {r['load_before'][0]:.1f}",
            flush=True,
        )
    return runs


def plot_sweep(runs: list[dict[str, Any]], path: str) -> float:
    """Log-log plot of CPU seconds per step against nodes; returns the fitted exponent."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    n = np.array([r["nodes"] for r in runs], float)
    per = np.array([r["cpu_s"] / r["steps"] for r in runs])
    slope = float(np.polyfit(np.log(n), np.log(per), 1)[0])
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    ax.loglog(n, 1e3 * per, "o-", label=f"search (fit: n^{slope:.2f})")
    ax.loglog(n, 1e3 * per[0] * n / n[0], "k--", lw=0.8, label="linear in n")
    ax.set_xlabel("graph nodes (Llama-3-8B-shaped decoder, 1-72 layers)")
    ax.set_ylabel("CPU ms per step (300 steps)")
    ax.legend()
    ax.grid(True, which="both", lw=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return slope


def _mean(xs: list[float]) -> float:
    return statistics.fmean(xs) if xs else float("nan")


def summarize(results: dict) -> tuple[list[list[str]], int]:
    """Table rows and the number of models where stochastic HV >= best-first HV (mean)."""
    rows, wins = [], 0
    for model, data in results.items():
        by = {s: [r for r in data["runs"] if r["strategy"] == s] for s in STRATEGIES}
        hv = {s: _mean([r["hypervolume"] for r in by[s]]) for s in STRATEGIES}
        wins += hv["stochastic"] >= hv["best_first"] * (1 - 1e-9)
        for s in STRATEGIES:
            rs = by[s]
            sd = statistics.pstdev([r["hypervolume"] for r in rs]) if len(rs) > 1 else 0.0
            rows.append(
                [
                    model,
                    s,
                    f"{hv[s]:.5f} ± {sd:.5f}",
                    f"{100 * _mean([r['latency_reduction'] for r in rs]):.2f}%",
                    f"{100 * max(r['latency_reduction'] for r in rs):.2f}%",
                    f"{_mean([r['steps_per_s'] for r in rs]):.1f}",
                    f"{_mean([r['time_verify'] for r in rs]):.1f}",
                ]
            )
    return rows, wins


def print_table(rows: list[list[str]], head: list[str]) -> None:
    """Print an aligned text table."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


def main_targets(name: str) -> None:
    """Run the scale targets and the node sweep; print and save them."""
    load = os.getloadavg()
    print(f"scale targets, load average {load[0]:.1f} on {os.cpu_count()} CPUs", flush=True)
    res = targets(list(TARGETS))
    ratio = res["gpt2-real"]["wall_s"] / res["gpt2"]["wall_s"]
    print(f"  gpt2: real-shape checks / reduced checks wall time: {ratio:.1f}x", flush=True)
    print("node sweep:", flush=True)
    sweep = node_sweep(known={32: res["llama"]})  # llama-full has 32 layers
    png = str(RESULTS_DIR / f"{name}_nodes.png")  # the plot of the file's "targets" run
    slope = plot_sweep(sweep, png)
    print(f"  CPU time per step grows as n^{slope:.2f} (target: <= 1); plot: {png}")
    path = write_results(
        name,
        {
            "load_average": load,
            "targets": res,
            "real_over_reduced": ratio,
            "sweep": sweep,
            "sweep_exponent": slope,
            "config": "SearchConfig(max_steps=300, seed=0)",
        },
        run="targets",
    )
    print(f"results: {path}")


def main() -> None:
    """Run the benchmark (see the module docstring)."""
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        print(json.dumps(child(json.loads(sys.argv[2]))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small models, short budgets, 1 seed")
    ap.add_argument("--budget", type=float, default=None, help="seconds per run")
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--parallel-model", default="gpt2")
    ap.add_argument("--parallel-budget", type=float, default=None)
    ap.add_argument("--no-scaling", action="store_true", help="skip the 1 vs 2 process runs")
    ap.add_argument("--name", default=None, help="results file name (benchmarks/results/)")
    ap.add_argument("--targets", action="store_true", help="only the scale targets and sweep")
    args = ap.parse_args()
    if args.targets:
        main_targets(args.name or "bench_search")
        return
    budget = args.budget or (3.0 if args.quick else 40.0)
    seeds = args.seeds or (1 if args.quick else 3)
    pbudget = args.parallel_budget or (6.0 if args.quick else 40.0)
    models = [m for m in args.models.split(",") if m]
    warnings.filterwarnings("ignore")
    load = os.getloadavg()
    print(
        f"budget {budget} s per run, {seeds} seed(s), load average {load[0]:.1f} "
        f"on {os.cpu_count()} CPUs",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench_search_") as tmp:
        results = compare(models, seeds, budget, args.quick, tmp)
        scale: dict[Any, Any] = {"speedup": float("nan")}
        if not args.no_scaling:
            print(f"\nisland scaling on {args.parallel_model} ({pbudget} s each):", flush=True)
            scale = scaling(args.parallel_model, pbudget, args.quick, tmp)
    rows, wins = summarize(results)
    print()
    if rows:
        print_table(
            rows,
            [
                "model",
                "strategy",
                "hypervolume",
                "lat-red mean",
                "lat-red best",
                "steps/s",
                "verify s",
            ],
        )
    print(
        f"\nstochastic >= best-first (mean hypervolume) on {wins} of {len(results)} models "
        "(target: 3 of 4)"
    )
    print(f"2 processes / 1 process steps per second: {scale['speedup']:.2f}x (target 1.7x)")
    path = write_results(
        args.name or ("bench_search_quick" if args.quick else "bench_search"),
        {
            "budget_s": budget,
            "seeds": list(range(seeds)),
            "load_average": load,
            "models": {m: dict(MODELS[m], quick=args.quick) for m in models},
            "results": results,
            "scaling": {str(k): v for k, v in scale.items()},
            "stochastic_ge_best_first": wins,
        },
        run="comparison",
    )
    print(f"results: {path}")
    if not args.quick:
        main_targets("bench_search")


if __name__ == "__main__":
    main()
