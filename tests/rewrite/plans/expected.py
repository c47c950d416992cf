"""The collectives one training step of a plan should issue per rank, derived from its styles.

Written from how DTensor's parallel styles, FSDP2 and checkpointing work (torch 2.13), not from
measurements; the tests assert the measured counts equal these. The rules, per rank and step:

FSDP over ``G`` groups (the modules marked ``fsdp`` and the root): forward one all-gather per
group; backward one all-gather per group but the root (the root keeps its parameters after
forward) and one reduce-scatter per group; HSDP adds one all-reduce per group. ``replicate``
(DDP) of the root: one all-reduce in backward.

Tensor parallelism, per module:

- ``colwise`` fed a local tensor (input ``R``): backward all-reduces its input gradient (one
  all-reduce per column-wise module: DTensor reduces the partial input gradient where it wrapped
  the local input); fed a sequence-sharded DTensor (input ``S(1)``): forward all-gather,
  backward reduce-scatter. Output ``R``: forward all-gather.
- ``rowwise``: output ``R``: forward all-reduce; output ``S(1)``: forward reduce-scatter,
  backward all-gather.
- ``sequence``: backward one all-reduce per parameter (its gradient is partial: a sum over this
  rank's positions).
- ``prepare_input`` / ``prepare_output``: per redistributed tensor, ``S -> R``: forward
  all-gather; ``R -> S``: backward all-gather.

Checkpointing a block recomputes, in backward, its tensor-parallel forward collectives; FSDP's
parameters are already gathered for backward, so it adds none. ``full`` recomputes all but the
block's last collective when backward does not need its result (pre-norm blocks: the MLP's
row-wise output; torch stops recomputing early); ``selective`` additionally keeps the outputs of
reduce-scatters (torchtitan's policy saves them).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from torch import nn

from rewrite.plans.plan import ParallelPlan, TensorParallel

#: Per architecture: (block list, the block-relative name of its last tensor-parallel module,
#: whether backward needs that module's result).
BLOCKS = {
    "LlamaForCausalLM": ("model.layers", "mlp.down_proj", False),
    "GPT2LMHeadModel": ("transformer.h", "mlp.c_proj", False),
    "GPTNeoXForCausalLM": ("gpt_neox.layers", "mlp.dense_4h_to_h", False),
    "BertModel": ("encoder.layer", "output.dense", True),
}


def _fwd_bwd(tp: TensorParallel, n_params: int) -> tuple[list[str], list[str]]:
    """Forward collectives (in order) and backward collectives of one styled module."""
    fwd: list[str] = []
    bwd: list[str] = []
    inputs, outputs = tp.input_layouts or (), tp.output_layouts or ()
    if tp.style == "colwise":
        if inputs and inputs[0].startswith("S"):
            fwd.append("all_gather")
            bwd.append("reduce_scatter")
        else:
            bwd.append("all_reduce")
        if outputs == ("R",):
            fwd.append("all_gather")
    elif tp.style == "rowwise":
        if outputs and outputs[0].startswith("S"):
            fwd.append("reduce_scatter")
            bwd.append("all_gather")
        else:
            fwd.append("all_reduce")
    elif tp.style == "sequence":
        bwd.extend(["all_reduce"] * n_params)
    else:
        if tp.style == "prepare_input":
            pairs = list(zip(inputs, tp.desired_input_layouts or ()))
            kw, want = tp.input_kwarg_layouts or {}, tp.desired_input_kwarg_layouts or {}
            pairs += [(kw[k], want[k]) for k in kw]
        else:
            pairs = list(zip(outputs, tp.desired_output_layouts or ()))
        for have, need in pairs:
            if have.startswith("S") and need == "R":
                fwd.append("all_gather")
            elif have == "R" and need.startswith("S"):
                bwd.append("all_gather")
    return fwd, bwd


def expected_collectives(plan: ParallelPlan, model: nn.Module) -> dict[str, int]:
    """The derived counts, by kind, for ``plan`` (concrete module names) on ``model``."""
    counts: Counter[str] = Counter()
    _, last, last_needed = BLOCKS[type(model).__name__]
    ckpt = {n: mp.checkpoint for n, mp in plan.modules.items() if mp.checkpoint != "none"}
    recompute: dict[str, list[tuple[str, list[str]]]] = {b: [] for b in ckpt}
    for name, mp in plan.modules.items():
        if mp.tp is None:
            continue
        n_params = sum(1 for _ in model.get_submodule(name).parameters())
        fwd, bwd = _fwd_bwd(mp.tp, n_params)
        counts.update(fwd)
        counts.update(bwd)
        block = next((b for b in ckpt if name.startswith(b + ".")), None)
        if block is not None and fwd:
            recompute[block].append((name[len(block) + 1 :], fwd))
    for block, mode in ckpt.items():
        again = [
            (rel, kinds) for rel, kinds in recompute[block] if not (rel == last and not last_needed)
        ]
        for _, kinds in again:
            counts.update(k for k in kinds if not (mode == "selective" and k == "reduce_scatter"))
    groups = 1 + sum(1 for n, mp in plan.modules.items() if mp.fsdp and n)
    if plan.fsdp_axes:
        counts["all_gather"] += 2 * groups - 1
        counts["reduce_scatter"] += groups
        if plan.replicate_axes:
            counts["all_reduce"] += groups
    elif plan.replicate_axes:
        counts["all_reduce"] += 1
    return {k: v for k, v in counts.items() if v}


def expected_pipeline(plan: ParallelPlan, model: nn.Module, pp_rank: int) -> dict[str, int]:
    """The derived first-step counts of one pipeline rank, for a plan without FSDP.

    Per stage this rank holds and per microbatch: one send and one receive of activations and
    of their gradients across each of the stage's edges to other ranks; once per step, the
    schedule's warm-up vote (forward) and its result (backward) across each edge. Tensor
    parallelism inside the stage counts as in `expected_collectives`, once per microbatch.
    """
    spec = plan.pipeline
    assert spec is not None and not plan.fsdp_axes and not plan.replicate_axes
    size, m, n = plan.mesh[spec.axis], spec.microbatches, len(spec.stages)
    counts: Counter[str] = Counter()
    for s in range(pp_rank, n, size):
        edges = (s > 0) + (s < n - 1)
        counts["send_recv"] += 2 * m * edges + 2 * edges
        held = spec.stages[s]
        inside = {
            k: mp
            for k, mp in plan.modules.items()
            if any(k == u or k.startswith(u + ".") for u in held)
        }
        part = replace(plan, modules=inside, pipeline=None)
        for kind, v in expected_collectives(part, model).items():
            counts[kind] += v * m
    return dict(counts)
