"""What tensor parallelism needs to know about model code: attention units, Conv1D, fused QKV.

``parallelize_module`` shards ``nn.Linear`` and ``nn.Embedding`` weights; everything else about a
model (how an attention module splits its projections into heads, whether a layer is a transposed
``Conv1D``) is model code it cannot see. This module holds that knowledge for the architectures the
hand-back supports, so `rewrite.plans.apply` can check a plan before touching the model and make
the few exact module rewrites tensor parallelism needs:

- Hugging Face's ``Conv1D`` (GPT-2) is ``nn.Linear`` with its weight stored transposed; a module
  a plan shards column- or row-wise is converted to an equal ``nn.Linear`` first.
- GPT-2's fused ``c_attn`` stores all query rows, then all key rows, then all value rows; a
  contiguous column-wise shard would hand a rank queries of some heads and keys of others. Its
  rows are regrouped so that rank ``r``'s contiguous block holds the queries, keys and values of
  its own heads, and the attention's ``split_size`` becomes the local width.

Each rewrite records how to map the rewritten parameter back to the model's own layout
(`ParamLayout`), so gradients, parameters and checkpoints can be read in the original layout.
Attention in Llama, BERT, GPT-2 and GPT-NeoX (Hugging Face ``transformers`` 5) infers its head
count from the projection width (``view(..., -1, head_dim)``), so local heads follow from the
sharded weights once the head counts divide the tensor-parallel degree.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

__all__ = [
    "ATTENTION",
    "AttentionSpec",
    "ParamLayout",
    "attention_unit",
    "is_conv1d",
    "linear_from_conv1d",
    "original_layout",
    "regroup_fused_qkv",
]

#: Attribute on a model holding `ParamLayout`s by parameter name, set by the rewrites here.
LAYOUT_ATTR = "_rewrite_param_layouts"


@dataclass(frozen=True)
class AttentionSpec:
    """How one attention class splits into column-wise projections and a row-wise output.

    Attributes:
        projections: Relative names of the query/key/value projections (sharded column-wise).
        output: Relative name of the output projection (sharded row-wise).
        heads: Head counts the tensor-parallel degree must divide, by name, for a module.
        fused: For a fused QKV projection whose rows are not grouped by head: a function
            ``(attention_module, degree) -> None`` that regroups it (see `regroup_fused_qkv`).
    """

    projections: tuple[str, ...]
    output: str
    heads: Callable[[Any], dict[str, int]]
    fused: Callable[[Any, int, dict[str, ParamLayout], str], None] | None = None


@dataclass
class ParamLayout:
    """How a rewritten parameter maps back to the model's own layout.

    Attributes:
        row_perm: Rows of the rewritten tensor are ``original[row_perm]`` (None: unchanged).
        transposed: Whether the original (a ``Conv1D`` weight) is the transpose.
    """

    row_perm: list[int] | None = None
    transposed: bool = False
    history: list[str] = field(default_factory=list)

    def to_original(self, tensor: torch.Tensor) -> torch.Tensor:
        """A full tensor in the rewritten layout, returned in the original layout."""
        out = tensor
        if self.row_perm is not None:
            inverse = torch.argsort(torch.tensor(self.row_perm))
            out = out[inverse]
        return out.t() if self.transposed else out


def _gpt2_heads(m: Any) -> dict[str, int]:
    return {"num_heads": int(m.num_heads)}


def _config_heads(*names: str) -> Callable[[Any], dict[str, int]]:
    def heads(m: Any) -> dict[str, int]:
        config = m.config
        return {n: int(getattr(config, n)) for n in names if getattr(config, n, None)}

    return heads


def _bert_heads(m: Any) -> dict[str, int]:
    return {"num_attention_heads": int(m.self.num_attention_heads)}


def _gpt2_fused(m: Any, degree: int, layouts: dict[str, ParamLayout], prefix: str) -> None:
    regroup_fused_qkv(m.c_attn, parts=3, degree=degree, layouts=layouts, prefix=f"{prefix}c_attn")
    m.split_size = m.split_size // degree


#: Attention classes (by class name) whose heads split consistently under tensor parallelism.
ATTENTION: dict[str, AttentionSpec] = {
    "LlamaAttention": AttentionSpec(
        ("q_proj", "k_proj", "v_proj"),
        "o_proj",
        _config_heads("num_attention_heads", "num_key_value_heads"),
    ),
    "BertAttention": AttentionSpec(
        ("self.query", "self.key", "self.value"), "output.dense", _bert_heads
    ),
    "GPT2Attention": AttentionSpec(("c_attn",), "c_proj", _gpt2_heads, fused=_gpt2_fused),
    "GPTNeoXAttention": AttentionSpec(
        ("query_key_value",), "dense", _config_heads("num_attention_heads")
    ),
}


def attention_unit(fqn: str, model: nn.Module) -> tuple[str, AttentionSpec] | None | str:
    """The attention unit a module belongs to.

    Returns:
        ``(unit_fqn, spec)`` when an ancestor is a known attention class and ``fqn`` is one of
        its projections or its output; the class name of an unknown attention ancestor (any
        ancestor whose class name contains ``Attention``) as a string; None otherwise.
    """
    parts = fqn.split(".") if fqn else []
    unknown: str | None = None
    for cut in range(len(parts) - 1, -1, -1):
        unit = ".".join(parts[:cut])
        cls = type(model.get_submodule(unit)).__name__
        spec = ATTENTION.get(cls)
        rel = ".".join(parts[cut:])
        if spec is not None and rel in (*spec.projections, spec.output):
            return unit, spec
        if "Attention" in cls and unknown is None:
            unknown = cls
    return unknown


def is_conv1d(module: nn.Module) -> bool:
    """Whether ``module`` is Hugging Face's transposed-weight ``Conv1D``."""
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf") and hasattr(module, "nx")


def linear_from_conv1d(module: Any) -> nn.Linear:
    """An ``nn.Linear`` computing exactly what a Hugging Face ``Conv1D`` computes.

    ``Conv1D(nf, nx)`` holds ``weight`` as ``nx x nf`` and computes ``x @ weight + bias``; the
    linear layer holds the transpose, ``nf x nx``, and the same bias. Parameters keep their
    ``requires_grad``; the new weight is a contiguous copy.
    """
    weight: torch.Tensor = module.weight  # type: ignore[assignment]
    bias: torch.Tensor = module.bias  # type: ignore[assignment]
    linear = nn.Linear(
        int(module.nx), int(module.nf), device=weight.device, dtype=weight.dtype, bias=True
    )
    with torch.no_grad():
        linear.weight.copy_(weight.t())
        linear.bias.copy_(bias)
    linear.weight.requires_grad_(weight.requires_grad)
    linear.bias.requires_grad_(bias.requires_grad)
    return linear


def regroup_fused_qkv(
    linear: nn.Linear, parts: int, degree: int, layouts: dict[str, ParamLayout], prefix: str
) -> None:
    """Reorder a fused projection's output rows so each rank's contiguous shard is whole.

    The rows hold ``parts`` blocks (query, key, value), each ``width`` rows of consecutive heads.
    After the regrouping, rows ``[r * parts * width / degree, (r + 1) * ...)`` hold block 0's
    rows of shard ``r``, then block 1's, and so on: what a column-wise shard on rank ``r`` needs.
    """
    rows = linear.weight.shape[0]
    width = rows // parts
    step = width // degree
    perm = [
        p * width + r * step + i for r in range(degree) for p in range(parts) for i in range(step)
    ]
    index = torch.tensor(perm, device=linear.weight.device)
    with torch.no_grad():
        linear.weight.copy_(linear.weight[index])
        if linear.bias is not None:
            linear.bias.copy_(linear.bias[index])
    for name in ("weight", "bias"):
        layout = layouts.setdefault(f"{prefix}.{name}", ParamLayout())
        base = layout.row_perm if layout.row_perm is not None else list(range(rows))
        layout.row_perm = [base[i] for i in perm]
        layout.history.append(f"rows regrouped for {degree} tensor-parallel shards")


def original_layout(model: nn.Module, name: str, tensor: torch.Tensor) -> torch.Tensor:
    """A full parameter-shaped tensor (value, gradient) of ``name`` in the model's own layout.

    Parameters that no rewrite touched come back unchanged.
    """
    layouts: dict[str, ParamLayout] = getattr(model, LAYOUT_ATTR, {})
    layout = layouts.get(name)
    return tensor if layout is None else layout.to_original(tensor)


def record_layouts(model: nn.Module) -> dict[str, ParamLayout]:
    """The model's layout record, created empty if absent."""
    layouts: dict[str, ParamLayout] | None = getattr(model, LAYOUT_ATTR, None)
    if layouts is None:
        layouts = {}
        object.__setattr__(model, LAYOUT_ATTR, layouts)
    return layouts


def heads_problem(spec: AttentionSpec, module: nn.Module, degree: int) -> str | None:
    """Why ``degree``-way tensor parallelism cannot split this attention's heads, or None."""
    counts: dict[str, Any] = spec.heads(module)
    bad = {k: v for k, v in counts.items() if v % degree}
    if not bad:
        return None
    return (
        f"its head counts {bad} are not divisible by the tensor-parallel degree {degree}; pick a "
        "degree that divides them or leave this attention out of tensor parallelism"
    )
