"""The models the planner is benchmarked on, built from configs on the ``meta`` device.

Nothing is downloaded: each is a Hugging Face ``transformers`` class built from a config written
here, with parameters on ``meta`` (no memory, no initialisation time). Each function returns
``(module, example_inputs)`` where ``example_inputs`` is the global batch, as
`rewrite.plans.search` takes it.

* Llama 3.1 8B, 70B, 405B (the shapes of Meta's model cards and torchtitan's ``llama3``
  flavours: untied embeddings, grouped-query attention with 8 key/value heads, vocabulary 128256);
* a GPT-3 175B shape (96 layers, width 12288, 96 heads, MLP 49152, sequence 2048, vocabulary
  50257) as an ``OPTForCausalLM`` (OPT-175B was built to GPT-3 175B's shape) with GELU: GPT-3's
  architecture (learned positions, pre-LayerNorm, dense attention, GELU MLP) in a class whose
  projections are ``nn.Linear`` and whose attention runs ``scaled_dot_product_attention``;
* ViT-H/14 (32 layers, width 1280, 16 heads, MLP 5120, 224 px images, 1000 classes).
"""

from __future__ import annotations

from typing import Any

from rewrite.errors import PlanError

__all__ = ["LLAMA3", "build", "names"]

#: Llama 3.1 shapes by size.
LLAMA3: dict[str, dict[str, int]] = {
    "8b": {"hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
           "num_attention_heads": 32},
    "70b": {"hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
            "num_attention_heads": 64},
    "405b": {"hidden_size": 16384, "intermediate_size": 53248, "num_hidden_layers": 126,
             "num_attention_heads": 128},
}  # fmt: skip

_NAMES = ("llama3-8b", "llama3-70b", "llama3-405b", "gpt3-175b", "vit-h")


def names() -> tuple[str, ...]:
    """The model names `build` knows."""
    return _NAMES


def _on_meta(make: Any, config: Any) -> Any:
    import torch
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    try:
        with torch.device("meta"):
            return make(config).to(torch.bfloat16)
    finally:
        hf_logging.set_verbosity(level)


def build(name: str, batch: int = 8, seq_len: int | None = None, **overrides: Any) -> Any:
    """Build a benchmark model on ``meta`` with its global batch.

    Args:
        name: One of `names()`.
        batch: Global batch size (sequences or images).
        seq_len: Sequence length (token models; default 8192 for Llama, 2048 for GPT-3).
        **overrides: Config fields to change (e.g. ``num_hidden_layers=2`` for a test).

    Returns:
        ``(module, example_inputs)``.

    Raises:
        PlanError: On an unknown name.
    """
    import torch
    import transformers as _transformers

    transformers: Any = _transformers
    if name not in _NAMES:
        raise PlanError(f"Unknown planner model {name!r}; pick one of {_NAMES}.")
    cfg: Any
    make: Any
    if name.startswith("llama3"):
        seq = seq_len or 8192
        cfg = transformers.LlamaConfig(
            **LLAMA3[name.split("-")[1]], num_key_value_heads=8, vocab_size=128256,
            max_position_embeddings=max(seq, 8192), rope_theta=500000.0, rms_norm_eps=1e-5,
            tie_word_embeddings=False, use_cache=False,
        )  # fmt: skip
        make = transformers.LlamaForCausalLM
    elif name == "gpt3-175b":
        seq = seq_len or 2048
        cfg = transformers.OPTConfig(
            vocab_size=50257, max_position_embeddings=max(seq, 2048), hidden_size=12288,
            num_hidden_layers=96, num_attention_heads=96, ffn_dim=4 * 12288,
            word_embed_proj_dim=12288, do_layer_norm_before=True, activation_function="gelu",
            enable_bias=True, use_cache=False, tie_word_embeddings=False,
        )  # fmt: skip
        make = transformers.OPTForCausalLM
    else:
        seq = None
        cfg = transformers.ViTConfig(
            hidden_size=1280, num_hidden_layers=32, num_attention_heads=16,
            intermediate_size=5120, image_size=224, patch_size=14, num_labels=1000,
        )  # fmt: skip
        make = transformers.ViTForImageClassification
    for key, value in overrides.items():
        if not hasattr(cfg, key):
            raise PlanError(f"{type(cfg).__name__} has no field {key!r} to override.")
        setattr(cfg, key, value)
    module = _on_meta(make, cfg)
    if seq is None:
        x = torch.zeros((batch, 3, cfg.image_size, cfg.image_size), dtype=torch.bfloat16,
                        device="meta")  # fmt: skip
    else:
        x = torch.zeros((batch, seq), dtype=torch.int64, device="meta")
    return module, (x,)
