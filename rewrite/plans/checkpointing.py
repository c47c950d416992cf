"""Activation checkpointing as plans ask for it: ``full`` or torchtitan's op-level ``selective``.

Both use the composable ``torch.distributed._composable.checkpoint_activation.checkpoint``, which
keeps module names and parameters (no wrapper module), so FSDP and tensor-parallel styles apply
to the same names. ``selective`` saves the outputs of matmuls (every second one recomputed), of
attention and of reduce-scatters and recomputes the rest; on the CPU a linear layer with a bias
runs as ``addmm``, treated as a matmul here.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch
from torch import nn

__all__ = ["apply_checkpoint", "selective_context"]


def apply_checkpoint(module: nn.Module, mode: str) -> None:
    """Checkpoint ``module``'s activations in place (names and parameters unchanged).

    Args:
        module: The module.
        mode: ``"full"`` (recompute its forward in backward) or ``"selective"`` (torchtitan's
            op-level policy, `selective_context`).
    """
    from torch.distributed._composable.checkpoint_activation import checkpoint

    if mode == "full":
        checkpoint(module)
    else:
        checkpoint(module, context_fn=selective_context)


def _sac_save_ops() -> tuple[set[Any], set[Any]]:
    aten = torch.ops.aten
    matmuls = {aten.mm.default, aten.addmm.default}
    saved = {
        aten._scaled_dot_product_flash_attention_for_cpu.default,
        aten._scaled_dot_product_attention_math.default,
        aten._scaled_dot_product_efficient_attention.default,
        aten._scaled_dot_product_flash_attention.default,
        torch.ops._c10d_functional.reduce_scatter_tensor.default,
        aten.max.default,
    }
    return matmuls, saved


def selective_context() -> Any:
    """torchtitan's op-level selective checkpointing: save compute-heavy outputs, but recompute
    every second matmul, to halve what matmuls keep alive."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    matmuls, saved = _sac_save_ops()
    counts: dict[str, int] = defaultdict(int)

    def policy(ctx: Any, func: Any, *args: Any, **kwargs: Any) -> Any:
        mode = "recompute" if ctx.is_recompute else "forward"
        if func in matmuls:
            counts[mode] += 1
            save = counts[mode] % 2 == 1
        else:
            save = func in saved
        return CheckpointPolicy.MUST_SAVE if save else CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)
