"""The plan data model: every field round-trips, old files load, bad plans are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewrite.errors import PlanError
from rewrite.plans import ModulePlan, ParallelPlan, PipelineSpec, TensorParallel, load

GOLDEN = Path(__file__).parent.parent / "data" / "parallel_plan_v1.json"


def _full_plan() -> ParallelPlan:
    tp = TensorParallel(
        "prepare_input",
        input_kwarg_layouts={"hidden_states": "S(1)"},
        desired_input_kwarg_layouts={"hidden_states": "R"},
        use_local_output=False,
    )
    return ParallelPlan(
        mesh={"pp": 2, "dp": 2, "tp": 2},
        modules={
            "model.layers.*.self_attn": ModulePlan(tp=tp),
            "model.embed_tokens": ModulePlan(
                tp=TensorParallel(
                    "prepare_output", output_layouts=("R",), desired_output_layouts=("S(1)",)
                )  # fmt: skip
            ),
            "model.layers.*": ModulePlan(fsdp=True, checkpoint="full", reshard_after_forward=False),
        },
        tp_axis="tp",
        fsdp_axes=("dp",),
        pipeline=PipelineSpec("pp", (("model.layers.0",), ("model.layers.1",)), "1F1B", 4),
        problems={"plan": "why"},
        cost={"step_time": 1.0, "tokens_per_second": 2.0, "peak_memory": 3.0},
        collectives={"all_gather": 4},
        baselines={"fsdp": ParallelPlan(mesh={"dp": 8}, fsdp_axes=("dp",))},
    )


def test_every_field_round_trips(tmp_path: Path) -> None:
    plan = _full_plan()
    back = load(plan.save(tmp_path / "p.json"))
    assert back == plan and back.to_dict() == plan.to_dict()
    assert not back.expressible and back.baselines["fsdp"].n_devices == 8


def test_a_plan_written_before_the_new_fields_loads() -> None:
    plan = load(GOLDEN)
    assert plan.problems == {} and plan.cp_axis is None and plan.expressible
    mp = plan.modules["layers.*.attention.wq"]
    assert mp.reshard_after_forward and mp.tp is not None and mp.tp.input_kwarg_layouts is None


@pytest.mark.parametrize(
    ("change", "phrase"),
    [
        ({"mesh": {"dp": 0}}, "sizes >= 1"),
        ({"tp_axis": "tp", "cp_axis": "tp", "mesh": {"tp": 2}}, "one role"),
        ({"cost": {"step_time": float("nan")}}, "finite"),
    ],
)
def test_bad_plans_are_refused(change: dict, phrase: str) -> None:
    base = {"mesh": {"dp": 2}}
    with pytest.raises(PlanError, match=phrase):
        ParallelPlan(**{**base, **change})


def test_bad_layouts_are_refused() -> None:
    with pytest.raises(PlanError, match="placements"):
        TensorParallel("prepare_input", input_kwarg_layouts={"x": "Shard(1)"})


def test_a_newer_file_asks_for_an_upgrade(tmp_path: Path) -> None:
    doc = json.loads(GOLDEN.read_text())
    doc["format_version"] = 99
    (tmp_path / "new.json").write_text(json.dumps(doc))
    with pytest.raises(PlanError, match="Upgrade"):
        load(tmp_path / "new.json")
