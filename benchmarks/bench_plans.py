"""Plans for many devices: the cost model against torchtitan's table, expert plans, the search.

Three parts, one results file (``benchmarks/results/bench_plans.json``):

1. ``anchors``: every row of torchtitan's Llama 3.1 H100 benchmark
   (``benchmarks/llama3_h100_202412_torchtitan.md``, tables 1-6) predicted against published,
   with the fitted factors refitted here and compared with the stored profile's;
2. ``configs``: Llama 3.1 8B, 70B, 405B, a GPT-3 175B shape and ViT-H/14, built on ``meta``, on
   8, 64, 256 and 512 H100s (``h100-gt``: 8 per node), bf16 with ``torch.compile``: every expert
   plan (``rewrite.plans.experts``, every checkpointing mode), and the search's best plan under an
   80 GiB cap from replicated data parallelism, with its steps and seconds on this machine;
3. ``summary``: the done-when configurations (Llama 8B at 8, the three Llama sizes at 64 and
   512): the search against the best expert under the cap, and where it goes beyond them.

Run from the repository root::

    python -m benchmarks.bench_plans                # everything (about 20 minutes, shared 2 cores)
    python -m benchmarks.bench_plans --part anchors
    python -m benchmarks.bench_plans --models llama3-8b --gpus 8 64
    python -m benchmarks.bench_plans --part autoparallel --autoparallel-path SRC:PULP
"""

from __future__ import annotations

import argparse
import math
import time
from typing import Any

from benchmarks._common import machine_info, read_results, write_results

GIB = 2**30
CAP = 80 * GIB
#: Global batch per device count, by model: torchtitan's per-GPU batches for Llama (8B and 70B
#: 2 sequences of 8192 per GPU, 405B one per two GPUs), GPT-3's 4 sequences of 2048 per GPU,
#: ViT-H 32 images per GPU.
BATCH = {
    "llama3-8b": lambda n: 2 * n,
    "llama3-70b": lambda n: 2 * n,
    "llama3-405b": lambda n: max(1, n // 2),
    "gpt3-175b": lambda n: 4 * n,
    "vit-h": lambda n: 32 * n,
}
DONE_WHEN = [("llama3-8b", 8), *[(m, n) for m in ("llama3-8b", "llama3-70b", "llama3-405b")
                                 for n in (64, 512)]]  # fmt: skip
NUMERICS = {"compile": True}
#: Sequence parallelism as torchtitan's Llama allows it: the Hugging Face classes built here
#: derive positions from their embedding's output length, so their plans that use it list that
#: one problem (`rewrite.plans.convert.SP_UNSAFE`); torchtitan's modules do not.
SEQUENCE_PARALLEL = "always"


def _r(x: float) -> float:
    return float(f"{x:.6g}")


def anchors_part() -> dict[str, Any]:
    """Every published row against the model, and the refitted factors."""
    from rewrite.devices import load_device
    from rewrite.plans import anchors

    t0 = time.perf_counter()
    stored = load_device("h100-gt")
    fitted = anchors.fit(stored)
    fit_s = time.perf_counter() - t0
    rows = anchors.table(stored)
    print(f"\n{'row':34s} {'fit':>3s} {'TPS pub':>8s} {'model':>8s} {'err':>6s} "
          f"{'GiB pub':>7s} {'model':>6s} {'err':>6s}")  # fmt: skip
    for r in rows:
        flag = "fit" if r["fitted"] else ("" if r["modelled"] else "cp")
        print(f"{r['row']:34s} {flag:>3s} {r['tps']:8.0f} {r['tps_model']:8.0f} "
              f"{r['tps_error']:+6.1%} {r['gib']:7.1f} {r['gib_model']:6.1f} {r['gib_error']:+6.1%}")  # fmt: skip
    test = [r for r in rows if r["modelled"] and not r["fitted"]]
    return {
        "source": "pytorch/torchtitan benchmarks/llama3_h100_202412_torchtitan.md, tables 1-6",
        "factors_stored": _factors(stored),
        "factors_refitted": _factors(fitted),
        "fit_seconds": _r(fit_s),
        "columns": ["row", "fitted", "modelled", "tps", "tps_model", "gib", "gib_model"],
        "rows": [
            [
                r["row"],
                r["fitted"],
                r["modelled"],
                r["tps"],
                round(r["tps_model"], 1),
                r["gib"],
                round(r["gib_model"], 2),
            ]
            for r in rows
        ],  # fmt: skip
        "max_abs_error_unfitted_modelled": {
            "tps": _r(max(abs(r["tps_error"]) for r in test)),
            "gib": _r(max(abs(r["gib_error"]) for r in test)),
        },
    }


def _factors(p: Any) -> dict[str, float]:
    return {
        "matmul_efficiency": _r(p.efficiency["matmul"]),
        "attention_factor": _r(p.family_efficiency.get("attention", 1.0)),
        "float8_efficiency": _r(p.training["float8_efficiency"]),
        "memory_reserve": _r(p.training["memory_reserve"]),
    }


def _plan_row(plan: Any) -> dict[str, Any]:
    c = plan.cost
    return {
        "tps": float(f"{c['tokens_per_second']:.4g}"),
        "gib": round(c["peak_memory"] / GIB, 1),
        "fits": c["peak_memory"] <= CAP,
        "problems": sorted(plan.problems),
    }


def _compact(row: dict[str, Any]) -> list[Any]:
    """An expert's row as ``[tokens/s, GiB, fits, problem keys]`` (keeps the file small)."""
    return [row["tps"], row["gib"], row["fits"], row["problems"]]


def config(model: str, n: int, seed: int, budget: float) -> dict[str, Any]:
    """Every expert plan and the search's best on one model and device count."""
    from rewrite.plans import models, search
    from rewrite.plans.api import layout_for

    batch = BATCH[model](n)
    module, inputs = models.build(model, batch=batch)
    t0 = time.perf_counter()
    layout_for(module, inputs)
    layout_s = time.perf_counter() - t0
    plan = search(module, inputs, mesh=n, memory_cap=CAP, time_budget=budget, seed=seed,
                  sequence_parallel=SEQUENCE_PARALLEL, **NUMERICS)  # fmt: skip
    experts = {k: _plan_row(b) for k, b in plan.baselines.items()}
    ok = {k: e for k, e in experts.items() if e["fits"]}
    best = max(ok.items(), key=lambda kv: kv[1]["tps"]) if ok else None
    found = None if plan.problems.get("plan") else _plan_row(plan)
    out = {
        "model": model, "gpus": n, "batch": batch, "layout_s": round(layout_s, 1),
        "best_expert": best[0] if best else None,
        "best_tps": best[1]["tps"] if best else None,
        "search_tps": found["tps"] if found else None,
        "search_gib": found["gib"] if found else None,
        "ratio": round(found["tps"] / best[1]["tps"], 4) if (found and best) else None,
        "steps": plan.provenance["search_steps"],
        "seconds": round(plan.provenance["search_seconds"], 1),
        "plan": _describe(plan) if found else None,
        # every expert as "style/checkpointing tokens/s GiB [!: over the cap]" (done-when ones)
        "experts": ";".join(
            f"{k} {e['tps']:.4g} {e['gib']:.0f}{'' if e['fits'] else '!'}"
            for k, e in sorted(experts.items(), key=lambda kv: -kv[1]["tps"])
        ) if (model, n) in DONE_WHEN else None,
    }  # fmt: skip
    best_s = f"{best[0]} {best[1]['tps']:.0f}" if best else "none fits"
    found_s = f"{found['tps']:.0f} ({found['gib']:.1f} GiB)" if found else "none fits"
    ratio = out["ratio"] if out["ratio"] is not None else float("nan")
    print(
        f"{model:12s} {n:4d} batch {batch:5d}  best expert {best_s:34s} search {found_s:20s} "
        f"x{ratio:.3f}  {out['seconds']:.1f} s {out['steps']} steps  {out['plan'] or ''}"
    )
    return out


def _describe(plan: Any) -> str:
    modes = [m.checkpoint for k, m in plan.modules.items() if m.fsdp and k]
    ck = {m: modes.count(m) for m in sorted(set(modes))}
    pp = plan.pipeline
    parts = [
        "x".join(f"{a}{s}" for a, s in plan.mesh.items()),
        f"fsdp={'+'.join(plan.fsdp_axes) or '-'}",
        f"ckpt={ck}",
        f"mb={plan.provenance.get('microbatches')}",
    ]
    if pp:
        parts.append(f"{pp.schedule}/v{pp.virtual_stages}")
    return " ".join(parts)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "anchors", "configs", "autoparallel"), default="all")
    ap.add_argument("--autoparallel-path", default=None,
                    help="PYTHONPATH entries holding AutoParallel's source and pulp (the "
                    "autoparallel part runs only with it)")  # fmt: skip
    ap.add_argument("--models", nargs="+", default=list(BATCH))
    ap.add_argument("--gpus", nargs="+", type=int, default=[8, 64, 256, 512])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget", type=float, default=60.0, help="search seconds per config")
    ap.add_argument("--docs", action="store_true",
                    help="only rewrite docs/plans.md's tables from the stored results")  # fmt: skip
    args = ap.parse_args(argv)
    if args.docs:
        from benchmarks._plans_tables import update_docs

        print("rewrote tables:", update_docs(read_results("bench_plans")))
        return
    machine = machine_info()
    old = read_results("bench_plans") if _exists() else {}
    payload: dict[str, Any] = {k: v for k, v in old.items() if k != "machine"}
    payload["settings"] = {"cap_gib": 80, "numerics": NUMERICS, "seed": args.seed,
                           "budget_s": args.budget, "device": "h100-gt",
                           "sequence_parallel": SEQUENCE_PARALLEL}  # fmt: skip
    if args.part in ("all", "anchors"):
        payload["anchors"] = anchors_part()
        write_results("bench_plans", payload, machine=machine)
    if args.part in ("all", "autoparallel") and args.autoparallel_path:
        payload["autoparallel"] = autoparallel_part(args.autoparallel_path, args.budget)
        write_results("bench_plans", payload, machine=machine)
    if args.part in ("all", "configs"):
        kept = [c for c in payload.get("configs", []) if "seconds" in c]  # this layout only
        rows = {(c["model"], c["gpus"]): c for c in kept}
        for model in args.models:
            for n in args.gpus:
                rows[(model, n)] = config(model, n, args.seed, args.budget)
                payload["configs"] = list(rows.values())
                payload["summary"] = summary(payload["configs"])
                write_results("bench_plans", payload, machine=machine)
        for line in _summary_lines(payload["summary"]):
            print(line)


#: AutoParallel runs: (mesh, layers of torchtitan's Llama 3 8B, global batch).
AUTOPARALLEL_RUNS = (("8", 2, 16), ("8,8", 2, 128), ("8", 32, 16))


def _translate(placements: dict[str, list[str]], axes: int) -> str | None:
    """AutoParallel's weights' placements as an expert style: every weight split on dim 0
    along every axis is FSDP over the whole mesh; column weights S(0) and row weights S(1) along
    the last axis is FSDP x Megatron TP; anything else has no expert twin."""
    weights = {k: v for k, v in placements.items() if k.endswith("weight") and "layers" in k}
    if all(v == ["S(0)" * axes] for v in weights.values()):
        return "fsdp"
    row = ("wo", "w2")
    if axes == 2 and all(
        v == [("S(0)S(1)" if any(r in k for r in row) else "S(0)S(0)")] for k, v in weights.items()
    ):
        return "fsdp+tp"
    return None


def autoparallel_part(path: str, budget: float) -> dict[str, Any]:
    """AutoParallel's plans and solve times against the search's, on Llama 3 8B shapes."""
    import json
    import os
    import subprocess
    import sys

    from rewrite.plans import expert, models, search

    out = []
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([path, os.environ.get("PYTHONPATH", "")])}
    src = path.split(os.pathsep)[0]
    for mesh, layers, batch in AUTOPARALLEL_RUNS:
        cmd = [sys.executable, "-m", "benchmarks._autoparallel_run", "--src", src, "--mesh", mesh,
               "--layers", str(layers), "--batch", str(batch)]  # fmt: skip
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
        wall = time.perf_counter() - t0
        line = next((x for x in proc.stdout.splitlines() if x.startswith("{")), None)
        if proc.returncode or line is None:
            out.append({"mesh": mesh, "layers": layers, "error": proc.stderr.strip()[-400:]})
            continue
        ap = json.loads(line)
        n = math.prod(int(x) for x in mesh.split(","))
        module, inputs = models.build("llama3-8b", batch=batch, num_hidden_layers=layers)
        ours = search(module, inputs, mesh=n, memory_cap=CAP, time_budget=budget,
                      sequence_parallel=SEQUENCE_PARALLEL, **NUMERICS)  # fmt: skip
        style = _translate(ap["placements"], len(mesh.split(",")))
        twin = (expert(module, inputs, mesh=n, style=style, checkpointing="none",
                       sequence_parallel=SEQUENCE_PARALLEL, **NUMERICS)
                if style else None)  # fmt: skip
        wq = ap["placements"].get("layers.*.attention.wq.weight", ["?"])
        ap = {k: v for k, v in ap.items() if k != "placements"}
        row = {**ap, "wq_placement": wq, "wall_s": round(wall, 1), "as_expert": style,
               "autoparallel_tps": _r(twin.cost["tokens_per_second"]) if twin else None,
               "autoparallel_gib": _r(twin.cost["peak_memory"] / GIB) if twin else None,
               "search_tps": _r(ours.cost.get("tokens_per_second", 0.0)),
               "search_gib": _r(ours.cost.get("peak_memory", 0.0) / GIB),
               "search_s": _r(ours.provenance["search_seconds"]),
               "search_steps": ours.provenance["search_steps"]}  # fmt: skip
        out.append(row)
        print(f"AutoParallel mesh {mesh:4s} layers {layers:2d}: trace+build {ap['trace_build_s']:.1f} s "
              f"solve {ap['solve_s']:.1f} s -> {style or 'no expert twin'} {wq} "
              f"{row['autoparallel_tps'] or float('nan'):.0f} TPS; search {row['search_tps']:.0f} TPS "
              f"in {row['search_s']:.1f} s")  # fmt: skip
    return {"source": "meta-pytorch/autoparallel (fetched; not committed)", "runs": out}


def _exists() -> bool:
    from benchmarks._common import RESULTS_DIR

    return (RESULTS_DIR / "bench_plans.json").exists()


def summary(configs: list[dict[str, Any]]) -> dict[str, Any]:
    """The done-when configurations: search vs best expert under the cap, and seconds."""
    by = {(c["model"], c["gpus"]): c for c in configs}
    rows = []
    for key in DONE_WHEN:
        c = by.get(key)
        if c is None:
            continue
        rows.append({"model": key[0], "gpus": key[1], "ratio": c["ratio"],
                     "seconds": c["seconds"],
                     "reaches_best_expert": None if c["ratio"] is None else c["ratio"] >= 1 - 1e-9,
                     "note": None if c["ratio"] is not None else "no plan fits 80 GiB"})  # fmt: skip
    beyond = sorted(
        ((c["model"], c["gpus"], c["ratio"]) for c in configs if c["ratio"]),
        key=lambda x: -x[2],
    )
    return {"done_when": rows, "beyond_10_percent": [b for b in beyond if b[2] >= 1.10]}


def _summary_lines(s: dict[str, Any]) -> list[str]:
    out = ["", "done-when configurations (search / best expert under 80 GiB):"]
    for r in s["done_when"]:
        out.append(f"  {r['model']:12s} {r['gpus']:4d}  x{r['ratio'] or float('nan'):.3f}  "
                   f"{r['seconds']:.1f} s  {r['note'] or ''}")  # fmt: skip
    out.append(f"configurations >= 10% beyond every expert: {s['beyond_10_percent']}")
    return out


if __name__ == "__main__":
    main()
