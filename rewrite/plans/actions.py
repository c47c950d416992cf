"""Sharding actions: the search's moves, as rules with priors.

Two families, both data (a name, one sentence, and a function listing the moves it offers from a
state), so that a search, the docs and a tuner read the same objects:

* block actions (`BLOCK_ACTIONS`) change one block's tensor-parallel layout, a `TPLayout`: split
  one weight's output dimension (column parallel), its input dimension (row parallel), replicate
  it, or split the residual stream along the sequence. Nothing pairs a column-parallel weight
  with a row-parallel one: `rewrite.plans.propagate` prices what each choice costs, and a
  search that finds Megatron's pairing finds it from these single moves;
* plan actions (`PLAN_ACTIONS`) change a `Strategy`: factor the devices into tensor, pipeline or
  context parallelism, shard or replicate parameters, checkpoint more or fewer blocks, change
  microbatches or the pipeline schedule, keep parameters gathered between forward and backward.

A search weighs the moves by the actions' priors (`DEFAULT_PRIORS`, a mapping name -> weight
that `rewrite.plans.search` takes and a tuner can tune): when it may evaluate fewer moves than are
offered, it samples them in proportion to their action's prior.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from rewrite.ir import Graph
from rewrite.plans.strategy import Strategy, TPLayout

__all__ = [
    "BLOCK_ACTIONS",
    "DEFAULT_PRIORS",
    "PLAN_ACTIONS",
    "BlockAction",
    "PlanAction",
    "PlanContext",
    "checkpoint_pattern",
]


@dataclass(frozen=True)
class BlockAction:
    """A move on a block's tensor-parallel layout.

    Attributes:
        name: Unique name.
        doc: One sentence.
        moves: ``moves(layout, block graph) -> new layouts``.
    """

    name: str
    doc: str
    moves: Callable[[TPLayout, Graph], list[TPLayout]]


def _weights(graph: Graph) -> list[tuple[str, str | None, int, int]]:
    """Weights of linears (``linear``: ``W[N, K]``; GPT-2's ``Conv1D`` as ``addmm``:
    ``W[K, N]``), with their bias parameter's name, the output (column) and input (row)
    dimension of the weight."""
    out = []
    for node in graph:
        if node.op == "linear" and graph.node(node.inputs[1].node).op == "param":
            w = graph.node(node.inputs[1].node).attrs["name"]
            b = None
            if len(node.inputs) == 3 and graph.node(node.inputs[2].node).op == "param":
                b = graph.node(node.inputs[2].node).attrs["name"]
            out.append((w, b, 0, 1))
        elif node.op == "addmm" and graph.node(node.inputs[2].node).op == "param":
            w = graph.node(node.inputs[2].node).attrs["name"]
            bias = graph.node(node.inputs[0].node)
            out.append((w, bias.attrs["name"] if bias.op == "param" else None, 1, 0))
    return out


def _set(lay: TPLayout, w: str, b: str | None, dim: int | None, col: bool = False) -> TPLayout:
    block = {k: v for k, v in lay.block.items() if k not in (w, b)}
    if dim is not None:
        block[w] = dim
        if b is not None and col:
            block[b] = 0
    return TPLayout(block, lay.rest, lay.sequence_parallel)


def _split(columns: bool) -> Callable[[TPLayout, Graph], list[TPLayout]]:
    def moves(lay: TPLayout, graph: Graph) -> list[TPLayout]:
        out = []
        for w, b, col, row in _weights(graph):
            dim = col if columns else row
            if lay.block.get(w) != dim:
                out.append(_set(lay, w, b, dim, columns))
        return out

    return moves


def _consumers(lay: TPLayout, graph: Graph) -> list[TPLayout]:
    """For each activation read by several linears: split every one of them by columns (the
    activation's consumers compute its output features' shards)."""
    groups: dict[object, list[tuple[str, str | None, int]]] = {}
    by_weight = {w: (w, b, col) for w, b, col, _ in _weights(graph)}
    for node in graph:
        if node.op == "linear" and graph.node(node.inputs[1].node).op == "param":
            w = graph.node(node.inputs[1].node).attrs["name"]
            groups.setdefault(node.inputs[0], []).append(by_weight[w])
    out = []
    for members in groups.values():
        if len(members) > 1 and any(lay.block.get(w) != col for w, _, col in members):
            new = lay
            for w, b, col in members:
                new = _set(new, w, b, col, True)
            out.append(new)
    return out


def _replicate(lay: TPLayout, graph: Graph) -> list[TPLayout]:
    return [_set(lay, w, b, None) for w, b, _, _ in _weights(graph) if w in lay.block]


def _sequence(lay: TPLayout, graph: Graph) -> list[TPLayout]:
    return [TPLayout(lay.block, lay.rest, not lay.sequence_parallel)]


#: Moves on a block's tensor-parallel layout.
BLOCK_ACTIONS: tuple[BlockAction, ...] = (
    BlockAction(
        "shard_weight_columns", "split one weight's output dim (column parallel)", _split(True)
    ),
    BlockAction("shard_weight_rows", "split one weight's input dim (row parallel)", _split(False)),
    BlockAction(
        "shard_activation_consumers",
        "split by columns every linear that reads one activation",
        _consumers,
    ),
    BlockAction("replicate_weight", "replicate one weight on the tensor-parallel axis", _replicate),
    BlockAction(
        "sequence_parallel", "split (or join) the residual stream along the sequence", _sequence
    ),
)


# ------------------------------------------------------------------------------ plan moves
@dataclass(frozen=True)
class PlanContext:
    """What plan moves need to know.

    Attributes:
        n_blocks: Blocks of the model.
        batch: Global batch.
        per_node: Devices per node.
        heads: The smallest attention head count (tensor parallelism must divide it).
        seq: Tokens per sample.
        layout_for: ``layout_for(tp degree) -> TPLayout`` (the block search's result).
        fixed_mesh: The user fixed the mesh's axes (no refactoring).
    """

    n_blocks: int
    batch: int
    per_node: int
    heads: int
    seq: int
    layout_for: Callable[[int], TPLayout]
    fixed_mesh: bool = False


@dataclass(frozen=True)
class PlanAction:
    """A move on a strategy.

    Attributes:
        name: Unique name.
        doc: One sentence.
        moves: ``moves(strategy, context) -> new strategies``.
    """

    name: str
    doc: str
    moves: Callable[[Strategy, PlanContext], list[Strategy]]


def checkpoint_pattern(n: int, full: int, selective: int) -> tuple[str, ...]:
    """``n`` blocks' modes: ``full`` full, then ``selective`` selective, then none."""
    full = max(0, min(n, full))
    selective = max(0, min(n - full, selective))
    return ("full",) * full + ("selective",) * selective + ("none",) * (n - full - selective)


def _counts(st: Strategy, n: int) -> tuple[int, int]:
    modes = st.checkpoints(n)
    return modes.count("full"), modes.count("selective")


def _data_axes(st: Strategy) -> list[str]:
    return [a for a in st.mesh if a in st.fsdp or a in st.replicate]


def _refactor(st: Strategy, axis_name: str, k: int, ctx: PlanContext) -> Strategy | None:
    """Take a factor ``k`` out of the data-parallel axis into a new axis ``axis_name``."""
    if ctx.fixed_mesh or axis_name in st.mesh:
        return None
    dp = [a for a in _data_axes(st) if st.mesh[a] % k == 0]
    if not dp:
        return None
    a = dp[-1]
    mesh: dict[str, int] = {}
    order = ("pp", "dpr", "dp", "cp", "tp")
    sizes = {**st.mesh, a: st.mesh[a] // k, axis_name: k}
    for name in order:
        if name in sizes:
            mesh[name] = sizes[name]
    for name in sizes:
        mesh.setdefault(name, sizes[name])
    fsdp = tuple(x for x in st.fsdp if mesh.get(x, 1) > 1 or x == a)
    repl = tuple(x for x in st.replicate if mesh.get(x, 1) > 1 or x == a)
    if mesh[a] == 1:
        fsdp = tuple(x for x in fsdp if x != a)
        repl = tuple(x for x in repl if x != a)
        mesh.pop(a)
    if not fsdp and not repl and st.fsdp:
        fsdp = ()
    changes: dict[str, object] = {"mesh": mesh, "fsdp": fsdp, "replicate": repl}
    if axis_name == "tp":
        changes.update(tp="tp", layout=ctx.layout_for(k))
    elif axis_name == "pp":
        changes.update(pp="pp", microbatches=k, reshard_after_forward=False)
    else:
        changes.update(cp="cp")
    try:
        return st.with_(**changes)
    except Exception:  # a combination Strategy refuses (an axis without a role)
        return None


def _factor_tp(st: Strategy, ctx: PlanContext) -> list[Strategy]:
    if st.tp:
        return []
    out = []
    for k in (2, 4, 8):
        if k <= ctx.per_node and ctx.heads % k == 0:
            s = _refactor(st, "tp", k, ctx)
            if s is not None:
                out.append(s)
    return out


def _factor_pp(st: Strategy, ctx: PlanContext) -> list[Strategy]:
    if st.pp:
        return []
    out = []
    for k in (2, 4, 8, 16):
        if k <= ctx.n_blocks:
            s = _refactor(st, "pp", k, ctx)
            if s is not None:
                out.append(s)
    return out


def _factor_cp(st: Strategy, ctx: PlanContext) -> list[Strategy]:
    if st.cp or ctx.seq < 16384:
        return []
    return [s for k in (2, 4) if (s := _refactor(st, "cp", k, ctx)) is not None]


def _shard(st: Strategy, ctx: PlanContext) -> list[Strategy]:
    out = []
    if st.replicate:
        out.append(st.with_(fsdp=st.fsdp + st.replicate, replicate=()))
    if st.fsdp and not st.pp:
        out.append(st.with_(fsdp=(), replicate=st.replicate + st.fsdp))
    return out


def _checkpoint(st: Strategy, ctx: PlanContext) -> list[Strategy]:
    n = ctx.n_blocks
    full, sel = _counts(st, n)
    none = n - full - sel
    steps = sorted({1, max(1, n // 8), max(1, n // 4), n})
    out = set()
    for k in steps:
        for f, s in (
            (full, sel + min(k, none)),  # none -> selective
            (full + min(k, sel), sel - min(k, sel)),  # selective -> full
            (full, max(0, sel - k)),  # selective -> none
            (max(0, full - k), sel + min(k, full)),  # full -> selective
            (full + min(k, none), sel),  # none -> full
        ):
            pat = checkpoint_pattern(n, f, s)
            if pat != st.checkpoints(n):
                out.add(_compress(pat))
    return [st.with_(checkpoint=pat) for pat in sorted(out)]


def _compress(pat: tuple[str, ...]) -> tuple[str, ...]:
    return pat[:1] if len(set(pat)) == 1 else pat


def _microbatches(st: Strategy, ctx: PlanContext) -> list[Strategy]:
    per_rank = ctx.batch // max(1, st.dp)
    out = []
    for m in (st.microbatches * 2, st.microbatches // 2):
        if m >= 1 and per_rank % m == 0 and (not st.pp or m >= st.mesh[st.pp]):
            out.append(st.with_(microbatches=m))
    return out


def _schedule(st: Strategy, ctx: PlanContext) -> list[Strategy]:
    if not st.pp:
        return []
    out = []
    p = st.mesh[st.pp]
    for sched, v in (("1F1B", 1), ("interleaved_1F1B", 2), ("interleaved_1F1B", 4)):
        if (sched, v) != (st.schedule, st.virtual_stages) and p * v <= ctx.n_blocks:
            out.append(st.with_(schedule=sched, virtual_stages=v))
    return out


def _reshard(st: Strategy, ctx: PlanContext) -> list[Strategy]:
    return [st.with_(reshard_after_forward=not st.reshard_after_forward)] if st.fsdp else []


#: Moves on a strategy.
PLAN_ACTIONS: tuple[PlanAction, ...] = (
    PlanAction("split_tensor_parallel", "take a tensor-parallel axis out of data parallelism", _factor_tp),
    PlanAction("split_pipeline", "take a pipeline axis out of data parallelism", _factor_pp),
    PlanAction("split_context_parallel", "take a context-parallel axis out of data parallelism", _factor_cp),
    PlanAction("shard_parameters", "shard (FSDP) or replicate (DDP) parameters", _shard),
    PlanAction("checkpoint_blocks", "checkpoint more or fewer blocks, or more or less of them", _checkpoint),
    PlanAction("change_microbatches", "double or halve the microbatches", _microbatches),
    PlanAction("change_schedule", "1F1B, or interleaved 1F1B with 2 or 4 stages per rank", _schedule),
    PlanAction("toggle_reshard", "free gathered parameters after forward, or keep them", _reshard),
)  # fmt: skip

#: Every action's default prior (uniform).
DEFAULT_PRIORS: Mapping[str, float] = {
    **{a.name: 1.0 for a in BLOCK_ACTIONS},
    **{a.name: 1.0 for a in PLAN_ACTIONS},
}
