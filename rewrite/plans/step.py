"""A training step costed per device: compute, communication, pipeline bubble, memory.

`step_cost(layout, strategy, profile)` assembles a `StepCost` from the per-graph costs of one
block and of the rest of the model (`rewrite.plans.graphcost`), under the strategy's shardings
(`rewrite.plans.propagate`). The model, per device (the slowest pipeline rank):

**Time.** A microbatch of ``b`` samples runs each block's forward, then backward (plus the
recomputation its checkpointing mode needs). Tensor- and context-parallel collectives sit on the
critical path (with ``async_tp`` only the part longer than the adjacent GEMMs, and at least
``1/t`` of it, is exposed). FSDP all-gathers a block's parameters before its forward (and again
before its backward when it reshards after forward) and reduce-scatters its gradients after its
backward; with ``overlap`` each block's collectives hide behind its neighbour's compute and only
the excess is exposed, plus the first all-gather and the last reduce-scatter; without, all of it
is. Without a pipeline, microbatches accumulate gradients: FSDP gathers and reduce-scatters for
every microbatch (FSDP2's default; the gradients stay sharded in between). HSDP adds an
all-reduce of the sharded gradients over the replicate axes. DDP all-reduces the gradients in
buckets during the last microbatch's backward (the excess over it is exposed; the earlier
microbatches skip the sync, as DDP's ``no_sync`` does). The loss
(cross-entropy in fp32 on the head's output, vocabulary-parallel when the head is column
parallel) is costed from its bytes. The optimizer (AdamW on fp32 master weights: 16 bytes read
and 12 written per local parameter, and gradient clipping's read) is memory-bound.

Pipelines (``pp`` of size ``p``, ``v`` virtual stages, ``m`` microbatches): with per-microbatch
forward-and-backward time ``T`` of the slowest rank, ``1F1B`` and ``gpipe`` take ``(m + p - 1) T``
and ``interleaved_1F1B`` ``(m + (p - 1) / v) T``; stage-to-stage sends cost ``alpha + S / B`` on
the pipeline axis' link each way per microbatch. With a pipeline, FSDP gathers once per step
(no resharding between microbatches) and reduce-scatters once after the last microbatch, as
torchtitan runs it.

**Memory** (maximum over pipeline ranks; reported after the profile's ``memory_reserve``, the
caching allocator's reserved over allocated bytes): fp32 master weights, fp32 gradients and
AdamW's two fp32 moments over the FSDP shards (16 bytes per parameter; DDP also keeps autocast's
bf16 weight copies); the bf16 parameters FSDP holds gathered (two blocks while prefetching; every
block when it does not reshard after forward, as with a pipeline) and the gradients it holds unsharded (one block's bf16 and
fp32 copies; with a pipeline, the stage's fp32 accumulation); the activations kept for backward
of every microbatch in flight (one without a pipeline; ``min(m, p)`` microbatches of the stage on
the first rank with 1F1B, torch's warm-up count of chunks with interleaved 1F1B, all ``m`` with
GPipe); and the larger of a block's working set (its recomputation and intermediates) and the
loss's (the fp32 log-probabilities kept, and their gradient).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from rewrite.devices import DeviceProfile, load_device
from rewrite.errors import PlanError
from rewrite.ir import Graph, TensorType
from rewrite.plans.cluster import Link, collective_time, link_of
from rewrite.plans.graphcost import GraphCost, Options, graph_cost
from rewrite.plans.layout import ModelLayout
from rewrite.plans.propagate import propagate
from rewrite.plans.sharding import Collective, Sharding, redistribute
from rewrite.plans.strategy import Strategy

__all__ = ["StepCost", "step_cost"]

_DDP_BUCKET = 25 * 2**20
_DDP_FIRST_BUCKET = 2**20


@dataclass(frozen=True)
class StepCost:
    """A training step's modeled cost (see the module docstring).

    Attributes:
        step_time: Seconds per step.
        tokens_per_second: Tokens per second per device (global tokens / step time / devices).
        peak_memory: Bytes, the maximum over devices, after the allocator reserve.
        time: Seconds by part (``compute``, ``recompute``, ``tp_comm``, ``fsdp_exposed``,
            ``dp_exposed``, ``pp_send``, ``bubble``, ``loss``, ``optimizer``).
        memory: Bytes by part before the reserve (``states``, ``gathered``, ``activations``,
            ``working``).
        collectives: Collectives per rank in one step by kind (see `collectives_of`).
        flops: Model FLOPs per device per step (forward and backward, recomputation excluded).
    """

    step_time: float
    tokens_per_second: float
    peak_memory: float
    time: Mapping[str, float] = field(default_factory=dict)
    memory: Mapping[str, float] = field(default_factory=dict)
    collectives: Mapping[str, int] = field(default_factory=dict)
    flops: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """The cost as `ParallelPlan.cost` stores it (numbers only)."""
        out: dict[str, Any] = {
            "step_time": self.step_time,
            "tokens_per_second": self.tokens_per_second,
            "peak_memory": self.peak_memory,
            "mfu": self.flops / max(self.step_time, 1e-30),
        }
        out.update({f"time_{k}": v for k, v in self.time.items()})
        out.update({f"memory_{k}": v for k, v in self.memory.items()})
        return out


# ------------------------------------------------------------------------------ graphs
def _seed(layout_dims: Mapping[str, int], graph: Graph, axis: str | None) -> dict[str, Sharding]:
    out: dict[str, Sharding] = {}
    if axis is None:
        return out
    for node in graph.params():
        name = node.attrs["name"]
        if name in layout_dims:
            out[name] = Sharding.split(node.type.rank, layout_dims[name], axis)
    return out


def _hidden(rank: int, st: Strategy, sp: bool) -> Sharding:
    axes = tuple(a for a in (st.cp, st.tp if sp else None) if a and st.mesh[a] > 1)
    return Sharding.replicated(rank).with_dim(1, axes) if rank >= 2 else Sharding.replicated(rank)


def _boundary(rest: Graph, block_in: TensorType) -> str | None:
    """The rest graph's value where blocks would run: the first value of the block input's type
    computed from the model's input (its node gets pinned there)."""
    for node in rest:
        if node.op not in ("input", "param", "const") and node.types[0] == block_in:
            return str(node.id)
    return None


@dataclass(frozen=True)
class _Costs:
    layout: ModelLayout
    block: GraphCost
    rest: GraphCost | None
    loss_elems: int  # per-device logits elements of one microbatch
    loss_comm: tuple[Collective, ...]


_CACHE: dict[Any, _Costs] = {}


def _profile_key(p: DeviceProfile) -> str:
    return p.digest


def _graph_costs(layout: ModelLayout, st: Strategy, p: DeviceProfile, b: int) -> _Costs:
    lay = st.layout
    key = (
        id(layout), b, st.tp and st.mesh[st.tp], st.cp and st.mesh[st.cp],
        lay.key() if lay else None, st.precision, st.float8, st.compile, st.loss_parallel,
        _profile_key(p),
    )  # fmt: skip
    hit = _CACHE.get(key)
    if hit is not None and hit.layout is layout:
        return hit
    block, rest = layout.graphs_at(b)
    mesh = {a: st.mesh[a] for a in (st.tp, st.cp) if a}
    sp = bool(lay and lay.sequence_parallel and st.tp)
    opts = Options(st.precision, st.float8, st.compile, layout.causal)
    in_name = block.input_names[0]
    seeds = _seed(lay.block if lay else {}, block, st.tp)
    seeds[in_name] = _hidden(block.input_types[0].rank, st, sp)
    bprop = propagate(block, mesh, seeds, frozenset({in_name}))
    bcost = graph_cost(bprop, p, opts, in_name)
    rcost: GraphCost | None = None
    elems, comm = 0, cast(tuple[Collective, ...], ())
    if rest is not None:
        rseeds = _seed(lay.rest if lay else {}, rest, st.tp)
        bnd = _boundary(rest, block.input_types[0])
        pins = {bnd: _hidden(block.input_types[0].rank, st, sp)} if bnd else {}
        rprop = propagate(rest, mesh, rseeds, pins=pins)
        rcost = graph_cost(rprop, p, opts)
        logits = rprop.out[rest.outputs[0]]
        lt = rest.output_types[0]
        elems = logits.local_type(lt, mesh).numel
        vocab_axes = logits.dims[-1] if logits.rank else ()
        if vocab_axes and st.loss_parallel:  # max, sum of exponentials, target logit
            tokens = elems // max(1, logits.local_shape(lt.shape, mesh)[-1])
            comm = tuple(
                Collective("all_reduce", a, tokens * 4) for a in vocab_axes for _ in range(3)
            )
        elif vocab_axes:  # the head's output gathered for an ordinary loss
            whole = Sharding(logits.dims[:-1] + ((),))
            comm = tuple(redistribute(Sharding(logits.dims), whole, lt, mesh))
            elems = whole.local_type(lt, mesh).numel
    hit = _CACHE[key] = _Costs(layout, bcost, rcost, elems, comm)
    if len(_CACHE) > 4096:
        _CACHE.pop(next(iter(_CACHE)))
    return hit


# ------------------------------------------------------------------------------ time
class _Net:
    """Collective times on the strategy's mesh."""

    def __init__(self, st: Strategy, p: DeviceProfile) -> None:
        self.st, self.p = st, p
        self.eff = float(p.training.get("link_efficiency", 0.8))
        self._links: dict[tuple[str, ...], Link] = {}

    def link(self, axes: Iterable[str]) -> Link:
        key = tuple(axes)
        hit = self._links.get(key)
        if hit is None:
            hit = self._links[key] = link_of(self.st.mesh, key, self.p)
        return hit

    def time(self, colls: Iterable[Collective]) -> float:
        return sum(collective_time(c.kind, c.nbytes, self.link((c.axis,)), self.eff) for c in colls)

    def over(self, kind: str, nbytes: float, axes: tuple[str, ...]) -> float:
        return collective_time(kind, nbytes, self.link(axes), self.eff) if axes else 0.0


def _tp_exposed(comm: float, matmul: float, st: Strategy) -> float:
    if not st.async_tp or not st.tp:
        return comm
    return max(comm / st.mesh[st.tp], comm - matmul)


def _counts(colls: Iterable[Collective], times: int = 1) -> Counter[str]:
    out: Counter[str] = Counter()
    for c in colls:
        out[c.kind] += times
    return out


def _ddp_buckets(param_bytes: list[int]) -> list[int]:
    """DDP's gradient buckets (reverse parameter order, 1 MiB first, then 25 MiB)."""
    buckets, cur, cap = [], 0, _DDP_FIRST_BUCKET
    for nb in reversed(param_bytes):
        cur += nb
        if cur >= cap:
            buckets.append(cur)
            cur, cap = 0, _DDP_BUCKET
    if cur:
        buckets.append(cur)
    return buckets


def _stage_sizes(n: int, stages: int) -> list[int]:
    """Blocks per pipeline stage as torchtitan splits them (``generate_split_points``): the
    first stage gets ``n // stages``, middle stages one more while the remainder lasts, the last
    what is left."""
    if stages == 1:
        return [n]
    base, extra = divmod(n, stages)
    sizes = [base]
    for _ in range(stages - 2):
        take = base + (1 if extra > 0 else 0)
        extra -= 1 if extra > 0 else 0
        sizes.append(take)
    sizes.append(n - sum(sizes))
    return sizes


@dataclass
class _Rank:
    """One pipeline rank's share."""

    blocks: list[int]  # block indices it runs
    embed: bool  # holds the embedding (first stage)
    head: bool  # holds the head and loss (last stage)
    index: int


@dataclass
class _Plan:
    """Derived sizes of one strategy on one layout."""

    b: int  # samples per microbatch per data-parallel rank
    m: int
    p: int
    v: int
    modes: tuple[str, ...]
    ranks: list[_Rank]


def _derive(layout: ModelLayout, st: Strategy) -> _Plan:
    per_rank = layout.batch / st.dp
    m = st.microbatches
    if per_rank != int(per_rank) or int(per_rank) % m:
        raise PlanError(
            f"The global batch {layout.batch} must split evenly over data parallel {st.dp} x "
            f"{m} microbatches."
        )
    p = st.size(st.pp)
    v = st.virtual_stages if st.pp else 1
    modes = st.checkpoints(layout.n_blocks)
    if p * v > layout.n_blocks:
        raise PlanError(
            f"{p * v} pipeline stages need at least as many blocks ({layout.n_blocks})."
        )
    sizes = _stage_sizes(layout.n_blocks, p * v)
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    ranks = []
    for r in range(p):
        own = [r + k * p for k in range(v)]
        blocks = [b for s in own for b in range(starts[s], starts[s] + sizes[s])]
        ranks.append(_Rank(blocks, 0 in own, p * v - 1 in own, r))
    return _Plan(int(per_rank) // m, m, p, v, modes, ranks)


def step_cost(
    layout: ModelLayout, strategy: Strategy, device: str | DeviceProfile = "h100-gt"
) -> StepCost:
    """Cost one training step of ``strategy`` on ``layout`` (see the module docstring).

    Raises:
        PlanError: If the batch does not split over the data-parallel ranks and microbatches,
            or the pipeline has more stages than blocks.
    """
    p = load_device(device)
    st = strategy
    d = _derive(layout, st)
    c = _graph_costs(layout, st, p, d.b)
    net = _Net(st, p)
    t = _time(layout, st, p, d, c, net)
    mem = max((_memory(st, d, c, r) for r in d.ranks), key=lambda x: sum(x.values()))
    reserve = float(p.training.get("memory_reserve", 1.0))
    busiest = max(len(r.blocks) for r in d.ranks)
    flops = 3 * d.m * (busiest * c.block.flops + (c.rest.flops if c.rest else 0.0))
    return StepCost(
        step_time=t["total"],
        tokens_per_second=layout.tokens / t["total"] / st.n_devices,
        peak_memory=reserve * sum(mem.values()),
        time={k: v for k, v in t.items() if k != "total"},
        memory=mem,
        collectives=dict(collectives_of(layout, st, d, c)),
        flops=flops,
    )


def _block_times(st: Strategy, c: GraphCost, mode: str, net: _Net) -> tuple[float, float]:
    """Forward and backward windows of one graph (recompute and exposed TP comm included)."""
    fwd_comm = net.time(c.fwd_comm)
    bwd_comm = net.time(c.bwd_comm) + net.time(c.recompute_comm[mode])
    grad_ar = sum(
        net.over("all_reduce", n * 4, (st.tp,))
        for n, axes in c.grad_partial.values()
        if st.tp and st.tp in axes
    )
    f = c.fwd + _tp_exposed(fwd_comm, c.matmul, st)
    b = c.bwd + c.recompute[mode] + _tp_exposed(bwd_comm + grad_ar, 2 * c.matmul, st)
    return f, b


def _fsdp_bytes(st: Strategy, numel: float) -> tuple[float, float]:
    """Per-rank all-gather output and reduce-scatter input bytes of ``numel`` parameters."""
    gather = 1 if st.float8 else (4 if st.precision == "fp32" else 2)
    return numel * gather, numel * 4.0


def _exposed(comm: float, window: float, st: Strategy) -> float:
    return max(0.0, comm - window) if st.overlap else comm


def _fsdp_time(
    st: Strategy, d: _Plan, windows: list[tuple[float, float]], c: _Costs, net: _Net, rank: _Rank
) -> float:
    """Exposed FSDP seconds of one rank in one step (see the module docstring)."""
    shard = st.shard_axes
    if not shard:
        return 0.0
    ag, rs = _fsdp_bytes(st, c.block.param_numel)
    t_ag, t_rs = net.over("all_gather", ag, shard), net.over("reduce_scatter", rs, shard)
    shards = math.prod(st.mesh[a] for a in shard)
    hsdp = net.over("all_reduce", rs / shards, st.replicate)
    rest_numel = c.rest.param_numel if (c.rest and (rank.embed or rank.head)) else 0
    r_ag, r_rs = _fsdp_bytes(st, rest_numel)
    root_ag, root_rs = net.over("all_gather", r_ag, shard), net.over("reduce_scatter", r_rs, shard)
    piped = d.p > 1
    again = st.reshard_after_forward and not piped
    hidden = sum(
        _exposed(t_ag, f, st) + _exposed((t_ag if again else 0.0) + t_rs + hsdp, b, st)
        for f, b in windows
    )
    edges = t_ag + t_rs + hsdp if st.overlap else 0.0
    root = root_ag * (2 if again else 1) + root_rs
    return (hidden + edges + root) * (1 if piped else d.m)


def _rank_time(
    layout: ModelLayout, st: Strategy, p: DeviceProfile, d: _Plan, c: _Costs, net: _Net, r: _Rank
) -> dict[str, float]:
    windows = [_block_times(st, c.block, d.modes[i], net) for i in r.blocks]
    blocks = sum(f + b for f, b in windows)
    comp = len(r.blocks) * (c.block.fwd + c.block.bwd)
    rec = sum(c.block.recompute[d.modes[i]] for i in r.blocks)
    rest = 0.0
    if c.rest is not None and r.head:
        rf, rb = _block_times(st, c.rest, "none", net)
        rest = rf + rb + _loss_time(p, c) + net.time(c.loss_comm)
        comp += c.rest.fwd + c.rest.bwd
    send = 0.0
    if d.p > 1:
        link = net.link((st.pp,))  # type: ignore[arg-type]
        send = 2 * d.v * collective_time("send_recv", c.block.out_bytes, link, net.eff)
    per_mb = blocks + rest + send
    return {
        "per_mb": per_mb,
        "compute": comp,
        "recompute": rec,
        "tp_comm": blocks + rest - comp - rec - (_loss_time(p, c) if rest else 0.0),
        "pp_send": send,
        "fsdp": _fsdp_time(st, d, windows, c, net, r),
        "loss": _loss_time(p, c) if rest else 0.0,
    }


def _time(
    layout: ModelLayout, st: Strategy, p: DeviceProfile, d: _Plan, c: _Costs, net: _Net
) -> dict[str, float]:
    per = [_rank_time(layout, st, p, d, c, net, r) for r in d.ranks]
    slow = max(per, key=lambda x: x["per_mb"])
    if d.p == 1:
        slots = float(d.m)
    elif st.schedule == "interleaved_1F1B":
        slots = d.m + (d.p - 1) / d.v
    else:
        slots = float(d.m + d.p - 1)
    dp = 0.0
    if st.replicate and not st.shard_axes:
        numel = len(d.ranks[0].blocks) * c.block.param_numel + (c.rest.param_numel if c.rest else 0)
        ar = net.over("all_reduce", numel * 4.0, st.replicate)
        bwd = sum(_block_times(st, c.block, d.modes[i], net)[1] for i in d.ranks[0].blocks)
        last = net.over("all_reduce", min(_DDP_BUCKET, numel * 4.0), st.replicate)
        dp = max(ar - bwd, 0.0) + last if st.overlap else ar
    fsdp = max(x["fsdp"] for x in per)
    opt = _optimizer_time(st, p, d, c)
    total = slots * slow["per_mb"] + fsdp + dp + opt
    return {
        "total": total,
        "compute": slots * slow["compute"],
        "recompute": slots * slow["recompute"],
        "tp_comm": slots * slow["tp_comm"],
        "loss": slots * slow["loss"],
        "pp_send": slots * slow["pp_send"],
        "bubble": (slots - d.m) * slow["per_mb"],
        "fsdp_exposed": fsdp,
        "dp_exposed": dp,
        "optimizer": opt,
    }


def _loss_bytes(c: _Costs) -> int:
    """Peak bytes per logit element of the loss. ATen's cross-entropy on fp32 logits keeps the
    fp32 log-probabilities and, in backward, their gradient and the input gradient (12 bytes);
    DTensor's vocabulary-parallel one decomposes the log-softmax (bf16 logits, their fp32 copy,
    the shifted copy, its exponential and the result alive at once: 18 bytes)."""
    return 18 if any(x.kind == "all_reduce" for x in c.loss_comm) else 12


def _loss_time(p: DeviceProfile, c: _Costs) -> float:
    """Cross-entropy in fp32 over the head's output: forward reads bf16 logits, writes fp32 and
    the log-probabilities (14 bytes per element); backward reads them and writes the fp32 and
    bf16 gradients (10 bytes)."""
    return c.loss_elems * 24 / (p.memory_bandwidth * p.efficiency["memory"])


def _optimizer_time(st: Strategy, p: DeviceProfile, d: _Plan, c: _Costs) -> float:
    shards = math.prod(st.mesh[a] for a in st.shard_axes) if st.shard_axes else 1
    blocks = max(len(r.blocks) for r in d.ranks)
    numel = (blocks * c.block.param_numel + (c.rest.param_numel if c.rest else 0)) / shards
    return numel * 32 / (p.memory_bandwidth * p.efficiency["memory"])


# ------------------------------------------------------------------------------ memory
def _in_flight(st: Strategy, d: _Plan, rank: int) -> float:
    """Microbatches' worth of a rank's activations alive at its peak."""
    if d.p == 1:
        return 1.0
    if st.schedule == "gpipe":
        return float(d.m)
    if st.schedule == "interleaved_1F1B" and d.v > 1:
        rounds = max(1, d.m // d.p)
        per_round = d.m // rounds
        warm = min((d.v - 1) * per_round + 2 * (d.p - 1 - rank), d.m * d.v)
        return (warm + 1) / d.v
    return float(min(d.m, d.p - rank))


def _memory(st: Strategy, d: _Plan, c: _Costs, r: _Rank) -> dict[str, float]:
    blk = c.block
    rest_numel = c.rest.param_numel if (c.rest and (r.embed or r.head)) else 0
    numel = len(r.blocks) * blk.param_numel + rest_numel
    shards = math.prod(st.mesh[a] for a in st.shard_axes) if st.shard_axes else 1
    states = numel * 16 / shards
    wbytes = 4 if st.precision == "fp32" else 2
    if not st.shard_axes:
        gathered = numel * wbytes if st.precision != "fp32" else 0.0
    elif d.p > 1:
        gathered = len(r.blocks) * blk.param_numel * (wbytes + 4) + rest_numel * wbytes
    elif not st.reshard_after_forward:  # every block stays gathered from forward to backward
        gathered = len(r.blocks) * blk.param_numel * wbytes + blk.param_numel * (wbytes + 4)
        gathered += rest_numel * wbytes
    else:
        gathered = 2 * blk.param_numel * wbytes + blk.param_numel * (wbytes + 4)
        gathered += rest_numel * wbytes
    acts = sum(blk.saved[d.modes[i]] for i in r.blocks) * _in_flight(st, d, r.index)
    modes = {d.modes[i] for i in r.blocks}
    block_work = max((blk.recompute_peak if m != "none" else 0) for m in modes) + 2 * blk.transient
    loss_work = 0.0
    if r.head and c.rest is not None:
        loss_work = c.loss_elems * _loss_bytes(c) + c.rest.transient
    return {
        "states": states,
        "gathered": gathered,
        "activations": acts,
        "working": max(block_work, loss_work),
    }


# ------------------------------------------------------------------------------ counting
def collectives_of(layout: ModelLayout, st: Strategy, d: _Plan, c: _Costs) -> Counter[str]:
    """The collectives one rank issues in one training step, by kind, counted as DTensor and
    FSDP2 issue them (forward and backward; the optimizer's gradient clipping excluded).

    Per microbatch and block: the propagation's forward moves (one per value and target
    sharding: ``PrepareModuleInput`` makes one move serve every consumer), its backward moves,
    the moves re-run by checkpointing, one ``all_reduce`` per parameter whose gradient is partial
    on the tensor-parallel axis (a replicated norm weight under sequence parallelism). FSDP2 per
    wrapped block: one ``all_gather`` before forward, one more before backward when it reshards
    after forward, one ``reduce_scatter`` after backward (per microbatch without a pipeline, once
    per step with one); the root wrap (parameters outside the blocks) the same when it holds any,
    but never gathered again (FSDP2 keeps the root's parameters from forward to backward);
    HSDP one ``all_reduce`` per reduce-scatter. DDP (FSDP2's ``replicate``, as
    `rewrite.plans.apply` applies it) one ``all_reduce`` per gradient bucket once per step (with
    gradient accumulation on the last microbatch only: `ParallelPlan.defers_gradient_sync`), no
    buffer broadcast. Measured in `docs/plans-apply.md` and by ``tests/rewrite/plans/test_handback.py``. A
    pipeline one ``send_recv`` per microbatch, stage boundary and direction. This is the function
    to correct if measured counts differ.
    """
    out: Counter[str] = Counter()
    m = d.m
    rank = max(d.ranks, key=lambda r: len(r.blocks))
    for mode in (d.modes[i] for i in rank.blocks):
        colls = [*c.block.fwd_comm, *c.block.bwd_comm, *c.block.recompute_comm[mode]]
        colls += [
            Collective("all_reduce", st.tp, 0)
            for _, axes in c.block.grad_partial.values()
            if st.tp and st.tp in axes
        ]
        out.update(_counts(colls, m))
    if c.rest is not None:
        colls = [*c.rest.fwd_comm, *c.rest.bwd_comm, *c.loss_comm]
        out.update(_counts(colls, m))
    if st.shard_axes:
        per = 1 if d.p > 1 else m
        again = st.reshard_after_forward and d.p == 1
        units = len(rank.blocks) + (1 if c.rest is not None and c.rest.param_numel else 0)
        out["all_gather"] += (units + (len(rank.blocks) if again else 0)) * per
        out["reduce_scatter"] += units * per
        if any(a for a in st.replicate):
            out["all_reduce"] += units * per
    elif st.replicate:  # gradient accumulation defers DDP's sync to the last microbatch
        sizes = [n * 4 for n, _ in c.block.grad_partial.values()] * len(rank.blocks)
        if c.rest is not None:
            sizes += [n * 4 for n, _ in c.rest.grad_partial.values()]
        out["all_reduce"] += len(_ddp_buckets(sizes))
    if d.p > 1:
        out["send_recv"] += 2 * m * d.v
    return out
