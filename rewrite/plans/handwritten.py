"""Hand-written plans, torchtitan-style, for the Hugging Face architectures the hand-back supports.

These are not the planner's plans (`rewrite.plans.expert` and `rewrite.plans.search` make and
cost those): they are the plans a user would write by hand, by module name, for Llama, GPT-2,
BERT and GPT-NeoX. The hand-back's tests and the plan runner use them; they carry no cost, and
their ``collectives`` are left empty (`expected_collectives` in the tests derives what one step
should communicate).

Styles: ``"ddp"`` (replicate over ``dp``), ``"fsdp"`` (shard each block and the root over
``dp``), ``"tp"`` (Megatron: query/key/value and MLP-in column-wise, attention-out and MLP-out
row-wise, the untied token embedding row-wise and the head column-wise), ``"tp+sp"`` (the same
with sequence parallelism on norms and the residual stream, as torchtitan), ``"fsdp+tp"`` and
``"fsdp+tp+sp"`` (2-D: ``dp`` outer, ``tp`` inner), ``"hsdp"`` (replicate over ``rep``, shard
over ``dp``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from torch import nn

from rewrite.errors import PlanError
from rewrite.plans.plan import ModulePlan, ParallelPlan, PipelineSpec, TensorParallel

__all__ = ["STYLES", "handwritten_plan", "with_pipeline"]

STYLES = ("ddp", "fsdp", "hsdp", "tp", "tp+sp", "fsdp+tp", "fsdp+tp+sp")


@dataclass(frozen=True)
class _Arch:
    """Where things are in one architecture (names relative to the model or to a block)."""

    blocks: str
    embed: str | None  # token embedding sharded row-wise under TP (None: tied, left alone)
    head: str | None  # LM head sharded column-wise under TP (None: none, or tied)
    final_norm: str | None
    attention: str
    qkv: tuple[str, ...]
    attn_out: str
    mlp: str
    mlp_in: tuple[str, ...]
    mlp_out: str
    norms: tuple[str, ...]  # block norms run sequence-parallel
    attn_kwarg: str | None = None  # the block passes hidden states to attention by this keyword
    sp_enter: str | None = None  # module whose output enters the sequence-parallel region
    sp_exit: str | None = None  # module whose input leaves it (None: the head does)
    post_norm: bool = False  # BERT: norms sit after the residual add, inside output modules


_ARCHS: dict[str, _Arch] = {
    "LlamaForCausalLM": _Arch(
        blocks="model.layers",
        embed="model.embed_tokens",
        head="lm_head",
        final_norm="model.norm",
        attention="self_attn",
        qkv=("q_proj", "k_proj", "v_proj"),
        attn_out="o_proj",
        mlp="mlp",
        mlp_in=("gate_proj", "up_proj"),
        mlp_out="down_proj",
        norms=("input_layernorm", "post_attention_layernorm"),
        attn_kwarg="hidden_states",
    ),
    "GPTNeoXForCausalLM": _Arch(
        blocks="gpt_neox.layers",
        embed="gpt_neox.embed_in",
        head="lm_head",
        final_norm="gpt_neox.final_layer_norm",
        attention="attention",
        qkv=("query_key_value",),
        attn_out="dense",
        mlp="mlp",
        mlp_in=("dense_h_to_4h",),
        mlp_out="dense_4h_to_h",
        norms=("input_layernorm", "post_attention_layernorm"),
    ),
    "GPT2LMHeadModel": _Arch(
        blocks="transformer.h",
        embed=None,  # wte is tied to lm_head
        head=None,
        final_norm="transformer.ln_f",
        attention="attn",
        qkv=("c_attn",),
        attn_out="c_proj",
        mlp="mlp",
        mlp_in=("c_fc",),
        mlp_out="c_proj",
        norms=("ln_1", "ln_2"),
        sp_enter="transformer.drop",
        sp_exit="lm_head",
    ),
    "BertModel": _Arch(
        blocks="encoder.layer",
        embed=None,
        head=None,
        final_norm=None,
        attention="attention",
        qkv=("self.query", "self.key", "self.value"),
        attn_out="output.dense",
        mlp="intermediate",
        mlp_in=("intermediate.dense",),
        mlp_out="output.dense",
        norms=("attention.output.LayerNorm", "output.LayerNorm"),
        sp_enter="embeddings",
        post_norm=True,
    ),
}


def _tp(style: str, **kw: object) -> TensorParallel:
    return TensorParallel(style, **kw)  # type: ignore[arg-type]


def _block_tp(a: _Arch, sp: bool) -> dict[str, TensorParallel]:
    """A block's tensor-parallel entries, relative to the block."""
    out: dict[str, TensorParallel] = {}
    attn, seq = a.attention, ("S(1)",)
    for name in a.qkv:
        out[f"{attn}.{name}"] = _tp("colwise")
    mlp_in = a.mlp_in if a.post_norm else tuple(f"{a.mlp}.{n}" for n in a.mlp_in)
    mlp_out = a.mlp_out if a.post_norm else f"{a.mlp}.{a.mlp_out}"
    for name in mlp_in:
        out[name] = _tp("colwise")
    if not sp:
        out[f"{attn}.{a.attn_out}"] = _tp("rowwise")
        out[mlp_out] = _tp("rowwise")
        return out
    rowwise = _tp("rowwise", output_layouts=seq, use_local_output=False)
    out[f"{attn}.{a.attn_out}"] = rowwise
    out[mlp_out] = rowwise
    for name in a.norms:
        out[name] = _tp("sequence", use_local_output=False)
    if a.attn_kwarg:
        enter = _tp(
            "prepare_input",
            input_kwarg_layouts={a.attn_kwarg: "S(1)"},
            desired_input_kwarg_layouts={a.attn_kwarg: "R"},
        )
    else:
        enter = _tp("prepare_input", input_layouts=seq, desired_input_layouts=("R",))
    out[f"{attn}.self" if a.post_norm else attn] = enter
    out[a.mlp] = _tp("prepare_input", input_layouts=seq, desired_input_layouts=("R",))
    return out


def _model_tp(a: _Arch, sp: bool, n_blocks: int) -> dict[str, TensorParallel]:
    """The model-level tensor-parallel entries (embedding, final norm, head, SP boundaries)."""
    out: dict[str, TensorParallel] = {}
    seq, rep = ("S(1)",), ("R",)
    if a.embed:
        out[a.embed] = _tp(
            "rowwise",
            input_layouts=rep,
            output_layouts=seq if sp else rep,
            use_local_output=not sp,
        )
    if sp and a.sp_enter:
        out[a.sp_enter] = _tp(
            "prepare_output", output_layouts=rep, desired_output_layouts=seq, use_local_output=False
        )
    if sp and a.final_norm:
        out[a.final_norm] = _tp("sequence", use_local_output=False)
    if a.head:
        out[a.head] = _tp("colwise", input_layouts=seq if sp else rep, output_layouts=rep)
    if sp and a.sp_exit:
        out[a.sp_exit] = _tp("prepare_input", input_layouts=seq, desired_input_layouts=rep)
    if sp and a.post_norm:  # BERT: the last block's output leaves the sequence-parallel region
        out[f"{a.blocks}.{n_blocks - 1}"] = _tp(
            "prepare_output", output_layouts=seq, desired_output_layouts=rep
        )
    return out


def _mesh_and_axes(style: str, n: int | Sequence[int]) -> dict[str, object]:
    sizes = (n,) if isinstance(n, int) else tuple(n)
    if style in ("ddp", "fsdp"):
        return {
            "mesh": {"dp": sizes[0]},
            ("replicate_axes" if style == "ddp" else "fsdp_axes"): ("dp",),
        }
    if style == "hsdp":
        return {
            "mesh": {"rep": sizes[0], "dp": sizes[1]},
            "replicate_axes": ("rep",),
            "fsdp_axes": ("dp",),
        }
    if style in ("tp", "tp+sp"):
        return {"mesh": {"tp": sizes[0]}, "tp_axis": "tp"}
    return {"mesh": {"dp": sizes[0], "tp": sizes[1]}, "tp_axis": "tp", "fsdp_axes": ("dp",)}


def handwritten_plan(
    model: nn.Module,
    style: str,
    mesh: int | Sequence[int],
    *,
    checkpointing: str | Sequence[str] = "none",
    tp_blocks: Sequence[int] | None = None,
    precision: str = "fp32",
) -> ParallelPlan:
    """A torchtitan-style plan for a supported Hugging Face model, written by module name.

    Args:
        model: A ``LlamaForCausalLM``, ``GPT2LMHeadModel``, ``BertModel`` or
            ``GPTNeoXForCausalLM``.
        style: One of `STYLES`.
        mesh: The mesh sizes: one for ``ddp``/``fsdp``/``tp``/``tp+sp``, two for ``hsdp``
            (``rep``, ``dp``) and the 2-D styles (``dp``, ``tp``).
        checkpointing: ``"none"``, ``"selective"`` or ``"full"`` for every block, or one per block.
        tp_blocks: The blocks that get tensor parallelism (default: all); the others run
            replicated along ``tp``. Only without sequence parallelism.
        precision: The plan's precision (``"fp32"`` so results compare exactly).

    Raises:
        PlanError: On an unsupported model or style, or a per-block list of the wrong length.
    """
    a = _ARCHS.get(type(model).__name__)
    if a is None:
        raise PlanError(
            f"No hand-written plan for {type(model).__name__}; supported: {sorted(_ARCHS)}."
        )
    if style not in STYLES:
        raise PlanError(f"style must be one of {STYLES}, but got {style!r}.")
    n_blocks = len(list(model.get_submodule(a.blocks).children()))
    ckpt = [checkpointing] * n_blocks if isinstance(checkpointing, str) else list(checkpointing)
    if len(ckpt) != n_blocks:
        raise PlanError(f"checkpointing lists {len(ckpt)} blocks but the model has {n_blocks}.")
    sp = style.endswith("+sp")
    blocks = range(n_blocks) if tp_blocks is None else list(tp_blocks)
    if sp and len(blocks) != n_blocks:
        raise PlanError("tp_blocks is for plans without sequence parallelism; drop one of them.")
    modules: dict[str, ModulePlan] = {}
    fsdp = style in ("fsdp", "hsdp", "fsdp+tp", "fsdp+tp+sp")
    for i in range(n_blocks):
        modules[f"{a.blocks}.{i}"] = ModulePlan(fsdp=fsdp, checkpoint=ckpt[i])
    if "tp" in style:
        tp = _model_tp(a, sp, n_blocks) if len(blocks) == n_blocks else {}
        for i in blocks:
            tp.update({f"{a.blocks}.{i}.{k}": v for k, v in _block_tp(a, sp).items()})
        for name, t in tp.items():
            old = modules.get(name, ModulePlan())
            modules[name] = ModulePlan(tp=t, fsdp=old.fsdp, checkpoint=old.checkpoint)
    return ParallelPlan(
        name=f"handwritten:{style}",
        precision=precision,
        modules=modules,
        provenance={"model": type(model).__name__, "style": style, "checkpointing": ckpt},
        **_mesh_and_axes(style, mesh),  # type: ignore[arg-type]
    )


def with_pipeline(
    plan: ParallelPlan,
    model: nn.Module,
    ranks: int,
    *,
    schedule: str = "1F1B",
    microbatches: int = 2,
    virtual_stages: int = 1,
) -> ParallelPlan:
    """``plan`` with a pipeline axis ``pp`` of ``ranks`` ranks added outermost.

    The model's units (`rewrite.plans.pipeline.units`: embedding, blocks, norm, head) are cut
    into ``ranks * virtual_stages`` stages of consecutive units, as even as they divide, the
    remainder going to the first stages.

    Raises:
        PlanError: If the model has fewer units than stages, or cannot be cut into stages.
    """
    from rewrite.plans.pipeline import STAGE_ARCHS, units

    if type(model).__name__ not in STAGE_ARCHS:
        raise PlanError(
            f"No pipeline cut for {type(model).__name__}; supported: {sorted(STAGE_ARCHS)}."
        )
    held = units(model)
    n = ranks * virtual_stages
    if len(held) < n:
        raise PlanError(f"{len(held)} units cannot fill {n} stages; use fewer stages.")
    per, extra = divmod(len(held), n)
    stages, start = [], 0
    for s in range(n):
        size = per + (1 if s < extra else 0)
        stages.append(tuple(held[start : start + size]))
        start += size
    spec = PipelineSpec("pp", tuple(stages), schedule, microbatches, virtual_stages)
    return replace(plan, mesh={"pp": ranks, **plan.mesh}, pipeline=spec, name=f"{plan.name}+pp")
