"""One training step of an applied plan, its collectives counted, against the single-process model.

`train_step` runs forward, loss and backward of each of a plan's microbatches (gradient
accumulation) and one AdamW step, counting each phase's collectives (`rewrite.plans.counting.CollectiveCounter`); `pipeline_step` does the same for a
pipeline plan's schedule.
`distributed_step` applies a plan to a workload inside a rank and returns the rank's loss and
output, the full gradients and updated parameters in the model's own layout, and the counts;
`reference_step` does the same in one process without a plan. `main` runs a list of cases under
``torchrun`` and writes each rank's results to a folder (JSON, tensors as safetensors) for a
parent process to compare.

Workloads (`build_workload`): the zoo's small GPT-2, Llama and BERT, and a small GPT-NeoX built
from a config in code (an architecture outside the zoo: fused per-head QKV, parallel residual,
partial rotary embeddings). Dropout is off (the models are in eval mode) so steps compare exactly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from rewrite.errors import PlanError
from rewrite.plans.counting import CollectiveCounter
from rewrite.plans.modules import original_layout
from rewrite.plans.plan import ParallelPlan

__all__ = [
    "StepResult",
    "Workload",
    "build_workload",
    "distributed_step",
    "exit_rank",
    "reference_step",
    "train_step",
]

WORKLOADS = ("gpt2", "llama", "bert", "gpt_neox")


@dataclass
class Workload:
    """A model, its global batch and its loss.

    Attributes:
        name: The workload's name.
        model: The module (eval mode: no dropout).
        inputs: ``batch x seq_len`` token ids, the global batch.
        targets: The loss targets for the global batch (token ids, or a ``batch x seq_len x
            hidden`` tensor for BERT).
        loss: ``(model_output, targets) -> scalar``, a mean over the batch it is given.
    """

    name: str
    model: nn.Module
    inputs: torch.Tensor
    targets: torch.Tensor
    loss: Callable[[Any, torch.Tensor], torch.Tensor]
    kwargs: dict[str, Any] = field(default_factory=dict)


def _lm_loss(out: Any, targets: torch.Tensor) -> torch.Tensor:
    logits = out.logits
    return nn.functional.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def _encoder_loss(out: Any, targets: torch.Tensor) -> torch.Tensor:
    hidden = out.last_hidden_state.float()
    return (hidden - targets).pow(2).mean() + out.pooler_output.float().pow(2).mean()


def output_tensor(out: Any) -> torch.Tensor:
    """The model output compared across runs: logits, or the encoder's last hidden state."""
    return out.logits if hasattr(out, "logits") else out.last_hidden_state


def _gpt_neox(seed: int) -> nn.Module:
    import transformers

    options: dict[str, Any] = {"rotary_pct": 0.5}  # partial rotary embeddings
    config = transformers.GPTNeoXConfig(
        **options,
        vocab_size=1000,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=128,
        max_position_embeddings=128,
        use_parallel_residual=True,
        tie_word_embeddings=False,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return transformers.GPTNeoXForCausalLM(config).eval()


def build_workload(name: str, *, batch: int = 4, seq_len: int = 16, seed: int = 0) -> Workload:
    """A seeded workload: the same weights, inputs and targets wherever it is built.

    Args:
        name: One of ``gpt2``, ``llama``, ``bert`` (the zoo's small sizes) or ``gpt_neox``.
        batch: The global batch.
        seq_len: Tokens per sequence.
        seed: Seeds the weights, the inputs and the targets.
    """
    if name not in WORKLOADS:
        raise PlanError(f"workload must be one of {WORKLOADS}, but got {name!r}.")
    if name == "gpt_neox":
        model = _gpt_neox(seed)
        kwargs: dict[str, Any] = {"use_cache": False}
    else:
        from rewrite import zoo

        zm = zoo.model(name, seed=seed, batch=1, seq_len=seq_len)
        model, kwargs = zm.module, dict(zm.kwargs)
    config: Any = model.config
    vocab = int(config.vocab_size)
    gen = torch.Generator().manual_seed(seed + 1)
    inputs = torch.randint(0, vocab, (batch, seq_len), generator=gen)
    if name == "bert":
        hidden = int(config.hidden_size)
        targets = torch.randn(batch, seq_len, hidden, generator=gen)
        return Workload(name, model, inputs, targets, _encoder_loss, kwargs)
    targets = torch.randint(0, vocab, (batch, seq_len), generator=gen)
    return Workload(name, model, inputs, targets, _lm_loss, kwargs)


@dataclass
class StepResult:
    """What one step produced on one rank.

    Attributes:
        loss: The rank's loss (over its share of the batch).
        output: The rank's output (logits or hidden states) for its share of the batch (None on
            a pipeline rank without the last stage).
        grads: Full gradients by parameter name, in the model's own layout (None: no gradient).
        params: Full parameters after the AdamW step, in the model's own layout.
        collectives: Collectives of the whole step, by kind (``CommDebugMode``).
        phases: The same per phase: ``forward`` (with the loss), ``backward``, ``optimizer``.
        api_collectives: Python ``torch.distributed`` calls of the step, by kind.
        batch_slice: The rows of the global batch this rank ran.
        model: The applied model (to keep training), or None.
        optimizer: Its optimizer, or None.
    """

    loss: float
    output: torch.Tensor | None
    grads: dict[str, torch.Tensor | None]
    params: dict[str, torch.Tensor]
    collectives: dict[str, int] = field(default_factory=dict)
    phases: dict[str, dict[str, int]] = field(default_factory=dict)
    api_collectives: dict[str, int] = field(default_factory=dict)
    batch_slice: tuple[int, int] = (0, 0)
    model: Any = None
    optimizer: Any = None


def train_step(
    model: nn.Module,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    kwargs: dict[str, Any] | None = None,
    *,
    microbatches: int = 1,
    defer_sync: bool = False,
    use_comm_debug_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, dict[str, CollectiveCounter]]:
    """Forward, loss and backward of each microbatch, then an optimizer step, each phase's
    collectives counted (over all microbatches).

    Gradient accumulation: each microbatch's loss (a mean over its rows) is scaled by
    ``1 / microbatches`` before its backward, so the accumulated gradient is the mean over the
    rows of ``inputs``, as one backward on all of them gives.

    Args:
        model: The (applied) model.
        inputs: This rank's ``batch x seq_len`` token ids.
        targets: Their targets.
        loss_fn: ``(output, targets) -> scalar``.
        optimizer: Steps the model's parameters.
        kwargs: Extra keyword inputs of the model.
        microbatches: Equal row slices of ``inputs`` run one after another.
        defer_sync: Sync gradients on the last microbatch only (``model`` is an FSDP2 module:
            ``set_requires_gradient_sync``); see `ParallelPlan.defers_gradient_sync`.
        use_comm_debug_mode: Count with ``CommDebugMode`` itself (see `CollectiveCounter`).

    Returns:
        The loss (mean over microbatches), the model output (all rows) and a
        `CollectiveCounter` per phase.

    Raises:
        PlanError: If the rows do not split into ``microbatches``.
    """
    rows = inputs.shape[0]
    if microbatches < 1 or rows % microbatches:
        raise PlanError(
            f"{rows} rows per rank do not split into {microbatches} microbatches; use a batch "
            "that is a multiple of the data-parallel ranks times the microbatches."
        )
    phases = {
        p: CollectiveCounter(use_comm_debug_mode) for p in ("forward", "backward", "optimizer")
    }
    per = rows // microbatches
    losses, outs = [], []
    for i in range(microbatches):
        if defer_sync:
            model.set_requires_gradient_sync(i == microbatches - 1)  # type: ignore[operator]
        rows_i = slice(i * per, (i + 1) * per)
        with phases["forward"]():
            out = model(inputs[rows_i], **(kwargs or {}))
            loss = loss_fn(out, targets[rows_i])
        with phases["backward"]():
            (loss / microbatches).backward()
        losses.append(loss.detach())
        outs.append(output_tensor(out).detach())
    with phases["optimizer"]():
        optimizer.step()
    return torch.stack(losses).mean(), torch.cat(outs), phases


def _full(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return (t.full_tensor() if isinstance(t, DTensor) else t).detach().clone()


def _optimizer(model: nn.Module, lr: float) -> torch.optim.Optimizer:
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01, foreach=False)


def data_parallel_slice(plan: ParallelPlan, mesh: Any, batch: int) -> tuple[int, int]:
    """This rank's rows ``[start, stop)`` of a global batch split over the data-parallel axes."""
    axes = [a for a in plan.mesh if a in plan.fsdp_axes or a in plan.replicate_axes]
    coord = mesh.get_coordinate() if axes else []
    index, size = 0, 1
    for a in axes:
        dim = list(plan.mesh).index(a)
        index = index * plan.mesh[a] + int(coord[dim])
        size *= plan.mesh[a]
    if batch % size:
        raise PlanError(
            f"The global batch {batch} does not split over {size} data-parallel ranks; use a "
            f"multiple of {size}."
        )
    per = batch // size
    return index * per, (index + 1) * per


def pipeline_step(
    model: Any,
    inputs: torch.Tensor,
    targets: torch.Tensor,
    loss_fn: Callable[[Any, torch.Tensor], torch.Tensor],
    optimizer: torch.optim.Optimizer,
    *,
    use_comm_debug_mode: bool = False,
) -> tuple[torch.Tensor | None, torch.Tensor | None, dict[str, CollectiveCounter]]:
    """One step of a `rewrite.plans.pipeline.PipelinedModel`: the schedule (forward and backward
    of every microbatch, interleaved: one phase, ``pipeline``), then the optimizer.

    Returns:
        The loss and the logits on the last stage's ranks (None elsewhere), and the counters.
    """
    from types import SimpleNamespace

    phases = {p: CollectiveCounter(use_comm_debug_mode) for p in ("pipeline", "optimizer")}

    def microbatch_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return loss_fn(SimpleNamespace(logits=logits), target)

    with phases["pipeline"]():
        loss, out = model.step(inputs, targets, microbatch_loss)
    with phases["optimizer"]():
        optimizer.step()
    return loss, out, phases


def distributed_step(
    plan: ParallelPlan,
    work: Workload,
    mesh: Any,
    *,
    lr: float = 1e-3,
    use_comm_debug_mode: bool = False,
) -> StepResult:
    """Apply ``plan`` to ``work.model`` on this rank and run one counted training step."""
    model = plan.apply(work.model, mesh)
    start, stop = data_parallel_slice(plan, mesh, work.inputs.shape[0])
    optimizer = _optimizer(model, lr)
    inputs, targets = work.inputs[start:stop], work.targets[start:stop]
    loss: torch.Tensor | None
    out: torch.Tensor | None
    if plan.pipeline is None:
        loss, out, phases = train_step(
            model,
            inputs,
            targets,
            work.loss,
            optimizer,
            work.kwargs,
            microbatches=plan.microbatches,
            defer_sync=plan.defers_gradient_sync and plan.microbatches > 1,
            use_comm_debug_mode=use_comm_debug_mode,
        )
    else:
        loss, out, phases = pipeline_step(
            model, inputs, targets, work.loss, optimizer, use_comm_debug_mode=use_comm_debug_mode
        )
    grads = {
        n: None if p.grad is None else original_layout(model, n, _full(p.grad))
        for n, p in model.named_parameters()
    }
    params = {n: original_layout(model, n, _full(p)) for n, p in model.named_parameters()}
    total: Counter[str] = Counter()
    api: Counter[str] = Counter()
    for c in phases.values():
        total.update(c.counts)
        api.update(c.api_counts)
    return StepResult(
        loss=float("nan") if loss is None else float(loss),
        output=out,
        grads=grads,
        params=params,
        collectives=dict(total),
        phases={p: dict(c.counts) for p, c in phases.items()},
        api_collectives=dict(api),
        batch_slice=(start, stop),
        model=model,
        optimizer=optimizer,
    )


def reference_step(work: Workload, *, lr: float = 1e-3) -> StepResult:
    """The same step in one process, on the whole batch, without a plan."""
    model = work.model
    optimizer = _optimizer(model, lr)
    out = model(work.inputs, **work.kwargs)
    loss = work.loss(out, work.targets)
    loss.backward()
    optimizer.step()
    return StepResult(
        loss=float(loss.detach()),
        output=output_tensor(out).detach(),
        grads={n: None if p.grad is None else p.grad.clone() for n, p in model.named_parameters()},
        params={n: p.detach().clone() for n, p in model.named_parameters()},
        batch_slice=(0, work.inputs.shape[0]),
    )


# --- under torchrun -----------------------------------------------------------------------------


def _model_fingerprint(model: nn.Module) -> dict[str, Any]:
    """What must not change when a plan is refused: parameter values, module types, hooks."""
    return {
        "params": {n: float(p.detach().double().sum()) for n, p in model.named_parameters()},
        "types": [type(m).__name__ for m in model.modules()],
        "hooks": sum(len(m._forward_pre_hooks) + len(m._forward_hooks) for m in model.modules()),
    }


def _run_case(case: dict[str, Any], out_dir: Path, rank: int) -> dict[str, Any]:
    from rewrite.plans.apply import init_mesh

    plan = ParallelPlan.from_dict(case["plan"])
    work = build_workload(
        case["model"],
        batch=case.get("batch", 4),
        seq_len=case.get("seq_len", 16),
        seed=case.get("seed", 0),
    )
    mesh = init_mesh(plan, "cpu")
    before = _model_fingerprint(work.model)
    try:
        result = distributed_step(
            plan,
            work,
            mesh,
            lr=case.get("lr", 1e-3),
            use_comm_debug_mode=case.get("comm_debug_mode", False),
        )
    except PlanError as exc:
        return {
            "id": case["id"],
            "error": str(exc),
            "unchanged": _model_fingerprint(work.model) == before,
        }
    tensors = {} if result.output is None else {"output": result.output.contiguous()}
    axis = plan.pipeline.axis if plan.pipeline is not None else None
    coord = mesh.get_coordinate()
    if all(c == 0 for a, c in zip(plan.mesh, coord) if a != axis):  # one copy of each tensor
        tensors.update(
            {f"grad/{n}": g.contiguous() for n, g in result.grads.items() if g is not None}
        )
        tensors.update({f"param/{n}": p.contiguous() for n, p in result.params.items()})
    from safetensors.torch import save_file

    save_file(tensors, str(out_dir / f"{case['id']}.rank{rank}.safetensors"))
    return {
        "id": case["id"],
        "loss": result.loss,
        "collectives": result.collectives,
        "phases": result.phases,
        "api_collectives": result.api_collectives,
        "batch_slice": list(result.batch_slice),
        "no_grad": sorted(n for n, g in result.grads.items() if g is None),
    }


def main(argv: list[str] | None = None) -> int:
    """Run cases (a JSON list) under ``torchrun``; write ``rank{r}.json`` and tensors to a folder.

    Each case: ``{"id", "model", "plan": <plan document>, "batch", "seq_len", "seed", "lr"}``.
    """
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("cases", type=Path)
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    results = []
    try:
        for case in json.loads(args.cases.read_text()):
            results.append(_run_case(case, args.out_dir, rank))
            dist.barrier()
    finally:
        (args.out_dir / f"rank{rank}.json").write_text(json.dumps(results, indent=1))
        dist.destroy_process_group()
    return 0


def exit_rank(status: int) -> None:
    """End a ``torchrun`` rank without finalizing the interpreter.

    Gloo's worker thread releases a finished collective's work object after the caller has
    woken, and that drops the Python tensor it holds, which takes the GIL. When that lands while
    the interpreter is finalizing, the thread is cancelled inside a ``noexcept`` destructor and
    the rank aborts ("terminate called without an active exception", SIGABRT) after all its work
    is done and printed: about 1 run in 10 of ``rewrite.plans.run`` ending on a broadcast
    (`c10d::ProcessGroupGloo::AsyncWork::~AsyncWork` on the gloo thread, ``Py_FinalizeEx`` on the
    main one, seen in a core dump). The rank has flushed its output and destroyed its process
    group by now, so it leaves with ``os._exit`` and skips finalization.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    exit_rank(main())
