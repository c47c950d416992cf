"""Run a saved plan: train a few steps of a model under ``torchrun``, optionally verified.

Usage (``PYTHONPATH`` set to the checkout when running from source)::

    torchrun --nproc_per_node 4 -m rewrite.plans.run PLAN.json --model llama --steps 3
    torchrun --nproc_per_node 2 -m rewrite.plans.run PLAN.json --model gpt2 --verify

Each rank builds the model (``gpt2``, ``llama``, ``bert``: the zoo's small sizes, seeded;
``gpt_neox``: a small GPT-NeoX), applies the plan (`ParallelPlan.apply`), and trains ``--steps``
steps of AdamW on a seeded batch split over the plan's data-parallel axes, counting each step's
collectives. Rank 0 prints one JSON line per step (the mean loss over the ranks that compute one,
rank 0's collectives) and a summary. With
``--verify``, the first step is checked against the same step in one process (rank 0 computes
it): outputs, gradients and parameters within `rewrite.plans.launch.Tolerance`, and the plan's
modeled ``collectives`` (when it has them) against the counted ones. The exit status is 1 when
verification fails, 2 when the plan is refused.

For a model of your own, the same steps in a script::

    import torch.distributed as dist
    from rewrite.plans import load
    from rewrite.plans.apply import init_mesh

    dist.init_process_group("gloo")           # "nccl" on GPUs
    plan = load("plan.json")
    mesh = init_mesh(plan, "cpu")             # the plan's axes, names and sizes, in order
    model = plan.apply(model, mesh)           # identical model on every rank
    # ... train as usual; split each batch over the plan's data-parallel axes
    # (rewrite.plans.harness.data_parallel_slice gives this rank's rows).
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter
from dataclasses import replace
from typing import Any

import torch

from rewrite.errors import PlanError
from rewrite.plans.harness import (
    WORKLOADS,
    build_workload,
    data_parallel_slice,
    distributed_step,
    exit_rank,
    pipeline_step,
    reference_step,
    train_step,
)
from rewrite.plans.plan import load


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m rewrite.plans.run", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("plan", help="a plan saved by ParallelPlan.save")
    parser.add_argument("--model", required=True, choices=WORKLOADS)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--batch", type=int, default=4, help="global batch (rows)")
    parser.add_argument("--seq-len", type=int, default=16)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--precision", choices=("plan", "fp32", "bf16"), default="plan", help="override the plan's"
    )
    parser.add_argument("--verify", action="store_true", help="check step 1 against one process")
    return parser


def _verify(args: argparse.Namespace, plan: Any, first: Any) -> dict[str, Any]:
    """Rank 0: the first step against one process, and the modeled collectives."""
    from rewrite.plans.launch import Tolerance, step_errors

    tol = Tolerance()
    work = build_workload(args.model, batch=args.batch, seq_len=args.seq_len, seed=args.seed)
    ref = reference_step(work, lr=args.lr)
    start, stop = first.batch_slice
    out = 0.0  # a pipeline rank without the last stage has no output to compare
    if first.output is not None and ref.output is not None:
        out = float((first.output - ref.output[start:stop]).abs().max())
    problems: list[str] = []  # a pipeline rank holds its own stages' parameters only
    grad, param = step_errors(
        ref, first.grads, first.params, args.lr, tol, problems, every_param=False
    )
    if problems and plan.precision == "bf16" and (plan.fsdp_axes or plan.replicate_axes):
        problems.append(
            "the plan computes in bf16 and the reference in fp32: verify with --precision fp32"
        )
    modeled = {k: v for k, v in plan.collectives.items() if v}
    report: dict[str, Any] = {
        "output_error": out,
        "grad_error_over_tolerance": grad,
        "param_error_over_tolerance": param,
        "collectives_modeled": modeled or None,
        "collectives_counted": first.collectives,
        "problems": problems,
    }
    report["ok"] = (
        out <= tol.output and not problems and (not modeled or modeled == first.collectives)
    )
    return report


def _last_loss(loss: float) -> float:
    """Rank 0's loss, or under a pipeline (where rank 0 may not hold the last stage) the mean
    loss of the ranks that do (an all-reduce outside the counted step)."""
    import torch.distributed as dist

    have = not math.isnan(loss)
    both = torch.tensor([loss if have else 0.0, 1.0 if have else 0.0], dtype=torch.float64)
    dist.all_reduce(both)
    return float(both[0] / both[1]) if both[1] else float("nan")


def main(argv: list[str] | None = None) -> int:
    """Run the plan; see the module docstring. Returns the exit status."""
    args = _parser().parse_args(argv)
    import torch.distributed as dist

    from rewrite.plans.apply import init_mesh

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    try:
        plan = load(args.plan)
        if args.precision != "plan":
            plan = replace(plan, precision=args.precision)
        mesh = init_mesh(plan, "cpu")
        work = build_workload(args.model, batch=args.batch, seq_len=args.seq_len, seed=args.seed)
        try:
            first = distributed_step(plan, work, mesh, lr=args.lr)
        except PlanError as exc:
            if rank == 0:
                print(json.dumps({"refused": str(exc)}), flush=True)
            return 2
        lines = [{"step": 1, "loss": _last_loss(first.loss), "collectives": first.collectives}]
        model, optimizer = first.model, first.optimizer
        loss: torch.Tensor | None
        start, stop = data_parallel_slice(plan, mesh, args.batch)
        rows = (work.inputs[start:stop], work.targets[start:stop])
        for step in range(2, args.steps + 1):
            optimizer.zero_grad()
            if plan.pipeline is None:
                loss, _, phases = train_step(
                    model,
                    *rows,
                    work.loss,
                    optimizer,
                    work.kwargs,
                    microbatches=plan.microbatches,
                    defer_sync=plan.defers_gradient_sync and plan.microbatches > 1,
                )
            else:
                loss, _, phases = pipeline_step(model, *rows, work.loss, optimizer)
            counts: Counter[str] = Counter()
            for c in phases.values():
                counts.update(c.counts)
            value = _last_loss(float("nan") if loss is None else float(loss))
            lines.append({"step": step, "loss": value, "collectives": dict(counts)})
        status = 0
        if rank == 0:
            for line in lines:
                print(json.dumps(line), flush=True)
            summary: dict[str, Any] = {"plan": plan.name, "mesh": plan.mesh, "model": args.model}
            if args.verify:
                summary["verify"] = _verify(args, plan, first)
                status = 0 if summary["verify"]["ok"] else 1
            print(json.dumps({"summary": summary}), flush=True)
        flag = torch.tensor([status])
        dist.broadcast(flag, src=0)
        return int(flag.item())
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main())
