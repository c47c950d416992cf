"""`python -m rewrite.plans.run`: a saved plan trains under torchrun and verifies its first step;
the launcher reports failures with the ranks' stderr and kills launches past their timeout."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from rewrite.plans.handwritten import handwritten_plan
from rewrite.plans.harness import build_workload
from rewrite.plans.launch import LaunchError, torchrun
from tests.rewrite.plans.expected import expected_collectives


def test_a_saved_plan_trains_and_verifies_under_torchrun(tmp_path: Path) -> None:
    model = build_workload("llama").model
    plan = handwritten_plan(model, "fsdp", 2, checkpointing="full")
    plan = replace(plan, collectives=expected_collectives(plan, model))  # as a planner models them
    path = plan.save(tmp_path / "plan.json")
    args = ["-m", "rewrite.plans.run", str(path), "--model", "llama", "--steps", "2", "--verify"]
    out = torchrun(args, 2)
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    steps = [line for line in lines if "step" in line]
    assert [s["step"] for s in steps] == [1, 2]
    assert steps[1]["loss"] < steps[0]["loss"]  # AdamW on the same batch
    assert steps[0]["collectives"] == steps[1]["collectives"] == plan.collectives
    verify = lines[-1]["summary"]["verify"]
    assert verify["ok"], verify
    assert verify["collectives_modeled"] == verify["collectives_counted"]


def test_a_failing_launch_shows_the_ranks_stderr(tmp_path: Path) -> None:
    with pytest.raises(LaunchError) as info:
        torchrun(["-m", "rewrite.plans.harness", str(tmp_path / "missing.json"), str(tmp_path)], 1)
    assert "failed (exit 1)" in str(info.value) and "missing.json" in str(info.value)


def test_a_launch_past_its_timeout_is_killed(tmp_path: Path) -> None:
    with pytest.raises(LaunchError, match="ran past 1 s and was killed"):
        torchrun(
            ["-m", "rewrite.plans.harness", str(tmp_path / "x.json"), str(tmp_path)], 1, timeout=1
        )
