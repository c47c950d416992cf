"""Result files of `bench_structure.py`: compact per-seed summaries, ratios to flat, merging.

A run in memory holds its raw trace (``Y``: the observed objectives per trial, ``Y_true`` their
noise-free values on a noisy problem, proposal ``times`` and ``cpu_times``, the model in use per
trial). A result file holds compact runs instead (`compact_run`): the hypervolume at the
checkpoints (`CHECKPOINTS` and the budget), the trials to reach that seed's flat final
hypervolume, mean proposal wall and CPU time (all trials and the last 10) and the network's share
of the proposals. `--raw PATH` keeps the raw traces in a file of its own (not committed).

`add_ratios` and `merge_cells` accept both: a statistic that needs the whole curve (the trial at
which a curve reaches flat's final hypervolume) is recomputed from raw runs and carried over
from a compact file otherwise (the median curve's reach only while no other file adds runs to
the method).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import torch
from botorch.utils.multi_objective.hypervolume import Hypervolume
from botorch.utils.multi_objective.pareto import is_non_dominated

from benchmarks._common import paired_test

CHECKPOINTS = (10, 20, 30, 40, 50)


def hypervolume(Y: np.ndarray, ref: tuple[float, ...]) -> float:
    """Dominated hypervolume of the rows of ``Y`` (``n x m``, maximized) above `ref`."""
    if len(Y) == 0:
        return 0.0
    Yt = torch.as_tensor(Y, dtype=torch.float64)
    front = Yt[is_non_dominated(Yt)]
    return float(Hypervolume(torch.tensor(ref, dtype=torch.float64)).compute(front))


def hv_curve(run: dict[str, Any], ref: tuple[float, ...], budget: int) -> dict[int, float]:
    """Trial -> hypervolume after it: every trial of a raw run (of its noise-free values on a
    noisy problem, ``Y_true``: the observed ones reward lucky noise, else the observed ones);
    the stored checkpoints of a compact run."""
    if "hv" in run:
        return {int(t): float(v) for t, v in run["hv"].items()}
    Y = np.array(run.get("Y_true") or run["Y"])
    return {t + 1: hypervolume(Y[: t + 1], ref) for t in range(budget)}


def checkpoints(budget: int) -> list[int]:
    return sorted({t for t in CHECKPOINTS if t <= budget} | {budget})


def trials_to_reach(curve: dict[int, float], target: float) -> int | None:
    return next((t for t, v in sorted(curve.items()) if v >= target - 1e-12), None)


def summarize(runs: list[dict[str, Any]], ref: tuple[float, ...], budget: int) -> dict[str, Any]:
    curves = [hv_curve(r, ref, budget) for r in runs]
    final = np.array([c[budget] for c in curves])
    median = (
        {t: float(np.median([c[t] for c in curves])) for t in range(1, budget + 1)}
        if all(len(c) == budget for c in curves)
        else None
    )
    models = [m for r in runs for m in r.get("models", [])]
    share = [r["network_share"] for r in runs if r.get("network_share") is not None]
    return {
        "hv_median": float(np.median(final)),
        "hv_q25": float(np.quantile(final, 0.25)),
        "hv_q75": float(np.quantile(final, 0.75)),
        # The trial at which the median curve reaches flat's final median (`add_ratios`) needs
        # raw runs; the median at the checkpoints is in ``at``.
        "_median_full": median,
        "n_runs": len(runs),
        "proposal_s_mean": float(np.mean([_mean_time(r, "times") for r in runs])),
        "proposal_cpu_s_mean": _maybe_mean([_mean_time(r, "cpu_times") for r in runs]),
        "proposal_cpu_s_last10": _maybe_mean([_mean_time(r, "cpu_times", 10) for r in runs]),
        "network_share": float(np.mean([m == "network" for m in models]))
        if models
        else (float(np.mean(share)) if share else None),
    }


def _mean_time(run: dict[str, Any], key: str, last: int | None = None) -> float | None:
    """Mean proposal time of a raw run's trials (the last `last`), or a compact run's."""
    stored = {"times": "proposal_s", "cpu_times": "proposal_cpu_s"}[key]
    if key not in run:
        return run.get(stored + ("_last10" if last else ""))
    values = run[key][-last:] if last else run[key]
    return float(np.mean(values)) if values else None


def _maybe_mean(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.mean(known)) if known and len(known) == len(values) else None


_RATIOS = {
    "proposal_s_mean": "time_ratio_vs_flat",
    "proposal_cpu_s_mean": "cpu_ratio_vs_flat",
    "proposal_cpu_s_last10": "cpu_last10_ratio_vs_flat",
}


def add_ratios(cell: dict[str, Any], budget: int, ref: tuple[float, ...]) -> None:
    """Per method: trials its median curve needs to reach flat's final median HV; paired per
    seed (same initial design), the median trials to reach that seed's flat final HV (never:
    ``budget + 1``), the share of seeds reaching it within half the budget, and the median
    final-HV difference to flat with its two-sided Wilcoxon signed-rank p-value; time ratios."""
    methods = cell["methods"]
    if "flat" not in methods:
        return
    flat_s = methods["flat"]["summary"]
    target = flat_s["hv_median"]
    curves = {
        name: {r["seed"]: hv_curve(r, ref, budget) for r in m["runs"]}
        for name, m in methods.items()
    }
    flat_final = {seed: c[budget] for seed, c in curves["flat"].items()}
    for name, m in methods.items():
        s = m["summary"]
        full = s.pop("_median_full", None)
        carried = s.pop("_carried", None)
        s["trials_to_flat_final"] = trials_to_reach(full, target) if full else carried
        seeds = [seed for seed in curves[name] if seed in flat_final]  # Ax: fewer seeds
        stored = {r["seed"]: r.get("reach_flat_final") for r in m["runs"]}
        reach = [
            (trials_to_reach(curves[name][seed], flat_final[seed]) or budget + 1)
            if len(curves[name][seed]) == budget
            else stored[seed]
            for seed in seeds
        ]
        for r in m["runs"]:
            if r["seed"] in seeds:
                r["reach_flat_final"] = reach[seeds.index(r["seed"])]
        known = [x for x in reach if x is not None]
        s["paired_reach_median"] = float(np.median(known)) if known else None
        s["paired_within_half"] = (
            float(np.mean([x <= budget / 2 for x in known])) if known else None
        )
        final = [curves[name][seed][budget] for seed in seeds]
        s["paired_hv_diff_median"], s["paired_p"] = paired_test(
            final, [flat_final[seed] for seed in seeds]
        )
        for key, label in _RATIOS.items():
            mine, theirs = s.get(key), flat_s.get(key)
            s[label] = mine / theirs if mine is not None and theirs else None
        # At each checkpoint: median HV and the paired difference to flat at that trial; at
        # half the budget, the paired difference to flat's final HV (the halving target).
        at: dict[str, Any] = {}
        for t in checkpoints(budget):
            mine = [curves[name][seed][t] for seed in seeds]
            diff, p = paired_test(mine, [curves["flat"][seed][t] for seed in seeds])
            at[str(t)] = {"hv_median": float(np.median(mine)), "paired_diff": diff, "p": p}
        s["at"] = at
        half = budget // 2
        if all(half in curves[name][seed] for seed in seeds):
            mine = [curves[name][seed][half] for seed in seeds]
            diff, p = paired_test(mine, [flat_final[seed] for seed in seeds])
            s["half_vs_flat_final"] = {"trial": half, "paired_diff": diff, "p": p}


def compact_run(run: dict[str, Any], ref: tuple[float, ...], budget: int) -> dict[str, Any]:
    """What a result file keeps of a run (see the module docstring)."""
    if "hv" in run:
        return run
    curve = hv_curve(run, ref, budget)
    models = run.get("models") or []
    out = {
        "seed": run["seed"],
        "hv": {str(t): curve[t] for t in checkpoints(budget)},
        "reach_flat_final": run.get("reach_flat_final"),
        "proposal_s": _mean_time(run, "times"),
        "proposal_cpu_s": _mean_time(run, "cpu_times"),
        "proposal_cpu_s_last10": _mean_time(run, "cpu_times", 10),
        "network_share": float(np.mean([m == "network" for m in models])) if models else None,
        "final_model": run.get("final_describe", {}).get("model"),
    }
    return {k: v for k, v in out.items() if v is not None}


def _rounded(obj: Any, digits: int = 5) -> Any:
    """`obj` with every float rounded to `digits` significant digits."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _rounded(v, digits) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_rounded(v, digits) for v in obj]
    return obj


def compact_record(record: dict[str, Any], refs: dict[str, tuple[float, ...]]) -> dict[str, Any]:
    """`record` with every run compacted (`refs`: problem -> hypervolume reference point)."""
    budget = record["budget"]
    cells = []
    for cell in record["cells"]:
        ref = refs[cell["problem"]]
        methods = {}
        for name, m in cell["methods"].items():
            if m.get("reused"):  # runs and summary of the problem's first cell (see `merge_cells`)
                methods[name] = {"method": m.get("method", name), "reused": True}
                continue
            methods[name] = {**m, "runs": [compact_run(r, ref, budget) for r in m["runs"]]}
        cells.append({**cell, "methods": methods})
    return _rounded({**record, "cells": cells})


def dumps(record: dict[str, Any]) -> str:
    """`record` as JSON, indented down to the runs and the summaries, each of which takes one
    line (the layout `benchmarks._common.write_results` writes result files in)."""
    return _dumps(record, 0) + "\n"


def _dumps(obj: Any, level: int) -> str:
    if (
        level >= 6
        or not isinstance(obj, dict | list)
        or not obj
        or (level == 5 and isinstance(obj, dict))
    ):
        return json.dumps(obj, separators=(",", ":"))
    pad = " " * (level + 1)
    if isinstance(obj, list):
        items = [pad + _dumps(v, level + 1) for v in obj]
        return "[\n" + ",\n".join(items) + "\n" + " " * level + "]"
    items = [f"{pad}{json.dumps(str(k))}: {_dumps(v, level + 1)}" for k, v in obj.items()]
    return "{\n" + ",\n".join(items) + "\n" + " " * level + "}"


def merge_cells(
    records: list[dict[str, Any]], refs: dict[str, tuple[float, ...]]
) -> list[dict[str, Any]]:
    """Cells of one problem and k joined over `records`; a method found in several keeps the
    runs of all of them, a later record's run replacing an earlier one's of the same seed;
    summaries and ratios to flat recomputed."""
    budget = records[0]["budget"]
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    reused: dict[tuple[str, str], list[dict[str, Any]]] = {}
    # The median curve's reach of a compact file's method, kept when no other file adds runs.
    carried: dict[tuple[str, str], int | None] = {}
    for r in records:
        for cell in r["cells"]:
            key = (cell["problem"], cell["nuisance"])
            merged = cells.setdefault(key, {**cell, "methods": {}})["methods"]
            for method, m in cell["methods"].items():
                if "runs" not in m:  # a compact file's reused cell: the problem's first runs
                    source = reused.get((cell["problem"], method), [])
                else:
                    # Files before `--first-seed` hold the runs of their `seeds`, in order.
                    source = [dict(run, seed=run.get("seed", r["seeds"][i]))
                              for i, run in enumerate(m["runs"])]  # fmt: skip
                    reused.setdefault((cell["problem"], method), source)
                reach = m.get("summary", {}).get("trials_to_flat_final")
                carried.setdefault((cell["problem"], method), reach)
                runs = {run["seed"]: run for run in source}
                if method in merged:
                    runs = {run["seed"]: run for run in merged[method]["runs"]} | runs
                if method in merged:
                    carried[(cell["problem"], method)] = None
                merged[method] = {
                    **m,
                    "reused": m.get("reused", False) and merged.get(method, m).get("reused"),
                    "runs": [run for _, run in sorted(runs.items())],
                }
    for (name, _), cell in cells.items():
        for method, m in cell["methods"].items():
            m["summary"] = summarize(m["runs"], refs[name], budget)
            m["summary"]["_carried"] = carried.get((name, method))
        add_ratios(cell, budget, refs[name])
    return list(cells.values())
