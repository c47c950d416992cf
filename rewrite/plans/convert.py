"""From a strategy to a `ParallelPlan` keyed by the model's module names, and what DTensor
cannot express.

`to_plan` writes a strategy in the user's currency: per module of the model (fully qualified
names, ``*`` for the block index), the ``torch.distributed.tensor.parallel`` style, FSDP
wrapping and checkpointing, as torchtitan's ``parallelize_llama`` writes them for Llama:

* a weight split along its output dimension: ``ColwiseParallel``; along its input dimension:
  ``RowwiseParallel`` (output ``Shard(1)`` under sequence parallelism, else replicated);
* the module that holds a group of column-parallel linears reading one input (``self_attn``,
  ``mlp``): ``PrepareModuleInput`` from the residual stream's placement (``Shard(1)`` under
  sequence parallelism, else ``Replicate()``) to ``Replicate()``, keeping the output a DTensor, so
  that the group shares one all-gather forward and one reduce-scatter (or all-reduce) backward.
  A module the block calls with its input as a keyword argument gets keyword layouts;
* norms under sequence parallelism: ``SequenceParallel``;
* the embedding split along the vocabulary: ``RowwiseParallel`` (input replicated, output the
  residual stream's placement); the head: ``ColwiseParallel`` (output ``Shard(-1)`` with loss
  parallelism, else replicated);
* ``fully_shard`` on every block and on the root (key ``""``) over the FSDP axes, with
  ``reshard_after_forward``; checkpointing per block (one ``*`` entry when every block has the
  same mode, else one entry per block index).

`dtensor_problems` lists why DTensor's parallel styles cannot express a strategy: a split weight
in a module that is not ``nn.Linear``, ``nn.Embedding`` or GPT-2's ``Conv1D`` (which apply
converts to ``nn.Linear``), a fused projection split into parts that apply does not regroup, or a
value that must change sharding inside a module, where no style can put the move (between
parallel styles tensors are local, so such a move would silently compute something else).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rewrite.ir import Graph, Node, Value
from rewrite.plans.layout import ModelLayout, ModuleInfo
from rewrite.plans.plan import ModulePlan, ParallelPlan, PipelineSpec, TensorParallel
from rewrite.plans.propagate import Propagation, propagate
from rewrite.plans.strategy import Strategy

__all__ = ["SEQUENCE_PARALLEL", "SP_UNSAFE", "dtensor_problems", "to_plan"]

#: How plans use sequence parallelism: ``auto`` where DTensor can express it on the model,
#: ``always`` where the block allows it even if the model derives positions from its embedding's
#: output (the plan then lists that under `SP_UNSAFE`: it holds for torchtitan's Llama, not for
#: Hugging Face's), ``never``.
SEQUENCE_PARALLEL = ("auto", "always", "never")
#: The problem key of a sequence-parallel plan on a model that is not sequence-parallel safe.
SP_UNSAFE = "sequence_parallel"


def _module_of(param: str) -> str:
    return param.rsplit(".", 1)[0] if "." in param else ""


def _param_problems(
    dims: Mapping[str, int], modules: Mapping[str, ModuleInfo], fqn
) -> dict[str, str]:  # noqa: ANN001
    out = {}
    for param, dim in dims.items():
        mod = modules.get(_module_of(param))
        name = fqn(_module_of(param))
        if mod is None:
            out[name] = f"parameter {param!r} is not held by a leaf module the planner knows."
        elif mod.kind not in ("linear", "embedding", "conv1d"):  # apply converts a Conv1D
            out[name] = (
                f"{mod.class_name} is not nn.Linear or nn.Embedding: DTensor's ColwiseParallel "
                f"and RowwiseParallel cannot split it (dim {dim} of {param!r}); convert it to "
                "nn.Linear (transposing the weight) or leave it replicated."
            )
    return out


def _projection(graph: Graph, v: Value) -> Node | None:
    """The ``linear`` (or a ``Conv1D``'s ``addmm``, through the views around it) producing
    ``v``, or None."""
    node = graph.node(v.node)
    while node.op in ("reshape", "view"):
        node = graph.node(node.inputs[0].node)
    return node if node.op in ("linear", "addmm") else None


def _move_problems(prop: Propagation, graph: Graph, label: str) -> dict[str, str]:
    out = {}
    for v, consumer, have, want in prop.moves:
        if have.dims == want.dims and set(have.partial) <= set(want.partial):
            continue  # replicated to partial: local
        producer = graph.node(v.node)
        user = graph.node(consumer)
        activation = {"linear": 0, "addmm": 1}.get(user.op)  # a Conv1D computes addmm
        at_boundary = (
            (activation is not None and user.inputs[activation] == v)
            or producer.op in ("input", "embedding")
            or _projection(graph, v) is not None
        )
        if not at_boundary:
            out[f"{label}:%{consumer}"] = (
                f"{user.op} needs its input %{v.node} ({producer.op}) moved from {have} to "
                f"{want} inside a module; DTensor's parallel styles move values only at module "
                "boundaries, so this layout cannot be applied with parallelize_module."
            )
    return out


def _propagations(layout: ModelLayout, st: Strategy) -> tuple[Propagation, Propagation | None]:
    from rewrite.plans.step import _boundary, _hidden, _seed

    block, rest = layout.graphs_at(1)
    lay = st.layout
    mesh = {a: st.mesh[a] for a in (st.tp, st.cp) if a}
    sp = bool(lay and lay.sequence_parallel and st.tp)
    name = block.input_names[0]
    seeds = _seed(lay.block if lay else {}, block, st.tp)
    seeds[name] = _hidden(block.input_types[0].rank, st, sp)
    bprop = propagate(block, mesh, seeds, frozenset({name}))
    rprop = None
    if rest is not None:
        bnd = _boundary(rest, block.input_types[0])
        pins = {bnd: _hidden(block.input_types[0].rank, st, sp)} if bnd else {}
        rprop = propagate(rest, mesh, _seed(lay.rest if lay else {}, rest, st.tp), pins=pins)
    return bprop, rprop


def _fused_problems(prop: Propagation, layout: ModelLayout) -> dict[str, str]:
    """A split along a split dim (a fused projection's parts, `rewrite.plans.propagate`) that
    apply does not regroup."""
    out = {}
    graph = prop.graph
    for node in graph:
        if node.op != "split":
            continue
        dim = node.attrs.get("dim", 0) % node.in_types[0].rank
        if not prop.out[node.inputs[0]].dims[dim]:
            continue
        proj = _projection(graph, node.inputs[0])
        param = graph.node(proj.inputs[1 if proj.op == "linear" else 2].node) if proj else None
        module = _module_of(param.attrs.get("name", "")) if param is not None else ""
        if module not in layout.regrouped:
            out[f"block:%{node.id}"] = (
                f"split %{node.id} cuts a value split on its own dim into parts (a fused "
                f"projection {module or '?'!r}); apply regroups only the fused projections of "
                f"{sorted(layout.regrouped) or 'none'} per device, so this layout would compute "
                "something else; leave the projection replicated."
            )
    return out


def dtensor_problems(layout: ModelLayout, st: Strategy) -> dict[str, str]:
    """Why ``parallelize_module`` cannot express ``st`` on ``layout`` (empty: it can).

    Returns:
        Per module pattern (or ``"block:%n"`` / ``"rest:%n"`` for a node), the reason.
    """
    if st.layout is None or not st.tp:
        return {}
    out = _param_problems(st.layout.block, layout.block_modules, layout.module_fqn)
    out.update(_param_problems(st.layout.rest, layout.rest_modules, lambda m: m))
    if st.layout.sequence_parallel and not layout.sequence_parallel_safe:
        out[SP_UNSAFE] = (
            "sequence parallelism hands the blocks a sequence shard, but this model computes "
            "positions or masks from its embedding's output length (Hugging Face models do); "
            "pass position ids for the whole sequence, or use a plan without sequence "
            "parallelism."
        )
    bprop, rprop = _propagations(layout, st)
    out.update(_fused_problems(bprop, layout))
    out.update(_move_problems(bprop, bprop.graph, "block"))
    if rprop is not None:
        out.update(_move_problems(rprop, rprop.graph, "rest"))
    return out


# ------------------------------------------------------------------------------ plan
def _common_parent(names: list[str]) -> str:
    parts = [n.split(".")[:-1] for n in names]
    prefix: list[str] = []
    for group in zip(*parts):
        if len(set(group)) != 1:
            break
        prefix.append(group[0])
    return ".".join(prefix)


def _tp_modules(layout: ModelLayout, st: Strategy) -> dict[str, TensorParallel]:
    lay = st.layout
    if lay is None or not st.tp:
        return {}
    sp = lay.sequence_parallel
    stream = ("S(1)",) if sp else ("R",)
    out: dict[str, TensorParallel] = {}
    for param, dim in sorted(lay.block.items()):
        mod = _module_of(param)
        info = layout.block_modules.get(mod)
        if info is None or info.kind not in ("linear", "conv1d") or not param.endswith("weight"):
            continue
        if (dim == 0) == (info.kind == "linear"):  # Conv1D stores its weight transposed
            out[mod] = TensorParallel("colwise")
        else:
            out[mod] = TensorParallel("rowwise", output_layouts=stream if sp else None)
    graph = layout.block_graph
    for group in _colwise_groups(graph, {m for m, s in out.items() if s.style == "colwise"}):
        parent = _common_parent(group)
        if parent and parent not in group:
            out[parent] = _prepare(parent, layout.calls.get(parent, (1, ())), stream)
        else:
            for m in group:
                out[m] = TensorParallel("colwise", input_layouts=stream)
    if sp:
        for name, info in layout.block_modules.items():
            if info.kind == "norm":
                out[name] = TensorParallel("sequence")
    return {layout.module_fqn(k): v for k, v in out.items()}


def _prepare(
    parent: str, call: tuple[int, tuple[str, ...]], stream: tuple[str, ...]
) -> TensorParallel:
    n_args, kwargs = call
    if n_args == 0 and kwargs:
        key = kwargs[0]
        return TensorParallel(
            "prepare_input",
            input_kwarg_layouts={key: stream[0]},
            desired_input_kwarg_layouts={key: "R"},
            use_local_output=False,
        )
    return TensorParallel(
        "prepare_input", input_layouts=stream, desired_input_layouts=("R",), use_local_output=False
    )


def _colwise_groups(graph: Graph, colwise: set[str]) -> list[list[str]]:
    """Column-parallel linears grouped by the value they read."""
    groups: dict[Any, list[str]] = {}
    for node in graph:
        if node.op != "linear" or graph.node(node.inputs[1].node).op != "param":
            continue
        mod = _module_of(graph.node(node.inputs[1].node).attrs["name"])
        if mod in colwise:
            groups.setdefault(node.inputs[0], []).append(mod)
    return list(groups.values())


def _rest_modules(layout: ModelLayout, st: Strategy) -> dict[str, TensorParallel]:
    lay = st.layout
    if lay is None or not st.tp:
        return {}
    stream = ("S(1)",) if lay.sequence_parallel else ("R",)
    out: dict[str, TensorParallel] = {}
    for param, dim in lay.rest.items():
        mod = _module_of(param)
        info = layout.rest_modules.get(mod)
        if info is None:
            continue
        if info.kind == "embedding":
            out[mod] = (
                TensorParallel("rowwise", input_layouts=("R",), output_layouts=stream)
                if dim == 0
                else TensorParallel("colwise", input_layouts=("R",), output_layouts=stream)
            )
        elif info.kind == "linear":
            lp = st.loss_parallel
            out[mod] = TensorParallel(
                "colwise",
                input_layouts=stream,
                output_layouts=("S(-1)",) if lp else ("R",),
                use_local_output=not lp,
            )
    if lay.sequence_parallel:
        for name, info in layout.rest_modules.items():
            if info.kind == "norm":
                out[name] = TensorParallel("sequence")
            elif info.kind == "embedding" and name not in out:
                # e.g. learned positions added to the token embedding: its (replicated) output
                # is cut to the sequence shard
                out[name] = TensorParallel(
                    "prepare_output", output_layouts=("R",), desired_output_layouts=stream
                )
    return out


def _stages(layout: ModelLayout, st: Strategy) -> PipelineSpec | None:
    from rewrite.plans.step import _stage_sizes

    if not st.pp:
        return None
    v = st.virtual_stages
    sizes = _stage_sizes(layout.n_blocks, st.mesh[st.pp] * v)
    stages, start = [], 0
    for i, k in enumerate(sizes):
        names = [f"{layout.blocks_path}.{j}" for j in range(start, start + k)]
        if i == 0:
            names = [
                m for m in layout.rest_modules if layout.rest_modules[m].kind == "embedding"
            ] + names
        if i == len(sizes) - 1:
            names += [m for m in layout.rest_modules if layout.rest_modules[m].kind != "embedding"]
        stages.append(tuple(names))
        start += k
    return PipelineSpec(st.pp, tuple(stages), st.schedule, st.microbatches, v)


def _loss_parallel(layout: ModelLayout, st: Strategy) -> bool:
    """Whether the head is split along the vocabulary with loss parallelism (the training loop
    then computes the loss inside ``torch.distributed.tensor.parallel.loss_parallel()``)."""
    if not (st.loss_parallel and st.tp and st.layout):
        return False
    return any(
        layout.rest_modules.get(_module_of(p)) is not None
        and layout.rest_modules[_module_of(p)].kind == "linear"
        for p in st.layout.rest
    )


def to_plan(
    layout: ModelLayout,
    st: Strategy,
    cost: Mapping[str, float] | None = None,
    collectives: Mapping[str, int] | None = None,
    name: str = "plan",
    provenance: Mapping[str, Any] | None = None,
) -> ParallelPlan:
    """``st`` as a `ParallelPlan` for ``layout``'s model (see the module docstring)."""
    tp = {**_tp_modules(layout, st), **_rest_modules(layout, st)}
    modules: dict[str, ModulePlan] = {k: ModulePlan(tp=v) for k, v in tp.items()}
    modes = st.checkpoints(layout.n_blocks)
    fsdp = bool(st.shard_axes)
    keys = [layout.block_fqn] if len(set(modes)) == 1 else [
        f"{layout.blocks_path}.{i}" for i in range(layout.n_blocks)
    ]  # fmt: skip
    for i, key in enumerate(keys):
        if key:
            modules[key] = ModulePlan(
                fsdp=fsdp, checkpoint=modes[i], reshard_after_forward=st.reshard_after_forward
            )
    if fsdp:
        modules[""] = ModulePlan(fsdp=True, reshard_after_forward=not st.pp)
    problems = dtensor_problems(layout, st)
    return ParallelPlan(
        mesh=dict(st.mesh),
        modules=modules,
        tp_axis=st.tp,
        fsdp_axes=st.fsdp if fsdp else (),
        replicate_axes=tuple(a for a in st.replicate),
        pipeline=_stages(layout, st),
        cp_axis=st.cp,
        problems=problems,
        training=True,
        precision=st.precision,
        name=name,
        cost=dict(cost or {}),
        collectives=dict(collectives or {}),
        provenance={
            "model": layout.name,
            "batch": layout.batch,
            "seq": layout.seq,
            "float8": st.float8,
            "compile": st.compile,
            "async_tp": st.async_tp,
            "loss_parallel": _loss_parallel(layout, st),
            "microbatches": st.microbatches,
            "fsdp_over_cp": bool(fsdp and st.cp),
            **dict(provenance or {}),
        },
    )
