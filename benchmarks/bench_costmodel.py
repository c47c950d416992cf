"""Benchmark of the cost model against measurements: predicted vs measured latency and speedup.

Part 1, zoo models x shapes: every small zoo model (gpt2, bert, llama, t5, vit, resnet) at four
shapes, each measured with `rewrite.measure.measure` (eager PyTorch, one thread, median of
``--repeats`` runs after warm-up). A profile is calibrated in this run on two of the shapes
(`rewrite.calibrate`), and the other two are held out. Columns: the datasheet ``cpu`` profile
(uncalibrated), the profile fitted here, and the shipped ``cpu-xeon-2core`` profile. Per column:
Spearman rank correlation, median error factor ``max(p/m, m/p)``, median relative error
``|p - m| / m`` and the worst factor, over the fitted shapes, the held-out shapes, and all.

Part 2, search fronts: `rewrite.search` on the six models (held-out shape) with the fitted
profile and, for contrast, with the datasheet profile; `SearchResult.measure` re-times the input
and every Pareto graph. Per graph, the predicted speedup (input latency / graph latency) under
each profile is set beside the measured one; the error is ``|predicted / measured - 1|``.

Prints tables and writes ``benchmarks/results/bench_costmodel.json`` (machine, versions, seeds,
load average before and after, every case). Targets (issue 20): Spearman >= 0.9 and median error
<= 25% for the calibrated profile; Pareto speedups within 25% (median).

Usage: ``python -m benchmarks.bench_costmodel [--repeats 15] [--steps 300]``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

import rewrite  # noqa: E402
from benchmarks._common import write_results  # noqa: E402
from rewrite import cost, zoo  # noqa: E402
from rewrite.measure import calibrate, format_front, measure  # noqa: E402
from rewrite.measure.calibrate import zoo_overrides  # noqa: E402

SEED = 0
MODELS = ("gpt2", "bert", "llama", "t5", "vit", "resnet")
FIT_SHAPES = (
    {"batch": 1, "seq_len": 16, "image_size": 32},
    {"batch": 8, "seq_len": 128, "image_size": 96},
)
HELD_OUT_SHAPES = (
    {"batch": 4, "seq_len": 64, "image_size": 64},
    {"batch": 16, "seq_len": 32, "image_size": 48},
)
SEARCH_MODELS = MODELS
SHIPPED = "cpu-xeon-2core"


def _label(name: str, shape: dict[str, int]) -> str:
    kw = zoo_overrides(name, shape)
    size = kw.get("seq_len", kw.get("image_size"))
    return f"{name} b{kw['batch']} {'s' if 'seq_len' in kw else 'i'}{size}"


def _build(name: str, shape: dict[str, int]) -> rewrite.Graph:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return zoo.build(name, **zoo_overrides(name, shape))


def stats(pred: np.ndarray, meas: np.ndarray) -> dict[str, float]:
    """Spearman, median / worst error factor and median relative error of ``pred`` vs ``meas``."""
    factor = np.maximum(pred / meas, meas / pred)
    return {
        "spearman": float(spearmanr(pred, meas).statistic),
        "median_factor": float(np.median(factor)),
        "median_rel_error": float(np.median(np.abs(pred - meas) / meas)),
        "worst_factor": float(np.max(factor)),
    }


def bench_shapes(repeats: int) -> tuple[list[dict[str, Any]], Any]:
    t0 = time.perf_counter()
    fitted = calibrate(
        "cpu", MODELS, FIT_SHAPES, name="cpu-bench-fit", repeats=repeats, seed=SEED
    ).profile
    print(
        f"calibrated on {len(MODELS) * len(FIT_SHAPES)} graphs in {time.perf_counter() - t0:.0f} s"
    )
    rows = []
    for split, shapes in (("fit", FIT_SHAPES), ("held_out", HELD_OUT_SHAPES)):
        for name in MODELS:
            for shape in shapes:
                g = _build(name, shape)
                m = measure(g, "cpu", repeats=repeats, seed=SEED)
                rows.append(
                    {
                        "case": _label(name, shape),
                        "split": split,
                        "nodes": len(g),
                        "measured": m.latency,
                        "interval": list(m.interval),
                        "cpu_time": m.cpu_time,
                        "datasheet": cost(g, "cpu").latency,
                        "calibrated": cost(g, fitted).latency,
                        "shipped": cost(g, SHIPPED).latency,
                        "measured_peak_memory": m.peak_memory,
                        "predicted_peak_memory": cost(g, fitted).peak_memory,
                    }
                )
    return rows, fitted


def summarize_shapes(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    print(
        f"\n{'case':<20} {'split':<9} {'meas ms':>8} {'sheet ms':>9} {'calib ms':>9} {'ship ms':>8}"
    )
    for r in rows:
        print(
            f"{r['case']:<20} {r['split']:<9} {r['measured'] * 1e3:>8.3f} "
            f"{r['datasheet'] * 1e3:>9.3f} {r['calibrated'] * 1e3:>9.3f} {r['shipped'] * 1e3:>8.3f}"
        )
    print(
        f"\n{'profile':<11} {'cases':<9} {'spearman':>8} {'med x':>6} {'med err':>8} {'worst x':>8}"
    )
    for col in ("datasheet", "calibrated", "shipped"):
        for split in ("fit", "held_out", "all"):
            sel = [r for r in rows if split == "all" or r["split"] == split]
            s = stats(np.array([r[col] for r in sel]), np.array([r["measured"] for r in sel]))
            out[f"{col}.{split}"] = s | {"n": len(sel)}
            print(
                f"{col:<11} {split:<9} {s['spearman']:>8.3f} {s['median_factor']:>6.2f} "
                f"{s['median_rel_error']:>8.1%} {s['worst_factor']:>8.2f}"
            )
    mem = np.array([r["predicted_peak_memory"] / r["measured_peak_memory"] for r in rows])
    out["peak_memory_ratio"] = {
        "median": float(np.median(mem)),
        "min": float(mem.min()),
        "max": float(mem.max()),
    }
    print(
        f"\npeak memory, predicted / measured live storage: median {np.median(mem):.2f}, "
        f"range {mem.min():.2f}-{mem.max():.2f}"
    )
    return out


def bench_fronts(profile: Any, steps: int, repeats: int) -> tuple[list[dict[str, Any]], dict]:
    """Search each model with the fitted and with the datasheet profile; measure both fronts and
    set every Pareto graph's predicted speedup under both profiles beside the measured one."""
    fronts: list[dict[str, Any]] = []
    errors: dict[str, list[float]] = {}
    for name in SEARCH_MODELS:
        g = _build(name, HELD_OUT_SHAPES[0])
        base = {"calibrated": cost(g, profile).latency, "datasheet": cost(g, "cpu").latency}
        for searched in ("calibrated", "datasheet"):
            dev = profile if searched == "calibrated" else "cpu"
            res = rewrite.search(g, {"max_steps": steps, "seed": SEED}, device=dev)
            rows = res.measure("cpu", repeats=repeats, seed=SEED)
            print(f"\n{_label(name, HELD_OUT_SHAPES[0])}, searched with the {searched} profile:")
            print(format_front(rows))
            out = []
            for r in rows[1:]:
                sol = res.pareto[r.index]
                pred = {
                    k: base[k] / cost(sol.graph, profile if k == "calibrated" else "cpu").latency
                    for k in base
                }
                for k, v in pred.items():
                    errors.setdefault(f"{searched}_search.{k}_prediction", []).append(
                        abs(v / r.measured_speedup - 1)
                    )
                out.append({**r.as_dict(), "rules": sol.rules, "predicted": pred})
            fronts.append({"model": name, "searched_with": searched, "rows": out})
    summary = {
        k: {"graphs": len(v), "median_speedup_error": float(np.median(v))}
        for k, v in errors.items()
    }
    print("\nPareto graphs: median |predicted / measured speedup - 1|")
    for k, v in summary.items():
        print(f"  {k:<45} {v['median_speedup_error']:>7.1%}  ({v['graphs']} graphs)")
    return fronts, summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--steps", type=int, default=300)
    args = ap.parse_args()
    torch.set_num_threads(1)
    load0 = os.getloadavg()
    t0, c0 = time.perf_counter(), time.process_time()
    rows, fitted = bench_shapes(args.repeats)
    summary = summarize_shapes(rows)
    fronts, front_summary = bench_fronts(fitted, args.steps, args.repeats)
    load1 = os.getloadavg()
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(f"\nwall {wall:.0f} s, cpu {cpu:.0f} s, load average {load0[0]:.2f} -> {load1[0]:.2f}")
    path = write_results(
        "bench_costmodel",
        {
            "device": "cpu (1 thread, eager PyTorch; fused groups eager)",
            "mesh": "1 device",
            "seed": SEED,
            "repeats": args.repeats,
            "steps": args.steps,
            "threads": torch.get_num_threads(),
            "load_average": {"before": list(load0), "after": list(load1)},
            "wall_s": wall,
            "cpu_s": cpu,
            "fit_shapes": list(FIT_SHAPES),
            "held_out_shapes": list(HELD_OUT_SHAPES),
            "fitted_profile": fitted.to_dict(),
            "summary": summary,
            "cases": rows,
            "fronts": fronts,
            "fronts_summary": front_summary,
        },
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
