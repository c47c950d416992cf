"""What one training step of each hand-written plan communicates, measured under torchrun.

For each model (the zoo's small Llama, GPT-2 and BERT, and a small GPT-NeoX built in code), each
style (DDP, FSDP, TP, TP with sequence parallelism on 2 ranks; HSDP, FSDP x TP and FSDP x TP x
SP on a 2 x 2 mesh of 4 ranks) and each checkpointing (none, selective, full), the ranks apply the
plan (`rewrite.plans.apply`), run one step (forward, loss, backward, AdamW) and count their
collectives per phase (`rewrite.plans.harness`); the parent checks the step against one process
(`rewrite.plans.launch.compare_case`). The table (collectives per rank and step, forward +
backward) is what the planner's modeled ``plan.collectives`` reconcile against.

Usage::

    python -m benchmarks.bench_plans_apply                  # everything: 8 launches, ~15 min
    python -m benchmarks.bench_plans_apply --models llama --checkpointing none,full

Results: ``benchmarks/results/bench_plans_apply.json`` (saved after every launch).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import compact_json, machine_info, round_floats, write_results
from rewrite.plans.handwritten import handwritten_plan
from rewrite.plans.harness import build_workload, reference_step
from rewrite.plans.launch import compare_case, run_cases

STYLES = {2: ("ddp", "fsdp", "tp", "tp+sp"), 4: ("hsdp", "fsdp+tp", "fsdp+tp+sp")}
MODELS = ("llama", "gpt2", "bert", "gpt_neox")
KINDS = (("all_gather", "AG"), ("reduce_scatter", "RS"), ("all_reduce", "AR"))


def run_model(model: str, nproc: int, checkpointing: list[str]) -> list[dict[str, Any]]:
    """One launch: every style and checkpointing of ``model`` on ``nproc`` ranks."""
    work = build_workload(model)
    reference = reference_step(build_workload(model))
    cases = []
    for style in STYLES[nproc]:
        mesh = (2, nproc // 2) if nproc == 4 else nproc
        for ck in checkpointing:
            plan = handwritten_plan(work.model, style, mesh, checkpointing=ck)
            cases.append({"id": f"{model}-{style}-{ck}", "model": model, "plan": plan.to_dict()})
    with tempfile.TemporaryDirectory() as tmp:
        start = time.monotonic()
        ranks = run_cases(cases, nproc, Path(tmp), timeout=1200)
        seconds = time.monotonic() - start
        rows = []
        for c in cases:
            m = compare_case(c, ranks, Path(tmp), reference)
            res = next(r for r in ranks[0] if r["id"] == c["id"])
            _, style, ck = c["id"].split("-")
            rows.append(
                {
                    "model": model,
                    "ranks": nproc,
                    "style": style,
                    "checkpointing": ck,
                    "collectives": res["collectives"],
                    "phases": res["phases"],
                    "matches_one_process": not m.problems,
                    "output_error": m.output,
                    "grad_error_over_tolerance": m.grad,
                    "param_error_over_tolerance": m.param,
                    "problems": list(m.problems),
                }
            )
    print(f"{model} on {nproc} ranks: {len(cases)} plans in {seconds:.0f} s", flush=True)
    return rows


COLUMNS = (
    "model", "ranks", "style", "checkpointing",
    "all_gather_fwd", "all_gather_bwd", "reduce_scatter_fwd", "reduce_scatter_bwd",
    "all_reduce_fwd", "all_reduce_bwd", "optimizer_collectives",
    "matches_one_process", "output_error", "grad_error_over_tolerance", "param_error_over_tolerance",
)  # fmt: skip


def flat(row: dict[str, Any]) -> list[Any]:
    """One row as a list in `COLUMNS` order (one line of the results file)."""
    fwd, bwd = row["phases"]["forward"], row["phases"]["backward"]
    counts = [p.get(kind, 0) for kind, _ in KINDS for p in (fwd, bwd)]
    return [
        row["model"], row["ranks"], row["style"], row["checkpointing"], *counts,
        sum(row["phases"]["optimizer"].values()), row["matches_one_process"],
        row["output_error"], row["grad_error_over_tolerance"], row["param_error_over_tolerance"],
    ]  # fmt: skip


def cell(row: dict[str, Any]) -> str:
    """``AG f+b, RS f+b, AR f+b`` for one row (kinds absent in both phases left out)."""
    fwd, bwd = row["phases"]["forward"], row["phases"]["backward"]
    parts = [
        f"{short} {fwd.get(kind, 0)}+{bwd.get(kind, 0)}"
        for kind, short in KINDS
        if fwd.get(kind) or bwd.get(kind)
    ]
    mark = "" if row["matches_one_process"] else " (MISMATCH)"
    return (", ".join(parts) or "none") + mark


def table(rows: list[dict[str, Any]]) -> str:
    """Markdown: a row per (ranks, style, checkpointing), a column per model."""
    models = [m for m in MODELS if any(r["model"] == m for r in rows)]
    keys = sorted(
        {(r["ranks"], r["style"], r["checkpointing"]) for r in rows},
        key=lambda k: (
            k[0],
            list(STYLES[k[0]]).index(k[1]),
            ("none", "selective", "full").index(k[2]),
        ),
    )
    lines = [
        "| ranks | style | checkpointing | " + " | ".join(models) + " |",
        "|---|---|---|" + "---|" * len(models),
    ]
    for k in keys:
        cells = [
            next(
                (
                    cell(r)
                    for r in rows
                    if (r["ranks"], r["style"], r["checkpointing"]) == k and r["model"] == m
                ),
                "",
            )
            for m in models
        ]
        lines.append(f"| {k[0]} | {k[1]} | {k[2]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=",".join(MODELS))
    parser.add_argument("--ranks", default="2,4")
    parser.add_argument("--checkpointing", default="none,selective,full")
    args = parser.parse_args()
    machine = machine_info()
    rows: list[dict[str, Any]] = []
    ckpt = args.checkpointing.split(",")
    for nproc in (int(n) for n in args.ranks.split(",")):
        for model in args.models.split(","):
            rows += run_model(model, nproc, ckpt)
            payload = {
                "settings": {"batch": 4, "seq_len": 16, "seed": 0, "lr": 1e-3, "backend": "gloo"},
                "columns": list(COLUMNS),
                "rows": [round_floats(flat(r)) for r in rows],
            }
            write_results("bench_plans_apply", payload, machine=machine, dumps=compact_json)
    print(table(rows))


if __name__ == "__main__":
    main()
