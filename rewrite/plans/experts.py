"""Expert plans: the recipes users write by hand, as strategies costed like any other.

* ``ddp``: every axis data parallel with replicated parameters (DDP).
* ``fsdp``: every axis data parallel with sharded parameters (FSDP2 / ZeRO-3).
* ``tp``: Megatron tensor parallelism with sequence parallelism over every device (one
  tensor-parallel axis as large as the mesh, up to one node; data parallel with sharded
  parameters over the rest when the mesh is larger than a node).
* ``fsdp+tp``: torchtitan's 2-D Llama plan: tensor parallelism inside a node (8 ways, or the
  largest divisor of the device count and of the model's key/value heads up to it) and FSDP over
  the rest.
* ``fsdp+tp+pp``: torchtitan's 3-D plan for 405B: tensor parallelism inside a node, pipeline
  stages along the outermost axis (torchtitan's split, 1F1B or
  interleaved 1F1B), FSDP over the middle axis without resharding between microbatches, one
  sample per microbatch (at least as many microbatches as stages).

Each takes a checkpointing mode for every block (``none``, ``selective``, ``full``). The
Megatron layout (`megatron_layout`) is the recipe's, stated structurally so that it applies to
any block: a linear whose output reaches the block's output (the residual stream) without passing
another linear is row parallel, every other linear column parallel; norms see the sequence split;
the embedding and the head are split along the vocabulary.
"""

from __future__ import annotations

from rewrite.errors import PlanError
from rewrite.ir import Graph
from rewrite.plans.layout import ModelLayout
from rewrite.plans.strategy import Strategy, TPLayout

__all__ = ["STYLES", "expert_strategy", "megatron_layout"]

_VOCAB = 8192  # an embedding or head this wide is split along the vocabulary
#: Expert plan styles.
STYLES = ("ddp", "fsdp", "tp", "fsdp+tp", "fsdp+tp+pp")


def _reaches_output(graph: Graph, start: int) -> bool:
    """Whether ``start``'s output reaches a graph output without passing another linear."""
    outs = {v.node for v in graph.outputs}
    seen, stack = set(), [start]
    while stack:
        nid = stack.pop()
        if nid in outs:
            return True
        for u in graph.users(nid):
            if u not in seen and graph.node(u).op not in ("linear", "addmm"):
                seen.add(u)
                stack.append(u)
    return False


def megatron_layout(layout: ModelLayout, sequence_parallel: bool = True) -> TPLayout:
    """Megatron's tensor-parallel layout of ``layout``'s block (see the module docstring)."""
    from rewrite.plans.actions import _weights

    g = layout.block_graph
    node_of = {}
    for node in g:
        if node.op == "linear":
            node_of[g.node(node.inputs[1].node).attrs.get("name")] = node.id
        elif node.op == "addmm":
            node_of[g.node(node.inputs[2].node).attrs.get("name")] = node.id
    block: dict[str, int] = {}
    for w, b, col, row in _weights(g):
        is_row = _reaches_output(g, node_of[w])
        block[w] = row if is_row else col
        if b is not None and not is_row:
            block[b] = 0
    rest: dict[str, int] = {}
    if layout.rest_graph is not None:
        for node in layout.rest_graph:
            if node.op == "embedding":
                table = layout.rest_graph.node(node.inputs[0].node)
                if table.op == "param" and table.type.shape[0] >= _VOCAB:
                    rest[table.attrs["name"]] = 0
            if node.op == "linear" and node.out(0) in layout.rest_graph.outputs:
                head = layout.rest_graph.node(node.inputs[1].node)
                if head.op == "param" and head.type.shape[0] >= _VOCAB:
                    rest[head.attrs["name"]] = 0
                    if len(node.inputs) == 3:
                        bias = layout.rest_graph.node(node.inputs[2].node)
                        if bias.op == "param":
                            rest[bias.attrs["name"]] = 0
    return TPLayout(block, rest, sequence_parallel)


def expressible_layout(
    layout: ModelLayout, t: int, sequence_parallel: str = "auto"
) -> TPLayout | None:
    """Megatron's layout on ``t`` devices with sequence parallelism when DTensor can express it
    on this model, else without (a model that derives positions from its embedding's output, or
    reads one token for its head, needs the whole sequence there); None when neither can be
    expressed (``t`` does not divide the heads, or a split module is not ``nn.Linear`` or
    ``Conv1D``).
    ``sequence_parallel`` (`rewrite.plans.convert.SEQUENCE_PARALLEL`): ``always`` keeps it on a
    model that is not sequence-parallel safe, ``never`` leaves it out."""
    from rewrite.plans.convert import SP_UNSAFE, dtensor_problems

    modes = {"auto": (True, False), "always": (True, False), "never": (False,)}[sequence_parallel]
    for sp in modes:
        lay = megatron_layout(layout, sequence_parallel=sp)
        problems = dtensor_problems(layout, Strategy({"tp": t}, tp="tp", layout=lay))
        if sequence_parallel == "always":
            problems.pop(SP_UNSAFE, None)
        if not problems:
            return lay
    return None


def _tp_degree(
    layout: ModelLayout, n: int, per_node: int, sequence_parallel: str = "auto"
) -> tuple[int, TPLayout]:
    """The largest tensor-parallel degree up to a node that divides ``n`` and whose Megatron
    layout DTensor can express (with its layout); the largest dividing one with the
    sequence-parallel layout (whose plan then lists its problems) when none can."""
    for t in range(min(per_node, n), 1, -1):
        if n % t == 0:
            lay = expressible_layout(layout, t, sequence_parallel)
            if lay is not None:
                return t, lay
    for t in range(min(per_node, n), 1, -1):
        if n % t == 0 and _kv_heads(layout) % t == 0:
            return t, megatron_layout(layout)
    return 1, megatron_layout(layout)


def _kv_heads(layout: ModelLayout) -> int:
    """The smallest head count among the block's attention inputs."""
    best = 0
    for node in layout.block_graph:
        if node.op == "sdpa" and node.in_types[1].rank >= 3:
            h = node.in_types[1].shape[-3]
            best = h if not best else min(best, h)
    return best or 1


def expert_strategy(
    layout: ModelLayout,
    n: int,
    style: str,
    checkpoint: str = "none",
    per_node: int = 8,
    schedule: str = "1F1B",
    pp: int | None = None,
    sequence_parallel: str = "auto",
    **numerics: object,
) -> Strategy:
    """The expert plan ``style`` on ``n`` devices.

    Args:
        layout: The model.
        n: Devices.
        style: One of `STYLES`.
        checkpoint: Checkpointing of every block.
        per_node: Devices per node (tensor parallelism stays inside one).
        schedule: Pipeline schedule for ``fsdp+tp+pp`` (``1F1B`` or ``interleaved_1F1B``).
        pp: Pipeline degree for ``fsdp+tp+pp`` (default 8, or less to fit the devices).
        sequence_parallel: One of `rewrite.plans.convert.SEQUENCE_PARALLEL`.
        **numerics: ``precision``, ``float8``, ``compile``, ``async_tp`` passed on.

    Raises:
        PlanError: On an unknown style, or a device count the style cannot split.
    """
    if style not in STYLES:
        raise PlanError(f"style must be one of {STYLES}, but got {style!r}.")
    ck = (checkpoint,)
    if style in ("ddp", "fsdp"):
        axes = {"dp": n}
        role = {"replicate": ("dp",)} if style == "ddp" else {"fsdp": ("dp",)}
        return Strategy(axes, checkpoint=ck, **role, **numerics)  # type: ignore[arg-type]
    t, lay = _tp_degree(layout, n, per_node, sequence_parallel)
    if t == 1:
        raise PlanError(f"No tensor-parallel degree > 1 divides both {n} devices and the heads.")
    if style in ("tp", "fsdp+tp"):
        dp = n // t
        if style == "tp" and dp == 1:
            return Strategy({"tp": t}, tp="tp", layout=lay, checkpoint=ck, **numerics)  # type: ignore[arg-type]
        return Strategy({"dp": dp, "tp": t}, tp="tp", fsdp=("dp",), layout=lay, checkpoint=ck,
                        **numerics)  # type: ignore[arg-type]  # fmt: skip
    rest = n // t
    stages = pp or next((s for s in (8, 4, 2) if rest % s == 0 and rest // s >= 1), 0)
    if not stages or rest % stages:
        raise PlanError(f"{n} devices do not split into tp {t} x pp x dp.")
    v = 2 if schedule == "interleaved_1F1B" else 1
    dp = rest // stages
    local = layout.batch // dp if layout.batch % dp == 0 else stages
    micro = local if local >= stages and local % stages == 0 else stages
    return Strategy(
        {"pp": stages, "dp": dp, "tp": t}, tp="tp", pp="pp", fsdp=("dp",) if dp > 1 else (),
        layout=lay, checkpoint=ck, microbatches=micro, schedule=schedule, virtual_stages=v,
        reshard_after_forward=False, **numerics,  # type: ignore[arg-type]
    )  # fmt: skip
