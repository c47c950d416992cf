"""Shared fixtures for the rewrite tests."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture
def op_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy of the op registry for one test: ops it registers are gone afterwards."""
    from rewrite.ops import base

    monkeypatch.setattr(base, "_REGISTRY", dict(base._REGISTRY))
    monkeypatch.setattr(base, "_DERIVED", {})


@pytest.fixture(scope="session")
def zoo_gpt2():
    """The small (2-layer) GPT-2 from `rewrite.zoo`, imported once per session."""
    from rewrite import zoo

    return zoo.build("gpt2")
