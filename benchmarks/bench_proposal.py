"""Proposal time of the structured surrogates against the flat GP, replayed on recorded trials.

A proposal's cost depends on the trials it is fitted to, not on how they were produced, so this
script replays stored traces of the rewrite study (the configurations, objective values and
run metrics of 40 trials of ``bench_structure --problems rewrite``; about 4 minutes to record
anew with ``--record``) instead of running searches: after each trial from the 10th (the Sobol
design before it costs nothing), every method proposes the next configuration from the trials
so far (`Tuner.sync` to the trace's first trials, then `Tuner.ask`, as a study's driver does),
and its CPU time is recorded (`time.process_time`, one torch thread). The methods take turns
trial by trial in one process, so they run on the same machine state.
Surrogates and optimizer settings are `bench_structure --quick`'s, so the ratios here are the
ones its rewrite runs report, in about a minute per method instead of an hour.

Two traces are stored (tuner seeds 0 and 5: the learned structure of the first stays shallow,
the second's grows a chain of 8 nodes); the table gives each and both pooled.

Usage: ``python -m benchmarks.bench_proposal [--methods flat,learned,hand] [--trace PATH ...]``;
``--record PATH [--seed S]`` records a new trace (the ``learned`` method's run).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from benchmarks._common import machine_info, write_results
from benchmarks._structure_problems import PROBLEMS
from benchmarks.bench_structure import QUICK_OPTIONS, _config_overrides, _method, make_surrogate
from tuner import Trial, TrialState, Tuner

RESULTS = Path(__file__).resolve().parent / "results"
#: Inputs, not results: stored rewrite-study trials the benchmark replays.
TRACES = [RESULTS.parent / "data" / f"trace_rewrite_seed{s}.json.gz" for s in (0, 5)]
FIRST = 10  # proposals before this trial come from the Sobol design


def record(path: Path, seed: int, trials: int) -> None:
    """Run the rewrite problem with the learned structure and store its trials as a trace."""
    problem = PROBLEMS["rewrite"]
    surrogate = make_surrogate("learned", problem, quick=True)
    tuner = Tuner(
        problem.space,
        dict(problem.objectives),
        seed=seed,
        surrogate=surrogate,
        options=QUICK_OPTIONS,
    )
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(trials):
        (trial,) = tuner.ask(1)
        values, metrics = problem.evaluate(trial.config, rng)
        tuner.tell(trial.id, values, metrics=metrics)
        rows.append({"config": trial.config, "values": values, "metrics": metrics})
    payload = {"problem": "rewrite", "method": "learned", "seed": seed, "trials": rows}
    with gzip.open(path, "wt") as f:
        json.dump({"machine": machine_info(), **payload}, f, default=float)
    print(f"recorded {trials} trials to {path}")


def replay(
    trace: dict[str, Any],
    specs: dict[str, str],
    seed: int,
    overrides: dict[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Per method (label -> method, `bench_structure --methods`), the CPU seconds of each
    proposal from trial `FIRST` on and the model it used, the methods taking turns trial by
    trial."""
    problem = PROBLEMS["rewrite"]
    tuners, surrogates = {}, {}
    for label, method in specs.items():
        surrogates[label] = make_surrogate(method, problem, True, (overrides or {}).get(label))
        tuners[label] = Tuner(
            problem.space, dict(problem.objectives), seed=seed, surrogate=surrogates[label],
            options=QUICK_OPTIONS,
        )  # fmt: skip
    records = [
        Trial(id=i, config=row["config"], state=TrialState.COMPLETE, values=row["values"],
              metrics=row["metrics"])
        for i, row in enumerate(trace["trials"])
    ]  # fmt: skip
    out: dict[str, Any] = {label: {"cpu_s": [], "model": []} for label in specs}
    for n in range(FIRST, len(records)):
        for label, tuner in tuners.items():
            tuner.sync(records[:n])  # the trace's trials so far (drops the last proposal)
            start = time.process_time()
            tuner.ask(1)
            out[label]["cpu_s"].append(round(time.process_time() - start, 4))
            fitted = tuner.last_fit
            out[label]["model"].append(fitted.description.get("model", "") if fitted else "")
    return out


def summarize(runs: dict[str, Any]) -> dict[str, Any]:
    """Per method: CPU per proposal (mean, last 10, max), its ratio to flat's (summed over the
    same proposals) and the share of proposals made through the network."""
    flat = runs.get("flat")
    out = {}
    for m, run in runs.items():
        cpu = np.asarray(run["cpu_s"])
        last = np.asarray(run["last10"], dtype=bool)
        row = {
            "cpu_s_mean": round(float(cpu.mean()), 4),
            "cpu_s_last10": round(float(cpu[last].mean()), 4),
            "cpu_s_max": round(float(cpu.max()), 4),
            "network_share": round(float(np.mean([x == "network" for x in run["model"]])), 2),
        }
        if flat is not None and m != "flat":
            base = np.asarray(flat["cpu_s"])
            row["ratio_vs_flat"] = round(float(cpu.sum() / base.sum()), 2)
            row["ratio_vs_flat_last10"] = round(float(cpu[last].sum() / base[last].sum()), 2)
        out[m] = row
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--methods",
        default="flat,learned",
        help="comma-separated flat, learned, guided, hand; LABEL=METHOD is a variant that takes "
        "--config (e.g. learned_r6=learned --config relearn_every=6)",
    )
    parser.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="FIELD=VALUE",
        help="numeric `StructuredConfig` fields of the LABEL=METHOD variants",
    )
    parser.add_argument(
        "--trace", nargs="+", default=[str(t) for t in TRACES], help="traces to replay (.json.gz)"
    )
    parser.add_argument("--record", default=None, help="record a new trace to this path")
    parser.add_argument("--seed", type=int, default=0, help="seed of a new record")
    parser.add_argument("--trials", type=int, default=40, help="trials of a new record")
    parser.add_argument(
        "--out", default=None, help="results JSON (default results/bench_proposal.json)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.record:
        record(Path(args.record), args.seed, args.trials)
        return 0
    # label -> method; unknown methods are refused
    specs = dict(_method(m.strip()) for m in args.methods.split(",") if m.strip())
    if {"true", "ax"} & set(specs.values()):
        raise SystemExit("The rewrite traces have no true DAG and Ax is not replayed here.")
    config = _config_overrides(args.config)
    overrides = {label: config for label, method in specs.items() if label != method}
    machine = machine_info()
    per_trace, pooled = {}, {label: {"cpu_s": [], "model": [], "last10": []} for label in specs}
    for path in args.trace:
        with gzip.open(path, "rt") as f:
            trace = json.load(f)
        # The tuners' seed is the recorded run's.
        runs = replay(trace, specs, int(trace["seed"]), overrides)
        for m, run in runs.items():
            k = len(run["cpu_s"])
            run["last10"] = [i >= k - 10 for i in range(k)]
            for key in pooled[m]:
                pooled[m][key] += run[key]
        per_trace[Path(path).name] = {"summary": summarize(runs), "runs": runs}
    summary = summarize(pooled)
    print(f"{'trace':<30} {'method':<8} {'cpu s/prop':>10} {'last 10':>8} {'max':>6} "
          f"{'x flat':>7} {'x flat last 10':>14} {'net %':>6}")  # fmt: skip
    rows = [(name, r["summary"]) for name, r in per_trace.items()] + [("all traces", summary)]
    for name, table in rows:
        for m, s in table.items():
            print(
                f"{name:<30} {m:<8} {s['cpu_s_mean']:>10.3f} {s['cpu_s_last10']:>8.3f} "
                f"{s['cpu_s_max']:>6.2f} {s.get('ratio_vs_flat', 1.0):>7.2f} "
                f"{s.get('ratio_vs_flat_last10', 1.0):>14.2f} {100 * s['network_share']:>5.0f}%"
            )
    payload = {
        "benchmark": "bench_proposal",
        "command": " ".join(["python -m benchmarks.bench_proposal", *(argv or sys.argv[1:])]),
        "first_timed_trial": FIRST,
        "options": "bench_structure --quick",
        "config": config,
        "summary": summary,
        "traces": per_trace,
    }
    out = Path(args.out) if args.out else RESULTS / "bench_proposal.json"
    print(f"saved {write_results(out, payload, machine=machine)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
