"""Shared fixtures for the planner's tests: small zoo models' layouts, built once."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def llama_small():
    """The small Llama of `rewrite.zoo` (2 layers, batch 4, sequence 16) and its layout."""
    from rewrite import zoo
    from rewrite.plans.api import layout_for

    zm = zoo.model("llama-small", batch=4)
    return zm, layout_for(zm.module, zm.args)


@pytest.fixture(scope="session")
def gpt2_small():
    """The small GPT-2 of `rewrite.zoo` (``Conv1D`` projections) and its layout."""
    from rewrite import zoo
    from rewrite.plans.api import layout_for

    zm = zoo.model("gpt2-small", batch=4)
    return zm, layout_for(zm.module, zm.args)
