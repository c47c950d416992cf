"""The cost model against torchtitan's published Llama 3.1 table (docs/plans.md)."""

from __future__ import annotations

import pytest

from rewrite.devices import load_device
from rewrite.plans import anchors

BY = {r.key: r for r in anchors.ROWS}


def _err(row_key: str) -> tuple[float, float]:
    row = BY[row_key]
    c = anchors.predict(row)
    return c.tokens_per_second / row.tps - 1, c.peak_memory / 2**30 / row.gib - 1


def test_the_stored_factors_reproduce_their_rows_and_predict_128_gpus() -> None:
    tps, mem = _err("T1 FSDP")
    assert abs(tps) < 0.01 and abs(mem) < 0.01  # fitted
    for key in ("T3 FSDP", "T3 FSDP + compile"):  # not fitted: 8B on 128 GPUs
        tps, mem = _err(key)
        assert abs(tps) <= 0.25 and abs(mem) <= 0.15, (key, tps, mem)


@pytest.mark.slow
def test_every_modelled_row_is_within_the_bar_and_ranked() -> None:
    rows = anchors.table()
    for r in rows:
        if r["modelled"]:
            assert abs(r["tps_error"]) <= 0.25 and abs(r["gib_error"]) <= 0.15, r
    for t in {r["row"].split()[0] for r in rows}:
        pub = [r["tps"] for r in rows if r["row"].startswith(t + " ")]
        mod = [r["tps_model"] for r in rows if r["row"].startswith(t + " ")]
        assert sorted(range(len(pub)), key=pub.__getitem__) == sorted(
            range(len(mod)), key=mod.__getitem__
        ), t


@pytest.mark.slow
def test_the_fit_reproduces_the_stored_factors() -> None:
    p = load_device("h100-gt")
    fitted = anchors.fit(p)
    assert fitted.efficiency["matmul"] == pytest.approx(p.efficiency["matmul"], rel=0.01)
    assert fitted.family_efficiency["attention"] == pytest.approx(
        p.family_efficiency["attention"], rel=0.01
    )
    for k in ("float8_efficiency", "memory_reserve"):
        assert fitted.training[k] == pytest.approx(p.training[k], rel=0.01)
