"""The cost model's anchor: torchtitan's published Llama 3.1 benchmark on H100s.

Source: pytorch/torchtitan ``benchmarks/llama3_h100_202412_torchtitan.md`` (end of 2024; Grand
Teton hosts, 8 H100 96 GB HBM2e at 500 W per host, NVLink inside, 400 Gb/s RDMA per GPU across;
sequence 8192 unless stated; tokens/s per GPU read at iteration 90; memory the maximum over GPUs,
as torchtitan logs it: the caching allocator's peak reserved bytes). `ROWS` holds every row of
its tables 1 to 6; `strategy_for` writes each row's configuration as a `Strategy` (the layout
torchtitan's ``parallelize_llama`` applies: Megatron tensor parallelism with sequence
parallelism, vocabulary-parallel embedding and head with loss parallelism, FSDP2 per block and
on the root, checkpointing per block, torchtitan's pipeline split and default microbatches =
pipeline degree).

`fit` sets the four physical factors the model fits, each on one row, by solving that row
exactly: ``efficiency.matmul`` (achieved fraction of the bf16 matmul peak) on table 1's "FSDP"
row's tokens/s; ``family_efficiency.attention`` (attention kernels' efficiency relative to
GEMMs') on table 2's "FSDP 8, CP 1" row (sequence 32768, where attention dominates; no context
parallelism) -- these two are solved together, alternately, until both rows hold;
``training.float8_efficiency`` (of the float8 peak) on table 1's "+ compile + Float8" row;
``training.memory_reserve`` (reserved over allocated bytes) on table 1's "FSDP" row's memory.
Every other row is a prediction. There are no per-row constants. Rows with context parallelism
above 1 are predicted too (the sequence split on the ``cp`` axis, keys and values all-gathered
for attention), but the model does not hold ring attention's efficiency at 64k-256k tokens, so
they are reported outside the bar (`Row.modelled`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from rewrite.devices import DeviceProfile, load_device
from rewrite.plans.layout import ModelLayout, layout_of
from rewrite.plans.step import StepCost, step_cost
from rewrite.plans.strategy import Strategy

__all__ = ["FIT_ROWS", "ROWS", "Row", "fit", "predict", "strategy_for"]

GIB = 2**30


@dataclass(frozen=True)
class Row:
    """One published row.

    Attributes:
        table: Table number in the source.
        label: The row's technique or parallelism, as published.
        model: ``"8b"``, ``"70b"`` or ``"405b"``.
        mesh: Ordered mesh, torchtitan's order (pp, dp, cp, tp).
        local_batch: Sequences per data-parallel rank.
        seq: Sequence length.
        checkpoint: ``"selective"`` or ``"full"``.
        compile: ``torch.compile`` per block.
        float8: Float8 linears (with float8 FSDP all-gathers).
        async_tp: Asynchronous tensor parallelism.
        schedule: Pipeline schedule (with ``pp`` in the mesh).
        tps: Published tokens/s per GPU.
        gib: Published memory (GiB).
    """

    table: int
    label: str
    model: str
    mesh: tuple[tuple[str, int], ...]
    local_batch: int
    seq: int
    checkpoint: str
    compile: bool
    float8: bool
    tps: float
    gib: float
    async_tp: bool = False
    schedule: str = "1F1B"

    @property
    def key(self) -> str:
        """A short identifier, e.g. ``T1 FSDP``."""
        return f"T{self.table} {self.label}"

    @property
    def modelled(self) -> bool:
        """Whether the done-when bar applies: every row without context parallelism above 1
        (ring attention's efficiency at 64k-256k tokens is not in the model; those rows are
        predicted and reported all the same)."""
        return dict(self.mesh).get("cp", 1) == 1

    @property
    def dp(self) -> int:
        """Data-parallel (FSDP) degree."""
        return dict(self.mesh).get("dp", 1)

    @property
    def global_batch(self) -> int:
        """Sequences per step."""
        return self.local_batch * self.dp


def _m(**axes: int) -> tuple[tuple[str, int], ...]:
    return tuple((k, v) for k, v in axes.items() if v > 1 or k == "dp")


def _rows() -> tuple[Row, ...]:
    t1 = dict(model="8b", mesh=_m(dp=8), local_batch=2, seq=8192, checkpoint="selective")
    t3 = dict(t1, mesh=_m(dp=128))
    t4 = dict(model="70b", mesh=_m(dp=32, tp=8), local_batch=16, seq=8192, checkpoint="full",
              compile=True, float8=True)  # fmt: skip
    t5 = dict(model="405b", mesh=_m(pp=8, dp=8, tp=8), local_batch=32, seq=8192,
              checkpoint="full", compile=True, float8=True, async_tp=True)  # fmt: skip
    t2 = dict(model="8b", local_batch=1, checkpoint="full", compile=True, float8=True)
    t6 = dict(model="405b", local_batch=8, checkpoint="full", compile=True, float8=True,
              async_tp=True)  # fmt: skip
    return (
        Row(1, "FSDP", **t1, compile=False, float8=False, tps=5762, gib=82.4),  # type: ignore[arg-type]
        Row(1, "FSDP + compile", **t1, compile=True, float8=False, tps=6667, gib=77.0),  # type: ignore[arg-type]
        Row(1, "FSDP + compile + Float8", **t1, compile=True, float8=True, tps=8532, gib=76.8),  # type: ignore[arg-type]
        Row(2, "FSDP 8, CP 1", **t2, mesh=_m(dp=8), seq=32768, tps=3890, gib=83.9),  # type: ignore[arg-type]
        Row(2, "FSDP 4, CP 2", **t2, mesh=_m(dp=4, cp=2), seq=65536, tps=2540, gib=84.2),  # type: ignore[arg-type]
        Row(2, "FSDP 2, CP 4", **t2, mesh=_m(dp=2, cp=4), seq=131072, tps=1071, gib=84.0),  # type: ignore[arg-type]
        Row(2, "FSDP 1, CP 8", **t2, mesh=_m(dp=1, cp=8), seq=262144, tps=548, gib=84.5),  # type: ignore[arg-type]
        Row(3, "FSDP", **t3, compile=False, float8=False, tps=5605, gib=67.0),  # type: ignore[arg-type]
        Row(3, "FSDP + compile", **t3, compile=True, float8=False, tps=6514, gib=62.0),  # type: ignore[arg-type]
        Row(3, "FSDP + compile + Float8", **t3, compile=True, float8=True, tps=8380, gib=61.8),  # type: ignore[arg-type]
        Row(4, "2D", **t4, tps=829, gib=71.9),  # type: ignore[arg-type]
        Row(4, "2D + AsyncTP", **{**t4, "async_tp": True}, tps=876, gib=67.6),  # type: ignore[arg-type]
        Row(5, "1F1B", **t5, schedule="1F1B", tps=100, gib=82.5),  # type: ignore[arg-type]
        Row(5, "Interleaved 1F1B", **t5, schedule="interleaved_1F1B", tps=128, gib=72.7),  # type: ignore[arg-type]
        Row(6, "FSDP 8, CP 1", **t6, mesh=_m(pp=8, dp=8, tp=8), seq=32768, tps=76, gib=75.3),  # type: ignore[arg-type]
        Row(6, "FSDP 4, CP 2", **t6, mesh=_m(pp=8, dp=4, cp=2, tp=8), seq=65536, tps=47, gib=75.9),  # type: ignore[arg-type]
        Row(6, "FSDP 2, CP 4", **t6, mesh=_m(pp=8, dp=2, cp=4, tp=8), seq=131072, tps=31, gib=77.1),  # type: ignore[arg-type]
        Row(6, "FSDP 1, CP 8", **t6, mesh=_m(pp=8, dp=1, cp=8, tp=8), seq=262144, tps=16, gib=84.9),  # type: ignore[arg-type]
    )


#: Every row of the published tables 1 to 6.
ROWS: tuple[Row, ...] = _rows()
#: The rows the three factors are fitted on (see the module docstring).
FIT_ROWS = ("T1 FSDP", "T2 FSDP 8, CP 1", "T1 FSDP + compile + Float8")


def strategy_for(row: Row, layout: ModelLayout) -> Strategy:
    """The row's configuration as torchtitan runs it (see the module docstring)."""
    from rewrite.plans.experts import megatron_layout

    mesh = dict(row.mesh)
    tp = "tp" if "tp" in mesh else None
    pp = "pp" if "pp" in mesh else None
    cp = "cp" if "cp" in mesh else None
    return Strategy(
        mesh=mesh,
        tp=tp,
        pp=pp,
        cp=cp,
        fsdp=("dp",),
        layout=megatron_layout(layout) if tp else None,
        checkpoint=(row.checkpoint,),
        microbatches=mesh["pp"] if pp else 1,
        schedule=row.schedule if pp else "1F1B",
        virtual_stages=2 if row.schedule == "interleaved_1F1B" else 1,
        reshard_after_forward=not pp,
        float8=row.float8,
        compile=row.compile,
        async_tp=row.async_tp,
    )


_LAYOUTS: dict[str, ModelLayout] = {}


def row_layout(row: Row) -> ModelLayout:
    """The row's model on ``meta`` with its global batch and sequence (one import per model:
    the batch and the sequence only size the graphs when they are instantiated)."""
    from rewrite.plans import models

    base = _LAYOUTS.get(row.model)
    if base is None:
        module, inputs = models.build(f"llama3-{row.model}", batch=8, seq_len=8192)
        base = _LAYOUTS[row.model] = layout_of(module, inputs, name=f"llama3-{row.model}")
    return dataclasses.replace(base, batch=row.global_batch, seq=row.seq, _cache=base._cache)


def predict(row: Row, device: str | DeviceProfile = "h100-gt") -> StepCost:
    """The modeled cost of one row."""
    layout = row_layout(row)
    return step_cost(layout, strategy_for(row, layout), device)


def _with(
    p: DeviceProfile,
    matmul: float | None = None,
    attention: float | None = None,
    **training: float,
) -> DeviceProfile:
    eff, fam = dict(p.efficiency), dict(p.family_efficiency)
    if matmul is not None:
        eff["matmul"] = matmul
    if attention is not None:
        fam["attention"] = attention
    return dataclasses.replace(
        p, efficiency=eff, family_efficiency=fam, training={**p.training, **training}
    )


def _factors(p: DeviceProfile, x: Any) -> DeviceProfile:
    return _with(p, matmul=x[0], attention=x[1], float8_efficiency=x[2])


def fit(device: str | DeviceProfile = "h100-gt", rows: Sequence[Row] = ROWS) -> DeviceProfile:
    """Fit the four factors on their rows (see the module docstring).

    The three throughput factors are solved together by Newton's method on the log ratios of
    modeled to published tokens/s of their three rows (finite-difference Jacobian); the memory
    reserve is then the published over the modeled memory of its row.

    Returns:
        A copy of the profile with ``efficiency.matmul``, ``family_efficiency.attention``,
        ``training.float8_efficiency`` and ``training.memory_reserve`` set.
    """
    import numpy as np

    base = load_device(device)
    by = {r.key: r for r in rows}
    fit_rows = [by[k] for k in FIT_ROWS]

    def residual(logx: np.ndarray) -> np.ndarray:
        p = _factors(base, np.exp(logx))
        return np.array([math.log(predict(r, p).tokens_per_second / r.tps) for r in fit_rows])

    logx = np.log([base.efficiency["matmul"], base.family_efficiency.get("attention", 1.0),
                   base.training.get("float8_efficiency", base.efficiency["matmul"])])  # fmt: skip
    for _ in range(8):
        r = residual(logx)
        if np.max(np.abs(r)) < 1e-4:
            break
        jac = np.empty((3, 3))
        for k in range(3):
            step = np.zeros(3)
            step[k] = 1e-3
            jac[:, k] = (residual(logx + step) - r) / 1e-3
        logx = logx - np.clip(np.linalg.solve(jac, r), -0.7, 0.7)
    p = _factors(base, np.exp(logx))
    bf16 = fit_rows[0]
    mem = predict(bf16, _with(p, memory_reserve=1.0)).peak_memory / GIB
    return _with(p, memory_reserve=bf16.gib / mem)


def table(device: str | DeviceProfile = "h100-gt") -> list[dict[str, Any]]:
    """Every row predicted against published: tokens/s per GPU and memory, with errors."""
    out = []
    for row in ROWS:
        c = predict(row, device)
        out.append(
            {
                "row": row.key,
                "fitted": row.key in FIT_ROWS,
                "modelled": row.modelled,
                "tps": row.tps,
                "tps_model": c.tokens_per_second,
                "tps_error": c.tokens_per_second / row.tps - 1,
                "gib": row.gib,
                "gib_model": c.peak_memory / GIB,
                "gib_error": c.peak_memory / GIB / row.gib - 1,
            }
        )
    return out
