"""Tests for the experiment-only surrogate options (`benchmarks._surrogate_variants`)."""

from __future__ import annotations

import dataclasses

import pytest

from benchmarks._surrogate_variants import VariantSurrogate, split_variant_options
from structure import GPNetwork, StructuredSurrogate, explain
from structure.errors import StructureError
from tests.structure.synthetic import runs_data, sum_sine_data
from tests.structure.test_surrogate import FAST
from tuner import FlatSurrogate

FEW = dataclasses.replace(FAST, min_trials=8)


def test_per_run_rows_find_the_metric_an_objective_reads_from_few_trials() -> None:
    # 8 trials of 8 runs; a run's metric is noisy around mean(x) and drives its objective: the
    # trials' means hide the link, the runs show it.
    found = {"trials": 0, "runs": 0}
    for seed in range(4):
        data = runs_data(8, seed, noise=0.3)
        for rows in found:
            s = VariantSurrogate(config=FEW, flat=FlatSurrogate({"maxiter": 30}), rows=rows)
            info = s.fit(data).description
            assert info["rows"]["kind"] == rows
            found[rows] += any(e[:2] == ["m", "o"] and e[3] == "learned" for e in info["edges"])
            # the per-run values are never featurized as metrics of the trials
            assert not any("@" in f["name"] for f in info["features"]["features"])
    assert info["rows"] == {"kind": "runs", "n": 64, "trials": 8}
    assert found["runs"] >= 3 and found["trials"] < found["runs"]
    with pytest.raises(StructureError, match="rows must be one of"):
        VariantSurrogate(config=FAST, rows="seeds")


def test_the_runs_rows_are_the_librarys() -> None:
    data = runs_data(8, 1, noise=0.3)
    library = StructuredSurrogate(config=FEW, flat=FlatSurrogate({"maxiter": 30})).fit(data)
    variant = VariantSurrogate(config=FEW, flat=FlatSurrogate({"maxiter": 30})).fit(data)
    assert variant.description == library.description


def test_the_flat_gp_proposes_where_the_network_is_used_if_asked() -> None:
    s = VariantSurrogate(config=FAST, flat=FlatSurrogate({"maxiter": 30}), flat_proposes=True)
    data = sum_sine_data(20, seed=0)
    fitted = s.fit(data)
    assert isinstance(fitted.model, GPNetwork)
    proposer = fitted.proposer
    assert proposer is not None and not isinstance(proposer, GPNetwork)
    assert fitted.veto is not None and fitted.veto[0] is proposer  # one flat fit for both
    assert fitted.description["proposer"] == "flat" and fitted.description["model"] == "network"
    assert "found by the flat GP's acquisition" in explain(fitted.description)
    assert proposer.num_outputs == data.Y.shape[-1]
    assert s.fit(sum_sine_data(5, seed=0)).proposer is None  # flat before min_trials
    unvetoed = VariantSurrogate(
        config=dataclasses.replace(FAST, veto=None),
        flat=FlatSurrogate({"maxiter": 30}),
        flat_proposes=True,
    )
    alone = unvetoed.fit(data)
    assert alone.veto is None and alone.proposer is not None
    assert StructuredSurrogate(config=FAST).fit(data).proposer is None


def test_overrides_split_into_config_fields_and_variant_options() -> None:
    config, variant = split_variant_options({"tolerance": 2.0, "flat_proposes": True})
    assert config == {"tolerance": 2.0} and variant == {"flat_proposes": True}
    with pytest.raises(StructureError):
        split_variant_options({"tolerance": -1.0})
