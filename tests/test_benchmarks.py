"""`benchmarks/results/`: one current file per benchmark script (its modes as named runs), small
enough to keep in git; history lives in git, inputs in `benchmarks/data/`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks._common import read_results, write_results

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def test_a_named_run_replaces_only_itself(tmp_path: Path) -> None:
    path = tmp_path / "bench_x.json"
    machine = {"commit": "abc", "date": "2026-11-26"}
    write_results(path, {"rows": [1]}, machine=machine, run="cpu")
    write_results(path, {"rows": [2]}, machine=machine, run="cuda")
    write_results(path, {"rows": [3]}, machine=machine, run="cpu")  # a rerun of one mode
    doc = json.loads(path.read_text())
    assert list(doc) == ["runs"] and list(doc["runs"]) == ["cpu", "cuda"]
    assert read_results(path, "cpu")["rows"] == [3] and read_results(path, "cuda")["rows"] == [2]
    assert read_results(path, "cuda")["machine"]["commit"] == "abc"
    write_results(path, {"rows": [4]}, machine=machine)  # without a run: the whole file
    assert list(read_results(path)) == ["machine", "rows"] and read_results(path)["rows"] == [4]


def test_every_results_file_is_one_benchmarks_current_record() -> None:
    scripts = {p.stem for p in BENCHMARKS.glob("*.py") if not p.stem.startswith("_")}
    files = sorted((BENCHMARKS / "results").iterdir())
    stray = [f.name for f in files if f.is_file() and f.name.split(".")[0] not in _owners(scripts)]
    assert not stray, f"results files that no benchmark script writes: {stray}"
    for f in files:
        if f.suffix == ".json":
            doc = json.loads(f.read_text())
            records = doc["runs"].values() if set(doc) == {"runs"} else [doc]
            for record in records:  # the machine, commit and date inside each record
                machine = record["machine"]
                # files written before results recorded their commit say which commit holds them
                commit = machine.get("commit") or record["record"]["recorded_in_commit"]
                assert commit and (machine.get("date") or machine.get("time_utc")), f.name
    assert sum(f.stat().st_size for f in files) < 1 << 20


def _owners(scripts: set[str]) -> set[str]:
    """File stems a script may write: its own and its plot (``<script>_nodes``)."""
    return scripts | {f"{s}_nodes" for s in scripts}


def test_bench_tuner_compares_the_tuner_with_each_peer_seed_by_seed() -> None:
    from benchmarks.bench_tuner import paired

    def rec(method: str, seed: int, hv20: float) -> dict[str, object]:
        return {"kind": "quality", "problem": "p", "method": method, "seed": seed,
                "hv": {"20": hv20}}  # fmt: skip

    records = [rec("tuner", s, 1.0 + s) for s in range(6)]
    records += [rec("ax", s, 0.5 + s) for s in range(6)]  # the tuner ahead by 0.5 on every seed
    records += [rec("sobol", s, 9.0) for s in range(3)]  # only seeds 0-2: paired on those
    out = paired(records)
    ax, sobol = out["p"]["ax"]["20"], out["p"]["sobol"]["20"]
    assert (ax["n"], ax["ahead"], ax["median_diff"]) == (6, 6, 0.5) and ax["p"] < 0.05
    assert (sobol["n"], sobol["ahead"]) == (3, 0) and sobol["median_diff"] == -7.0
    assert "tuner" not in out["p"]


def test_bench_structure_network_options_override_its_defaults() -> None:
    from benchmarks._structure_problems import PROBLEMS
    from benchmarks.bench_structure import make_surrogate

    problem = PROBLEMS["search8"]
    default = make_surrogate("learned", problem, quick=True).config.network
    assert (default.num_paths, default.num_features) == (64, 256)
    wide = make_surrogate("runs", problem, True, network_overrides={"num_paths": 128}).config
    assert (wide.network.num_paths, wide.network.num_features, wide.rows) == (128, 256, "runs")


def test_search_problems_with_more_rules_keep_search8_and_add_rules_without_gain() -> None:
    from benchmarks._structure_problems import PROBLEMS, RULES, rule_table

    eight, forty = rule_table(), rule_table(40)
    assert eight.names == RULES and forty.names[:8] == RULES and len(forty.names) == 40
    assert np.array_equal(forty.value[:8], eight.value) and not forty.value[8:].any()
    assert np.array_equal(forty.cost[:8], eight.cost)
    problem = PROBLEMS["search40"]
    assert problem.space.dim == 44 and problem.name == "search40"
    config = problem.space.default()
    values, metrics = problem.evaluate(config, None)
    assert set(values) == {"gain", "search_seconds"} and "rule.r39.applied" in metrics
    # search8's noise-free values are those of the rule table it always had
    values8, _ = PROBLEMS["search8"].evaluate(PROBLEMS["search8"].space.default(), None)
    assert values8["gain"] > values["gain"] > 0  # 32 more rules dilute the useful ones
    with pytest.raises(ValueError, match="at least 8 rules"):
        rule_table(4)


def test_bench_structure_config_overrides_take_none_for_an_optional_number() -> None:
    from benchmarks.bench_structure import _config_overrides
    from structure.errors import StructureError

    assert _config_overrides(["veto=none", "tolerance=0"]) == {"veto": None, "tolerance": 0.0}
    assert _config_overrides(["veto=10"]) == {"veto": 10.0}
    with pytest.raises(StructureError, match="veto"):
        _config_overrides(["veto=-1"])
