"""The planner's own plans handed back: `search` and `expert` plans applied under ``torchrun``.

Plans come from `rewrite.plans.search` and `rewrite.plans.expert` on the harness's small models
(fp32, ``h100-gt``), are applied by `rewrite.plans.apply` under ``torchrun --nproc_per_node 2``
and ``4`` (gloo, CPU), and one training step is compared with one process (tolerances in
`rewrite.plans.launch`). The collectives each rank counts must equal the plan's modeled ones
(``plan.collectives``, `rewrite.plans.step.collectives_of`) in kind and number.

The searched plan runs under a memory cap between the fully checkpointed and the plain FSDP
expert, where it picks a shape no expert has: checkpointing per block (one block selective, the
other not) and FSDP blocks that keep their parameters gathered from forward to backward.

Gradient accumulation: a searched plan with two microbatches (FSDP) and DDP over two
microbatches run each microbatch's forward and backward, then one AdamW step, against one
process's step on the whole batch. GPT-2's tensor-parallel expert plan runs with its ``Conv1D``
converted and its fused QKV regrouped by apply.

The default run is two launches at 2 ranks (about 30 s each); the rest is marked slow.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

import pytest

from rewrite.plans import ParallelPlan, expert, search
from rewrite.plans.harness import build_workload, reference_step
from rewrite.plans.launch import compare_case, run_cases

BATCH, SEQ = 8, 32
NUMERICS = {"device": "h100-gt", "precision": "fp32"}


@cache
def _work(name: str) -> Any:
    return build_workload(name, batch=BATCH, seq_len=SEQ)


@cache
def _reference(name: str) -> Any:
    """One process's step on a fresh copy (a step updates the model it runs)."""
    return reference_step(build_workload(name, batch=BATCH, seq_len=SEQ))


@cache
def _searched(name: str, n: int = 2) -> ParallelPlan:
    """The search at ``n`` devices under a cap between FSDP with full checkpointing and DDP."""
    w = _work(name)
    full = expert(w.model, w.inputs, mesh=n, style="fsdp", checkpointing="full", **NUMERICS)
    plain = expert(w.model, w.inputs, mesh=n, style="ddp", checkpointing="none", **NUMERICS)
    cap = 0.5 * (full.cost["peak_memory"] + plain.cost["peak_memory"])
    return search(w.model, w.inputs, mesh=n, memory_cap=cap, time_budget=5.0, **NUMERICS)


def _expert(name: str, mesh: Any, style: str, ckpt: str, **options: Any) -> ParallelPlan:
    w = _work(name)
    return expert(
        w.model, w.inputs, mesh=mesh, style=style, checkpointing=ckpt, **options, **NUMERICS
    )


def _case(name: str, tag: str, plan: ParallelPlan) -> dict[str, Any]:
    return {"id": f"{name}-{tag}", "model": name, "plan": plan.to_dict(), "batch": BATCH,
            "seq_len": SEQ}  # fmt: skip


def _run(cases: list[dict[str, Any]], nproc: int, out: Path) -> dict[str, dict[str, int]]:
    """Launch ``cases``; assert each matched one process and its modeled collectives."""
    ranks = run_cases(cases, nproc, out, timeout=600)
    measured = {}
    for c in cases:
        plan = ParallelPlan.from_dict(c["plan"])
        results = [next(x for x in rank if x["id"] == c["id"]) for rank in ranks]
        if not plan.expressible:  # refused on every rank, the model untouched
            assert all("error" in r and r["unchanged"] for r in results), c["id"]
            continue
        mismatch = compare_case(c, ranks, out, _reference(c["model"]))
        assert not mismatch.problems, (c["id"], mismatch)
        for r in results:
            assert r["collectives"] == plan.collectives, (c["id"], r["collectives"])
        measured[c["id"]] = results[0]["collectives"]
    return measured


def test_a_searched_plan_beyond_the_experts_runs_at_two_ranks(tmp_path: Path) -> None:
    plan = _searched("llama")
    assert plan.expressible and plan.provenance["microbatches"] == 1
    modes = {k: m.checkpoint for k, m in plan.modules.items() if k.startswith("model.layers.")}
    assert len(set(modes.values())) > 1, modes  # checkpointing chosen per block
    fits = [
        b
        for b in plan.baselines.values()
        if b.cost.get("peak_memory", 1e30) <= plan.provenance["memory_cap"]
    ]
    assert plan.cost["tokens_per_second"] >= max(b.cost["tokens_per_second"] for b in fits)
    cases = [
        _case("llama", "search", plan),
        _case("llama", "tp-full", _expert("llama", 2, "tp", "full")),
        _case("llama", "fsdp-full", _expert("llama", 2, "fsdp", "full")),
    ]
    measured = _run(cases, 2, tmp_path)
    assert measured["llama-search"] == {"all_gather": 3, "reduce_scatter": 3}
    assert measured["llama-tp-full"] == {"all_reduce": 10}  # Megatron's f/g, recomputed once
    assert measured["llama-fsdp-full"] == {"all_gather": 5, "reduce_scatter": 3}


@cache
def _accumulating(name: str) -> ParallelPlan:
    """The search under a cap just below the fully checkpointed FSDP expert: it picks FSDP over
    two microbatches (one half-batch's activations at a time)."""
    w = _work(name)
    cap = 0.95 * _expert(name, 2, "fsdp", "full").cost["peak_memory"]
    return search(w.model, w.inputs, mesh=2, memory_cap=cap, time_budget=5.0, **NUMERICS)


@pytest.fixture(scope="module")
def two_more(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, int]]:
    """One launch at 2 ranks: gradient accumulation (the searched plan, DDP over two
    microbatches) and GPT-2's tensor-parallel expert plan."""
    cases = [
        _case("llama", "search-mb2", _accumulating("llama")),
        _case("llama", "ddp-mb2", _expert("llama", 2, "ddp", "none", microbatches=2)),
        _case("gpt2", "tp-none", _expert("gpt2", 2, "tp", "none")),
    ]
    return _run(cases, 2, tmp_path_factory.mktemp("two_more"))


def test_gradient_accumulation_over_two_microbatches_at_two_ranks(
    two_more: dict[str, dict[str, int]],
) -> None:
    """FSDP gathers and reduce-scatters per microbatch, DDP all-reduces on the last one only;
    the accumulated step matches one process's step on the whole batch."""
    plan = _accumulating("llama")
    assert plan.expressible and plan.microbatches == 2 and plan.fsdp_axes == ("dp",)
    cap = plan.provenance["memory_cap"]
    assert (
        plan.cost["peak_memory"]
        <= cap
        < min(b.cost["peak_memory"] for b in plan.baselines.values() if b.microbatches == 1)
    )
    assert two_more["llama-search-mb2"] == {"all_gather": 6, "reduce_scatter": 6}
    assert two_more["llama-ddp-mb2"] == {"all_reduce": 1}  # synced once, not per microbatch


def test_gpt2_tensor_parallel_expert_plan_runs_at_two_ranks(
    two_more: dict[str, dict[str, int]],
) -> None:
    """GPT-2's ``Conv1D`` projections become ``nn.Linear`` and its fused ``c_attn`` is regrouped
    per device by apply; the planner costs the split parts like separate projections."""
    plan = _expert("gpt2", 2, "tp", "none")
    assert plan.expressible, plan.problems
    assert plan.modules["transformer.h.*.attn.c_attn"].tp.style == "colwise"
    assert plan.modules["transformer.h.*.mlp.c_proj"].tp.style == "rowwise"
    assert two_more["gpt2-tp-none"] == {"all_reduce": 8}  # Megatron's f/g, two per block


@pytest.mark.slow
def test_expert_and_searched_plans_run_at_two_and_four_ranks(tmp_path: Path) -> None:
    two = [
        _case("llama", f"{s}-{c}", _expert("llama", 2, s, c))
        for s, c in (("ddp", "none"), ("tp", "none"), ("fsdp", "selective"))
    ] + [
        _case("bert", "tp-full", _expert("bert", 2, "tp", "full")),
        _case("bert", "search", _searched("bert")),
        _case("gpt_neox", "fsdp-none", _expert("gpt_neox", 2, "fsdp", "none")),
        # a parallel residual sums two partial outputs before one all-reduce: the planner
        # flags it (DTensor reduces each row-wise output), apply refuses it on every rank
        _case("gpt_neox", "tp-refused", _expert("gpt_neox", 2, "tp", "full")),
        _case("gpt2", "tp-full", _expert("gpt2", 2, "tp", "full")),
        _case("llama", "tp-mb2", _expert("llama", 2, "tp", "none", microbatches=2)),
    ]
    measured = _run(two, 2, tmp_path / "two")
    assert measured["llama-ddp-none"] == {"all_reduce": 1}
    assert measured["gpt2-tp-full"] == {"all_reduce": 10}
    assert measured["llama-tp-mb2"] == {"all_reduce": 16}  # per microbatch
    dp_tp = {"dp": 2, "tp": 2}
    four = [
        _case("llama", "fsdp+tp-none", _expert("llama", dp_tp, "fsdp+tp", "none")),
        _case("llama", "fsdp+tp-full", _expert("llama", dp_tp, "fsdp+tp", "full")),
        _case("llama", "search", _searched("llama", 4)),
        # 2 key/value heads cannot split 4 ways: the planner flags it, apply refuses it
        _case("llama", "tp4-refused", _expert("llama", {"tp": 4}, "tp", "selective")),
        _case("gpt2", "fsdp+tp-full", _expert("gpt2", dp_tp, "fsdp+tp", "full")),
        _case("llama", "fsdp+tp-mb2", _expert("llama", dp_tp, "fsdp+tp", "none", microbatches=2)),
    ]
    measured = _run(four, 4, tmp_path / "four")
    assert measured["gpt2-fsdp+tp-full"] == {"all_gather": 5, "all_reduce": 10, "reduce_scatter": 3}
    assert measured["llama-fsdp+tp-mb2"] == {
        "all_gather": 10,
        "all_reduce": 16,
        "reduce_scatter": 6,
    }
    assert measured["llama-fsdp+tp-full"] == {
        "all_gather": 5,
        "all_reduce": 10,
        "reduce_scatter": 3,
    }
