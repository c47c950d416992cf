"""Structured surrogate versus flat qLogNEHVI and Ax on function-network problems.

Problems (`_structure_problems.PROBLEMS`): the function networks of Astudillo & Frazier
(``ackley6``, ``alpine2``, ``dropwave``, ``rosenbrock5``), unstructured BoTorch problems
(``branincurrin``, ``vehiclesafety``) and a search-shaped problem (``search8``: search knobs, a
simplex of 8 rule priors, per-rule counters and noisy search metrics, a time-like objective).
``search8x4`` is search8 measured as the mean of 4 runs that are reported too; ``search40`` is
search8 with 40 rules (44 columns; run only when named). ``rewrite`` is the
built-in rewrite study itself (real searches on four model graphs, every run metric reported; no
true DAG, a hand-written structure), ``rewrite-rules`` the same with one prior per rule; they run
only when named in ``--problems``.

Each problem also reports ``k`` nuisance metric columns (``--nuisance``): half independent noise,
half random smooth functions of ``x`` that do not reach an objective.

Methods: ``flat`` (the tuner's default `FlatSurrogate`), ``learned`` (`StructuredSurrogate`,
structure learned from the metrics, model selection on), ``true`` (`StructuredSurrogate` with the
true DAG, model selection off: the BOFN-style GP network), ``hand`` (the same on the problem's
hand-written structure, `Problem.hand_edges`, where it has one), ``guided`` (``learned`` told the
hand-written structure's metric -> objective edges as required `Knowledge`: what a user knows
about which metrics the objectives read; the rest is learned), ``runs`` (``learned`` from one
row per run, as the library reads them, on the problems whose trials report their runs; the
other learning methods read one row per trial, `benchmarks._surrogate_variants`),
``known`` (``learned`` told the problem's candidate edges, `Problem.knowledge`: a rule's prior
-> its counters), ``runs_known`` (both), ``saas`` (`tuner.SaasSurrogate`), ``ax`` (Ax 1.x
``Client`` default generation strategy, peer). Recorded per trial: dominated hypervolume of the observed objectives
and the proposal wall and CPU time.

Usage: ``python -m benchmarks.bench_structure [--quick] [--seeds N] [--trials T]``. Result files
hold compact per-seed summaries (`_structure_results`); ``--raw PATH`` keeps the raw traces.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, get_type_hints

import numpy as np
import torch

from benchmarks._common import machine_diffs, machine_info, machines_expanded, write_results
from benchmarks._structure_problems import PROBLEMS, Problem
from benchmarks._structure_results import (
    add_ratios,
    compact_record,
    dumps,
    hv_curve,
    merge_cells,
    summarize,
)
from benchmarks._surrogate_variants import VARIANT_OPTIONS, VariantSurrogate, split_variant_options
from structure import (
    Edge,
    Knowledge,
    LearnConfig,
    NetworkConfig,
    Structure,
    StructuredConfig,
    StructuredSurrogate,
)
from structure.params import param_nodes
from structure.select import SelectConfig
from tuner import FlatSurrogate, SaasSurrogate, Tuner
from tuner.options import TunerOptions

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("flat", "learned", "guided", "runs", "known", "runs_known", "saas", "true", "hand", "ax")
LEARNED = ("learned", "guided", "runs", "known", "runs_known")
"""The methods that learn a structure (and so read the metrics)."""
# Not run unless named: the rewrite study runs real searches (about an hour for 10 seeds);
# search40 is the wide variant of search8 (issue 39's proposer question).
ON_REQUEST = ("rewrite", "rewrite-rules", "search40")
# ``--quick``'s acquisition budget, starting from a Sobol design (see `run_tuner`).
QUICK_OPTIONS = TunerOptions(
    num_restarts=4, raw_samples=128, maxiter=50, mc_samples=64, start_with_default=False
)


def nuisance(x: np.ndarray, k: int, seed: int, rng: np.random.Generator) -> dict[str, float]:
    """``k`` nuisance metrics of the unit-cube point `x`: even indices pure noise, odd ones a
    fixed random smooth f(x)."""
    out = {}
    w = np.random.default_rng(seed + 1000).standard_normal((k, x.size))
    for i in range(k):
        out[f"nuis{i}"] = (
            float(rng.standard_normal()) if i % 2 == 0 else float(np.sin(3 * w[i] @ x))
        )
    return out


def true_structure(problem: Problem, hand: bool = False) -> Structure:
    """The problem's true DAG (or its hand-written structure) over the space's parameter
    nodes."""
    edges, metrics = (
        (problem.hand_edges, problem.hand_metrics)
        if hand
        else (problem.true_edges, problem.metrics)
    )
    return Structure(
        tuple(param_nodes(problem.space)), metrics, tuple(problem.objectives),
        tuple(Edge(s, t, 1.0, "required") for s, t in edges),
    )  # fmt: skip


def objective_inputs(problem: Problem) -> tuple[tuple[str, str], ...]:
    """The metric -> objective edges of the problem's hand-written structure: what `guided`
    is told (which metrics the objectives read), leaving the rest to structure learning."""
    metrics = set(problem.hand_metrics)
    return tuple((s, t) for s, t in problem.hand_edges if s in metrics and t in problem.objectives)


def make_surrogate(
    method: str,
    problem: Problem,
    quick: bool,
    overrides: Mapping[str, Any] | None = None,
    network_overrides: Mapping[str, Any] | None = None,
    select_overrides: Mapping[str, Any] | None = None,
) -> Any:
    # Every GP under one iteration cap: 50 with --quick, else the tuner's default.
    fit = {"maxiter": 50 if quick else TunerOptions().fit_maxiter}
    flat = FlatSurrogate(fit)
    if method == "flat":
        return flat
    if method == "saas":
        return SaasSurrogate(fit)
    learn = LearnConfig(
        bootstrap=6 if quick else 12, select=SelectConfig(**(select_overrides or {}))
    )
    # 64 paths of 256 features unless --network says otherwise (its fields override these)
    network = NetworkConfig(
        **{"num_paths": 64, "num_features": 256, "fit_options": fit, **(network_overrides or {})}
    )
    ignore = problem.ignore_metrics
    if method in LEARNED:
        rows = "runs" if method in ("runs", "runs_known") else "trials"
        fields, variant = split_variant_options(overrides or {})
        config = StructuredConfig(learn=learn, network=network, ignore_metrics=ignore, **fields)
        knowledge = None
        if method == "guided":
            knowledge = Knowledge(required=objective_inputs(problem))
        elif method in ("known", "runs_known"):
            knowledge = problem.knowledge
        return VariantSurrogate(knowledge, config=config, flat=flat, rows=rows, **variant)
    config = StructuredConfig(
        selection=False, min_trials=4, learn=learn, network=network, ignore_metrics=ignore
    )
    structure = true_structure(problem, hand=method == "hand")
    return StructuredSurrogate(config=config, flat=flat, structure=structure)


def run_tuner(
    problem: Problem,
    method: str,
    seed: int,
    trials: int,
    k: int,
    quick: bool,
    overrides: Mapping[str, Any] | None = None,
    network_overrides: Mapping[str, Any] | None = None,
    select_overrides: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One tuner run; ``Y`` holds the objectives in the maximization convention."""
    # The problems' optima sit near the center of the cube (the space's default): start from a
    # Sobol design instead, as the function-network papers do.
    options = QUICK_OPTIONS if quick else TunerOptions(start_with_default=False)
    surrogate = make_surrogate(
        method, problem, quick, overrides, network_overrides, select_overrides
    )
    space = problem.space
    tuner = Tuner(space, dict(problem.objectives), seed=seed, surrogate=surrogate, options=options)
    rng = np.random.default_rng(seed)
    Y, Y_true, times, cpu, models = [], [], [], [], []
    for _ in range(trials):
        t0, c0 = time.perf_counter(), time.process_time()
        (trial,) = tuner.ask(1)
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
        values, metrics = problem.evaluate(trial.config, rng)
        x = space.to_unit([trial.config])[0].numpy()
        tuner.tell(trial.id, values, metrics={**metrics, **nuisance(x, k, seed, rng)})
        Y.append(problem.maximized(values))
        if problem.noisy:
            Y_true.append(problem.maximized(problem.evaluate(trial.config, None)[0]))
        models.append(_description(tuner).get("model", "sobol"))
    return {
        "Y": Y, "times": times, "cpu_times": cpu, "models": models,
        "final_describe": _compact(tuner), **({"Y_true": Y_true} if Y_true else {}),
    }  # fmt: skip


def _description(tuner: Tuner) -> dict[str, Any]:
    """The description of the tuner's latest fit (`tuner.Tuner.last_fit`); {} before one."""
    return dict(tuner.last_fit.description) if tuner.last_fit is not None else {}


def _compact(tuner: Tuner) -> dict[str, Any]:
    info = _description(tuner)
    return {k: info.get(k) for k in ("model", "reason", "scores", "edges") if k in info}


def run_ax(problem: Problem, seed: int, trials: int) -> dict[str, Any]:
    from ax.api.client import Client
    from ax.api.configs import RangeParameterConfig

    client = Client(random_seed=seed)
    names = problem.space.names
    client.configure_experiment(
        parameters=[
            RangeParameterConfig(name=p, parameter_type="float", bounds=(0.0, 1.0)) for p in names
        ]
    )
    client.configure_optimization(
        objective=", ".join(
            o if d == "maximize" else f"-{o}" for o, d in problem.objectives.items()
        )
    )
    rng = np.random.default_rng(seed)
    Y, times = [], []
    for _ in range(trials):
        t0 = time.perf_counter()
        ((index, params),) = client.get_next_trials(max_trials=1).items()
        times.append(time.perf_counter() - t0)
        values, _ = problem.evaluate(params, rng)
        client.complete_trial(index, raw_data=values)
        Y.append(problem.maximized(values))
    return {"Y": Y, "times": times, "models": [], "final_describe": {}}


def _parser() -> argparse.ArgumentParser:
    """The command line of `main`."""
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
        "--problems",
        default=None,
        help="comma-separated subset of "
        + ",".join(PROBLEMS)
        + " (default: all but "
        + ", ".join(ON_REQUEST)
        + "; the rewrite study runs real searches: about an hour for 10 seeds)",
    )
    parser.add_argument(
        "--methods",
        default="flat,learned,true,ax",
        help=f"comma-separated methods ({', '.join(METHODS)}); LABEL=METHOD "
        "stores a variant (--config, --network) under its own name, to --merge with another "
        "file's runs",
    )
    parser.add_argument(
        "--nuisance", default=None, help="comma-separated k values (default 0,10,30; quick 10)"
    )
    parser.add_argument(
        "--config",
        nargs="+",
        default=[],
        metavar="FIELD=VALUE",
        help="numeric `StructuredConfig` fields of the learning methods, e.g. tolerance=2 "
        "relearn_every=1",
    )
    parser.add_argument(
        "--network",
        nargs="+",
        default=[],
        metavar="FIELD=VALUE",
        help="numeric or bool `NetworkConfig` fields of `learned` and `true`, e.g. "
        "propagate_noise=false num_paths=128",
    )
    parser.add_argument(
        "--select",
        nargs="+",
        default=[],
        metavar="FIELD=VALUE",
        help="numeric or bool `SelectConfig` fields of the learning methods, e.g. max_parents=6 "
        "recurse=false",
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
        "--run",
        default=None,
        help="write the record as this named run of the file (functions, search8, rewrite: "
        "the problem sets results/bench_structure.json holds), keeping its other runs",
    )
    parser.add_argument(
        "--raw",
        default=None,
        help="also write the raw traces (objectives and proposal times per trial) to this JSON "
        "path, for merging later without losing the per-trial curves; not for results/",
    )
    parser.add_argument(
        "--merge",
        nargs="+",
        default=None,
        help="combine the cells of these result files (runs split across processes) into --out; "
        "FILE::RUN reads one run of a file (e.g. the stored flat runs: "
        "benchmarks/results/bench_structure.json::search8)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    torch.set_num_threads(1)
    if args.merge:
        return merge(
            [Path(p) for p in args.merge],
            Path(args.out or RESULTS / "bench_structure.json"),
            Path(args.raw) if args.raw else None,
            args.run,
        )
    quick = args.quick
    overrides = _config_overrides(args.config)
    network = _config_overrides(args.network, NetworkConfig)
    select = _config_overrides(args.select, SelectConfig)
    if args.first_seed < 0:
        raise SystemExit(f"--first-seed must be >= 0, got {args.first_seed}.")
    seeds = args.seeds or (2 if quick else 10)
    budget = args.trials or (20 if quick else 50)
    default = (
        "ackley6,branincurrin" if quick else ",".join(p for p in PROBLEMS if p not in ON_REQUEST)
    )
    problems = (args.problems or default).split(",")
    unknown = [p for p in problems if p not in PROBLEMS]
    if unknown:
        raise SystemExit(f"--problems takes {', '.join(PROBLEMS)}, got {', '.join(unknown)}.")
    ks = [int(k) for k in (args.nuisance or ("10" if quick else "0,10,30")).split(",")]
    methods = [_method(spec) for spec in args.methods.split(",")]
    out = (
        Path(args.out) if args.out else RESULTS / f"bench_structure{'_quick' if quick else ''}.json"
    )
    record: dict[str, Any] = {
        "benchmark": "bench_structure", "command": " ".join(["python", *sys.argv]),
        "started": datetime.now(UTC).isoformat(), "quick": quick,
        "seeds": list(range(args.first_seed, args.first_seed + seeds)), "budget": budget, "config": overrides, "network": network, "select": select, "cells": [],
    }  # fmt: skip
    machine = machine_info()  # the start's load average; write_results adds the end's
    for name in problems:
        problem = PROBLEMS[name]
        # Only the learning methods read the metrics: flat, true (a fixed DAG over the
        # problem's own metrics) and Ax give the same runs for every k, so they run once per
        # problem.
        same_for_every_k: dict[str, dict[str, Any]] = {}
        # Without metrics of its own a problem is only worth running with nuisance metrics.
        for k in [k for k in ks if k > 0 or problem.metrics] or ks[:1]:
            cell: dict[str, Any] = {"problem": name, "nuisance": k, "methods": {}}
            for label, method in methods:
                if (
                    (method == "true" and not problem.true_edges)
                    or (method in ("hand", "guided") and not problem.hand_edges)
                    or (method in ("known", "runs_known") and problem.knowledge is None)
                    or (method == "ax" and not problem.ax)
                ):
                    continue
                if label in same_for_every_k:
                    cell["methods"][label] = dict(same_for_every_k[label], reused=True)
                    continue
                runs = []
                n_seeds = min(seeds, args.ax_seeds or seeds) if method == "ax" else seeds
                for seed in range(args.first_seed, args.first_seed + n_seeds):
                    run = (
                        run_ax(problem, seed, budget)
                        if method == "ax"
                        else run_tuner(
                            problem, method, seed, budget, k, quick, overrides, network, select
                        )
                    )
                    run["seed"] = seed
                    runs.append(run)
                    print(f"{name} k={k} {label} seed={seed} hv={hv_curve(run, problem.ref, budget)[budget]:.4f} "
                          f"t={np.mean(run['times']):.2f}s", flush=True)  # fmt: skip
                cell["methods"][label] = {
                    "method": method,
                    "summary": summarize(runs, problem.ref, budget),
                    "runs": runs,
                }
                if method not in LEARNED:
                    same_for_every_k[label] = cell["methods"][label]
            add_ratios(cell, budget, problem.ref)
            record["cells"].append(cell)
            _save(record, out, args.raw, machine, args.run)
    record["finished"] = datetime.now(UTC).isoformat()
    _save(record, out, args.raw, machine, args.run)
    print_table(record)
    print(f"wrote {out}")
    return 0


def _save(
    record: dict[str, Any],
    out: Path,
    raw: str | None,
    machine: dict[str, Any],
    run: str | None = None,
) -> None:
    """The compact summary to `out` (as its run ``run`` when given), the raw traces to `raw`
    (when given), both with the run's `machine` (`benchmarks._common.write_results`)."""
    if raw:
        write_results(Path(raw), record, machine=machine, dumps=dumps)
    compact = compact_record(record, _refs(record))
    write_results(out, compact, machine=machine, dumps=dumps, run=run)


def _refs(record: dict[str, Any]) -> dict[str, tuple[float, ...]]:
    """Problem -> hypervolume reference point, for the problems `record` has cells of."""
    return {c["problem"]: PROBLEMS[c["problem"]].ref for c in record["cells"]}


def merge(paths: list[Path], out: Path, raw: Path | None = None, run: str | None = None) -> int:
    """Combine result files (runs split across processes by problem, k, method or seeds; raw
    or compact) into one and print its table (`_structure_results.merge_cells`)."""
    records = [_read(p) for p in paths]
    if len({r["budget"] for r in records}) > 1:
        raise SystemExit(
            f"--merge needs files of one trial budget, got {[r['budget'] for r in records]}."
        )
    refs = {name: ref for r in records for name, ref in _refs(r).items()}
    # The merged file's machine is the merging process's; each source keeps its own in
    # ``merged_from`` (``environment`` in files written before `write_results` wrote them all).
    record = {
        k: v
        for k, v in dict(records[0], cells=merge_cells(records, refs)).items()
        if k not in ("machine", "environment")
    }
    record["seeds"] = sorted(
        {run["seed"] for c in record["cells"] for m in c["methods"].values() for run in m["runs"]}
    )
    # A merged file lists the files it was merged from.
    record["merged_from"] = machine_diffs(
        [source for p, r in zip(paths, records) for source in _sources(p, r)]
    )
    if raw:
        write_results(raw, record, dumps=dumps)
    write_results(out, compact_record(record, refs), dumps=dumps, run=run)
    print_table(record)
    print(f"wrote {out}")
    return 0


def _read(path: Path) -> dict[str, Any]:
    """A result file, or one run of it (``results/bench_structure.json::search8``)."""
    name, _, run = str(path).partition("::")
    record: dict[str, Any] = json.loads(Path(name).read_text())
    return record["runs"][run] if run else record


def _sources(path: Path, record: dict[str, Any]) -> list[dict[str, Any]]:
    """The files `record` (read from `path`) holds the runs of, each with its command and whole
    machine record (``environment`` in files written before `write_results` wrote them all)."""
    machine = record.get("machine") or record.get("environment")
    if not record.get("merged_from"):
        return [{"file": path.name, "command": record.get("command"), "machine": machine}]
    sources = machines_expanded(record["merged_from"])
    # A merged file written before its sources kept their machine carried its first source's.
    sources[0].setdefault("machine", machine)
    return sources


def _method(spec: str) -> tuple[str, str]:
    """``"flat"`` -> ``("flat", "flat")``; ``"LABEL=METHOD"`` -> ``(LABEL, METHOD)``."""
    label, _, method = spec.rpartition("=")
    if method not in METHODS:
        raise SystemExit(f"--methods takes {', '.join(METHODS)} or LABEL=METHOD, got {spec!r}.")
    return label or method, method


def _config_overrides(pairs: list[str], cls: type = StructuredConfig) -> dict[str, Any]:
    """``["tolerance=2", ...]`` -> ``{"tolerance": 2.0}``, checked against the int, float and
    bool fields of `cls` (`StructuredConfig`, with `VariantSurrogate`'s ``flat_proposes``, or
    `NetworkConfig`; an optional number such as ``veto`` takes a number or ``none``)."""
    extra = {"flat_proposes": bool} if cls is StructuredConfig else {}
    hints = {**get_type_hints(cls), **extra}.items()
    optional = {n for n, t in hints if t == float | None}
    types = {n: float if n in optional else t for n, t in hints}
    types = {n: t for n, t in types.items() if t in (int, float, bool)}
    out: dict[str, Any] = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if sep and name in optional and value == "none":
            out[name] = None
            continue
        if not sep or name not in types:
            raise SystemExit(
                f"{cls.__name__} overrides take FIELD=VALUE with FIELD one of {sorted(types)}, "
                f"got {pair!r}."
            )
        if types[name] is bool and value not in ("true", "false"):
            raise SystemExit(f"{cls.__name__}.{name} needs true or false, got {value!r}.")
        try:
            number = value == "true" if types[name] is bool else float(value)
        except ValueError:
            raise SystemExit(f"{cls.__name__}.{name} needs a number, got {value!r}.") from None
        out[name] = types[name](number)
    cls(**{k: v for k, v in out.items() if k not in VARIANT_OPTIONS})  # its own checks
    return out


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
        f"{'reach':>6} {'paired':>6} {'<=B/2':>6} {'dHV':>8} {'p':>6} {'wall s':>7} {'cpu s':>6} {'cpu x':>6} {'net %':>6}"
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
                f"{s['proposal_s_mean']:>7.2f} {_num(s.get('proposal_cpu_s_mean'), '.2f'):>6} "
                f"{_num(s.get('cpu_ratio_vs_flat') or s.get('time_ratio_vs_flat'), '.2f'):>6} "
                f"{'' if share is None else f'{100 * share:.0f}':>6}"
            )
    print("\nmedian HV at trial t (paired difference to flat at t, p); at B/2 vs flat's final HV")
    for cell in record["cells"]:
        for method, m in cell["methods"].items():
            s = m["summary"]
            if "at" not in s:
                continue
            parts = [
                f"t={t}: {a['hv_median']:.4g} ({a['paired_diff']:+.3g}, {a['p']:.3f})"
                for t, a in s["at"].items()
            ]
            h = s.get("half_vs_flat_final")
            if h:
                parts.append(
                    f"t={h['trial']} vs flat final: {h['paired_diff']:+.3g}, p {h['p']:.3f}"
                )
            print(f"{cell['problem']:14} {cell['nuisance']:>3} {method:8} " + "; ".join(parts))


def _num(value: float | None, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


if __name__ == "__main__":
    raise SystemExit(main())
