"""Zoo models: seeded weights that leave the caller's RNG alone."""

from __future__ import annotations

import torch

from rewrite import zoo


def test_model_keeps_the_callers_torch_rng_state_and_seeds_its_weights() -> None:
    torch.manual_seed(123)
    state = torch.random.get_rng_state()
    a = zoo.model("gpt2", seed=7)
    assert torch.equal(torch.random.get_rng_state(), state)
    torch.manual_seed(999)
    b = zoo.model("gpt2", seed=7)
    c = zoo.model("gpt2", seed=8)
    wa, wb, wc = (next(iter(m.module.parameters())) for m in (a, b, c))
    assert torch.equal(wa, wb) and not torch.equal(wa, wc)


def test_building_a_model_shows_no_torch_internal_deprecation(recwarn) -> None:
    """Decomposing ResNet's export makes torch warn about its own pytree ``LeafSpec``; a user
    running `tuner demo` saw it on the console. Import keeps it off."""
    zoo.build("resnet")
    assert not [w for w in recwarn if "LeafSpec" in str(w.message)]
