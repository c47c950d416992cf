"""`python -m rewrite.plans.run`: a saved plan trains under torchrun and verifies its first step."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from rewrite.plans.handwritten import handwritten_plan
from rewrite.plans.harness import build_workload
from rewrite.plans.launch import torchrun
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
