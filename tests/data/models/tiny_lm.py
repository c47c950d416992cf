"""A tiny language model for the tune-model tests: embedding, a pre-norm MLP block with a
residual, and a vocabulary head (what `tuner tune-model` is pointed at: a file and a factory)."""

from __future__ import annotations

import torch
from torch import nn


class TinyLM(nn.Module):
    def __init__(self, vocab: int = 100, width: int = 32) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        x = x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        return self.head(x)


def build() -> TinyLM:
    torch.manual_seed(0)
    return TinyLM()


not_a_model = 3


class Linear(nn.Linear):
    """A plain linear layer (for inputs it cannot take)."""

    def __init__(self) -> None:
        super().__init__(64, 8)


def on_meta() -> TinyLM:
    """A model built without weights."""
    with torch.device("meta"):
        return TinyLM()


class WithOptions(TinyLM):
    """TinyLM with keyword arguments, as Hugging Face models take ``use_cache``."""

    def forward(  # type: ignore[override]
        self,
        ids: torch.Tensor,
        mask: torch.Tensor | None = None,
        scale: float = 1.0,
        use_cache: bool = True,
    ) -> torch.Tensor:
        if use_cache:
            raise ValueError("a cache object is no tensor: pass use_cache=False")
        out = super().forward(ids) * scale
        return out if mask is None else out * mask[..., None]


def with_options() -> WithOptions:
    torch.manual_seed(0)
    return WithOptions()
