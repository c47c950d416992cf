"""Zoo models: seeded weights that leave the caller's RNG and environment alone, no network."""

from __future__ import annotations

import os
import subprocess
import sys

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


def test_building_leaves_the_environment_unchanged(monkeypatch) -> None:
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    before = dict(os.environ)
    zoo.model("bert")
    zoo.build("gpt2")
    assert dict(os.environ) == before


def test_building_needs_no_network_even_without_the_offline_flag() -> None:
    """In a fresh process without ``HF_HUB_OFFLINE``, with every socket connection refused."""
    code = (
        "import socket\n"
        "def refuse(*a): raise AssertionError(f'network access: {a}')\n"
        "socket.socket.connect = socket.socket.connect_ex = refuse\n"
        "from rewrite import zoo\n"
        "zoo.model('llama'); zoo.build('vit')\n"
    )
    env = {
        k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    }
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
