"""Shared fixtures for the tuner tests: a small mixed space, a toy problem, capped options."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from spaces import Bool, Choice, Fixed, Float, Int, Simplex, Space
from tuner import Tuner, TunerOptions

# Two shared cores: one torch thread is several times faster than two contending ones.
torch.set_num_threads(1)

OBJECTIVES = {"latency": "minimize", "speedup": "maximize"}
FAST = TunerOptions(num_restarts=2, raw_samples=16, maxiter=8, mc_samples=8, fit_maxiter=15)


def make_space() -> Space:
    return Space(
        {
            "x": Float(0.0, 1.0),
            "tau": Float(0.01, 10.0, log=True),
            "n": Int(1, 16),
            "mode": Choice(["greedy", "beam", "mcts"]),
            "restart": Bool(),
            "device": Fixed("h100"),
            "priors": Simplex(["fuse", "merge", "shard", "split"]),
        }
    )


def evaluate(config: dict[str, Any]) -> tuple[dict[str, float], dict[str, float]]:
    """Toy objectives with a trade-off, plus a constraint metric and a tracking metric."""
    w = config["priors"]
    x = config["x"]
    latency = (
        (x - 0.2) ** 2 + 0.5 * w["fuse"] + 0.01 * config["n"] + 0.1 * (config["mode"] == "beam")
    )
    speedup = 1.0 + x + w["merge"] - 0.2 * config["restart"]
    metrics = {"search_seconds": 10.0 * w["shard"] + 5.0 * x, "n_steps": float(config["n"] * 10)}
    return {"latency": latency, "speedup": speedup}, metrics


@pytest.fixture
def space() -> Space:
    return make_space()


def make_tuner(space: Space, **kwargs: Any) -> Tuner:
    kwargs.setdefault("options", FAST)
    kwargs.setdefault("n_initial", 4)
    return Tuner(space, OBJECTIVES, **kwargs)


def run(tuner: Tuner, n_steps: int, batch: int = 1) -> None:
    """Ask/tell ``n_steps`` batches, completing every trial."""
    for _ in range(n_steps):
        for trial in tuner.ask(batch):
            values, metrics = evaluate(trial.config)
            tuner.tell(trial.id, values, metrics=metrics)
