"""Applied plans under ``torchrun --nproc_per_node 2`` and ``4`` (gloo, CPU) against one process.

For each case the ranks apply a plan to a seeded model, run one training step (forward, loss,
backward, AdamW) and write their outputs, the full gradients and parameters and the collectives
they counted; the parent compares them with the same step in one process on the whole batch
(`rewrite.plans.launch` states the tolerances and why) and the counts with the ones derived from
the plan's styles (`expected.py`). Plans DTensor cannot express are refused on every rank and
leave the model as it was.

The default run launches torchrun twice (2 and 4 ranks, about 90 s on two cores); the full
matrix of models x styles x checkpointing is marked slow.
"""

from __future__ import annotations

from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from rewrite.plans import ModulePlan, ParallelPlan, TensorParallel
from rewrite.plans.handwritten import handwritten_plan, with_pipeline
from rewrite.plans.harness import StepResult, build_workload, reference_step
from rewrite.plans.launch import compare_case, run_cases
from tests.rewrite.plans.expected import expected_collectives, expected_pipeline

TWO_D = ("hsdp", "fsdp+tp", "fsdp+tp+sp")


@cache
def _model(name: str) -> Any:
    return build_workload(name).model


@cache
def _reference(name: str) -> StepResult:
    return reference_step(build_workload(name))


def case(
    model: str, style: str, nproc: int, ckpt: str | list[str] = "none", **kw: Any
) -> dict[str, Any]:
    mesh = (2, nproc // 2) if style in TWO_D else nproc
    plan = handwritten_plan(
        _model(model), style, mesh, checkpointing=ckpt, tp_blocks=kw.pop("tp_blocks", None)
    )
    tag = ckpt if isinstance(ckpt, str) else "-".join(ckpt)
    return {
        "id": f"{model}-{style}-{tag}-{nproc}{kw.pop('suffix', '')}",
        "model": model,
        "plan": plan.to_dict(),
        **kw,
    }


def check(
    cases: list[dict[str, Any]], ranks: list[list[dict[str, Any]]], out: Path
) -> dict[str, dict[str, int]]:
    """Assert each case matched one process and its derived counts; return the counts."""
    counts = {}
    for c in cases:
        if c.get("refused"):
            continue
        mismatch = compare_case(c, ranks, out, _reference(c["model"]))
        assert not mismatch.problems, (c["id"], mismatch)
        plan = ParallelPlan.from_dict(c["plan"])
        got = next(r for r in ranks[0] if r["id"] == c["id"])
        if plan.pipeline is not None:  # stages differ: every rank against its own stages
            per_pp = len(ranks) // plan.mesh["pp"]
            fsdp = c.get("fsdp_counts", {})  # FSDP's counts under the schedule: see the test
            for r, rank in enumerate(ranks):
                mine = dict(next(x for x in rank if x["id"] == c["id"])["collectives"])
                stage_fsdp = fsdp.get(str(r // per_pp), {})
                assert {k: mine.pop(k, 0) for k in stage_fsdp} == stage_fsdp, (c["id"], r)
                plain = replace(plan, fsdp_axes=())
                want = expected_pipeline(plain, _model(c["model"]), r // per_pp)
                assert mine == want, (c["id"], r)
            counts[c["id"]] = got["collectives"]
            continue
        assert got["collectives"] == expected_collectives(plan, _model(c["model"])), c["id"]
        if not plan.tp_axis:  # FSDP2 and replicate call torch.distributed: both counts agree
            assert got["api_collectives"] == got["collectives"], c["id"]
        counts[c["id"]] = got["collectives"]
    return counts


def pipelined(
    model: str,
    style: str,
    nproc: int,
    schedule: str,
    ckpt: str | list[str] = "none",
    **kw: Any,
) -> dict[str, Any]:
    """A pipeline over ``pp`` (2 ranks) around a hand-written plan for the remaining ranks.

    ``style="ddp"`` with ``nproc=2`` is a pure pipeline (the plan's other axis has size 1 and
    no role, so it is dropped).
    """
    virtual = 2 if schedule == "interleaved_1F1B" else 1
    rest = nproc // 2
    base = handwritten_plan(_model(model), style, rest, checkpointing=ckpt)
    if rest == 1:
        base = replace(base, mesh={}, replicate_axes=())
    plan = with_pipeline(base, _model(model), 2, schedule=schedule, virtual_stages=virtual)
    tag = ckpt if isinstance(ckpt, str) else "-".join(ckpt)
    suffix = kw.pop("suffix", "")
    return {
        "id": f"{model}-pp-{schedule}-{style}-{tag}-{nproc}{suffix}",
        "model": model,
        "plan": plan.to_dict(),
        **kw,
    }


def refused_case(model: str, plan: ParallelPlan, suffix: str) -> dict[str, Any]:
    return {
        "id": f"{model}-refused-{suffix}",
        "model": model,
        "plan": plan.to_dict(),
        "refused": True,
    }


def check_refused(cases: list[dict[str, Any]], ranks: list[list[dict[str, Any]]]) -> dict[str, str]:
    messages = {}
    for c in cases:
        if not c.get("refused"):
            continue
        for rank in ranks:
            res = next(r for r in rank if r["id"] == c["id"])
            assert "error" in res and res["unchanged"], (c["id"], res)
        messages[c["id"]] = next(r for r in ranks[0] if r["id"] == c["id"])["error"]
    return messages


def test_two_ranks_match_one_process(tmp_path: Path) -> None:
    llama = _model("llama")
    nested = handwritten_plan(llama, "tp", 2)  # a style on a block and on its projections
    nested = replace(
        nested,
        modules={**nested.modules, "model.layers.0": ModulePlan(tp=TensorParallel("sequence"))},
    )
    tied = ParallelPlan(
        mesh={"tp": 2}, tp_axis="tp", modules={"lm_head": ModulePlan(tp=TensorParallel("colwise"))}
    )
    cases = [
        case("llama", "fsdp", 2),
        case("llama", "fsdp", 2, comm_debug_mode=True, suffix="-cdm"),
        case("llama", "ddp", 2),
        case("llama", "tp", 2),
        case("llama", "tp+sp", 2),
        case("llama", "tp+sp", 2, "full"),
        case("llama", "tp+sp", 2, "selective"),
        case("llama", "fsdp", 2, "selective"),
        case("gpt2", "tp+sp", 2),
        case("bert", "tp", 2, "full"),
        case("gpt_neox", "tp+sp", 2),
        pipelined("llama", "ddp", 2, "1F1B", ["full", "selective"]),
        pipelined("gpt_neox", "ddp", 2, "interleaved_1F1B"),
        pipelined("llama", "ddp", 2, "gpipe"),
        refused_case("gpt2", tied, "tied"),
        refused_case("llama", nested, "nested"),
    ]
    ranks = run_cases(cases, 2, tmp_path)
    counts = check(cases, ranks, tmp_path)
    assert counts["llama-fsdp-none-2"] == counts["llama-fsdp-none-2-cdm"]  # CommDebugMode agrees
    assert counts["llama-fsdp-none-2"] == {"all_gather": 5, "reduce_scatter": 3}
    messages = check_refused(cases, ranks)
    assert "tied to" in messages["gpt2-refused-tied"]
    assert "while rehearsing it on a meta copy" in messages["llama-refused-nested"]


def custom(model: str, plan: ParallelPlan, name: str) -> dict[str, Any]:
    return {"id": f"{model}-{name}", "model": model, "plan": plan.to_dict()}


def test_four_ranks_match_one_process(tmp_path: Path) -> None:
    llama = _model("llama")
    fsdp = handwritten_plan(llama, "fsdp", 4)
    flat = replace(fsdp, mesh={"a": 2, "b": 2}, fsdp_axes=("a", "b"))  # two axes, flattened
    tp = handwritten_plan(llama, "fsdp+tp", (2, 2))
    ddp_tp = replace(
        tp,
        fsdp_axes=(),
        replicate_axes=("dp",),
        modules={k: replace(v, fsdp=False) for k, v in tp.modules.items()},
    )
    cases = [
        case("llama", "fsdp+tp+sp", 4, "selective"),
        case("llama", "fsdp+tp", 4, ["full", "selective"], tp_blocks=[0], suffix="-mixed"),
        case("llama", "hsdp", 4),
        case("gpt2", "fsdp+tp", 4, "full"),
        custom("llama", flat, "fsdp-2-axes"),
        custom("llama", ddp_tp, "ddp+tp"),
        # FSDP per stage under 1F1B with 2 microbatches, G groups (its blocks and the stage's
        # root), derived from the schedule's order (stage 0: F1 F2 B1 B2; stage 1: F1 B1 F2 B2)
        # and the stage's FSDP settings (blocks reshard after forward, not after backward; one
        # gradient reduction at the end): F1 gathers G, then F2 and B1 (stage 0) or B1 and B2
        # (stage 1) re-gather the G - 1 blocks: 3G - 2 all-gathers, G reduce-scatters. The cut
        # is [embedding, block 0, block 1] | [norm, head]: G = 3 and G = 1.
        pipelined(
            "llama",
            "fsdp",
            4,
            "1F1B",
            fsdp_counts={
                "0": {"all_gather": 7, "reduce_scatter": 3},
                "1": {"all_gather": 1, "reduce_scatter": 1},
            },
        ),
        pipelined("gpt_neox", "tp", 4, "1F1B", "full"),
        refused_case("llama", handwritten_plan(llama, "tp", 4), "heads"),
    ]
    ranks = run_cases(cases, 4, tmp_path)
    counts = check(cases, ranks, tmp_path)
    assert counts["llama-hsdp-none-4"] == {"all_gather": 5, "reduce_scatter": 3, "all_reduce": 3}
    assert counts["llama-fsdp-2-axes"] == {"all_gather": 5, "reduce_scatter": 3}
    assert (
        "not divisible by the tensor-parallel degree 4"
        in check_refused(cases, ranks)["llama-refused-heads"]
    )


MATRIX_2 = ("ddp", "fsdp", "tp", "tp+sp")
MATRIX_4 = ("ddp", "fsdp", "hsdp", "fsdp+tp", "fsdp+tp+sp")


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize("model", ["llama", "gpt2", "bert", "gpt_neox"])
def test_matrix(model: str, nproc: int, tmp_path: Path) -> None:
    styles = MATRIX_2 if nproc == 2 else MATRIX_4
    cases = [case(model, s, nproc, ck) for s in styles for ck in ("none", "selective", "full")]
    mixed = "fsdp+tp" if nproc == 4 else "tp"
    cases.append(case(model, mixed, nproc, ["full", "none"], tp_blocks=[1], suffix="-mixed"))
    ranks = run_cases(cases, nproc, tmp_path, timeout=900)
    check(cases, ranks, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("nproc", [2, 4])
@pytest.mark.parametrize("model", ["llama", "gpt_neox"])
def test_pipeline_matrix(model: str, nproc: int, tmp_path: Path) -> None:
    schedules = ("gpipe", "1F1B", "interleaved_1F1B")
    if nproc == 2:
        cases = [pipelined(model, "ddp", 2, s, ck) for s in schedules for ck in ("none", "full")]
    else:  # DDP over the stage's other axis: its counts are checked against one process only
        cases = [pipelined(model, st, 4, "1F1B", "selective") for st in ("tp",)]
        cases.append(pipelined(model, "ddp", 4, "gpipe", "full", suffix="-replicated"))
    ranks = run_cases(cases, nproc, tmp_path, timeout=900)
    for c in cases:
        if "-replicated" in c["id"]:
            mismatch = compare_case(c, ranks, tmp_path, _reference(c["model"]))
            assert not mismatch.problems, (c["id"], mismatch)
    check([c for c in cases if "-replicated" not in c["id"]], ranks, tmp_path)
