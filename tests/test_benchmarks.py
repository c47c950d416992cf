"""`benchmarks/results/`: one current file per benchmark script (its modes as named runs), small
enough to keep in git; history lives in git, inputs in `benchmarks/data/`."""

from __future__ import annotations

import dataclasses
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
    # the folder is read in a browser and cloned by everyone: a results file keeps summaries
    # (raw rows are committed beside it, in benchmarks/rows)
    assert sum(f.stat().st_size for f in files) < 900_000


def _owners(scripts: set[str]) -> set[str]:
    """File stems a script may write: its own and its plot (``<script>_nodes``); a suite part
    (``_suite_*.py``, run by ``bench_suites.py`` or alone) writes its run of ``bench_suites``."""
    suites = {"bench_suites"} if any(BENCHMARKS.glob("_suite_*.py")) else set()
    return scripts | {f"{s}_nodes" for s in scripts} | suites


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
    wide = make_surrogate("runs", problem, True, network_overrides={"num_paths": 128})
    network = wide.config.network
    assert (network.num_paths, network.num_features, wide.rows) == (128, 256, "runs")
    assert make_surrogate("learned", problem, True).rows == "trials"  # benchmarks-only variant


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


def test_bench_transfer_arms_split_knobs_from_priors_in_either_space() -> None:
    from types import SimpleNamespace

    from benchmarks.bench_transfer import _arms
    from spaces import Float, Simplex, Space

    rules = Space({"tau": Float(0.1, 1.0, default=0.3), "priors": Simplex(["a", "b"])})
    chosen = {"tau": 0.9, "priors": {"a": 0.8, "b": 0.2}}
    arms = _arms(SimpleNamespace(space=rules), chosen)
    assert list(arms) == [
        "defaults", "tuned knobs, default priors", "tuned priors, default knobs", "tuned"
    ]  # fmt: skip
    assert arms["tuned knobs, default priors"] == {"tau": 0.9, "priors": {"a": 0.5, "b": 0.5}}
    assert arms["tuned priors, default knobs"] == {"tau": 0.3, "priors": chosen["priors"]}
    family = Space(
        {
            "tau": Float(0.1, 1.0, default=0.3),
            "prior_weight": Float(0.0, 1.0, default=0.0),
            "family_fusion": Float(0.0, 1.0, default=0.5),
        }
    )
    chosen = {"tau": 0.9, "prior_weight": 0.7, "family_fusion": 0.1}
    arms = _arms(SimpleNamespace(space=family), chosen)
    assert arms["informed prior alone"] == {"tau": 0.3, "prior_weight": 1.0, "family_fusion": 0.5}
    assert arms["tuned knobs, default priors"] == {
        "tau": 0.9, "prior_weight": 0.0, "family_fusion": 0.5
    }  # fmt: skip
    assert arms["tuned priors, default knobs"] == {**chosen, "tau": 0.3}


def test_bench_transfer_keeps_each_arm_as_the_lists_its_layout_names() -> None:
    from benchmarks.bench_transfer import BRIEF_LAYOUT, _brief, _tuned_summary

    def iv(v: float) -> dict[str, float]:
        return {"value": v, "low": v - 0.1, "high": v + 0.1}

    row = {
        "reach": {"candidate": iv(20.0), "reference": iv(80.0), "ratio": 0.25, "censored": 1},
        **{k: {"difference": iv(0.5)} for k in ("anytime_hv", "final_hv", "latency_reduction")},
    }
    arm = _brief({"seeds": [3000], "per_workload": {"llama": row, "vit": row}})
    assert arm["llama"]["reach"] == [20.0, 19.9, 20.1, 0.25, 1]
    assert arm["vit"]["final_hv"] == [0.5, 0.4, 0.6]
    documented = {k.strip() for key in BRIEF_LAYOUT for k in key.split(",")}
    assert set(arm["llama"]) == documented
    runs = [
        {
            "tuner_seed": s,
            "space": p,
            "arms": {"tuned": {w: {"reach": [0, 0, 0, r, 0]} for w in ("llama", "vit")}},
        }
        for s in range(3)
        for p, r in (("family", 0.2 + 0.01 * s), ("rules", 0.6 + 0.02 * s))
    ]
    summary = _tuned_summary(runs)
    assert abs(summary["ratio"]["family"]["llama"]["value"] - 0.21) < 1e-9
    paired = summary["minus_family"]["rules"]["vit"]
    assert abs(paired["value"] - 0.41) < 1e-9 and paired["p"] == 0.25  # 3 of 3 seeds worse


def test_suite_strategies_reads_a_trace_and_tabulates() -> None:
    from benchmarks._suite_strategies import STRATEGIES, _summary, table, time_to

    trace = [(0.0, 10.0), (1.5, 8.0), (4.0, 5.0)]
    assert time_to(trace, 8.0) == 1.5 and time_to(trace, 4.0) is None
    runs = [{"reduction": 0.5, "trace": trace}, {"reduction": 0.2, "trace": trace[:2]}]
    s = _summary(runs, 5.0)
    assert s["reduction"] == 0.35 and s["reached"] == "1/2" and s["time_to_saturation_cost"] is None
    strategies = {k: {"reduction": 0.1, "time_to_saturation_cost": 2.0} for k in STRATEGIES}
    row = {"graph": "nasrnn", "strategies": strategies, "saturation": {"wall": 3.0},
           "inductor": {k: {"ratio": 0.9} for k in STRATEGIES}}  # fmt: skip
    text = table([row])
    assert "| nasrnn | 10.0% |" in text and "2.0 vs 3.0" in text and "0.90 / 0.90" in text
    assert "| 11.1% (45.4 / 68.9) |" in text  # 10% less cost is 11.1% faster; Tensat's paper


def test_the_families_split_keeps_design_and_test_apart() -> None:
    from benchmarks._families import SPLIT, describe, member

    for family, split in SPLIT.items():
        assert not set(split["design"]) & set(split["test"]), family
    generated = [m for f in ("search", "network") for m in SPLIT[f]["test"] if "/" in m]
    assert len(generated) >= 20 and all(int(m.split("/")[1]) >= 100 for m in generated)
    assert {"search8", "search40"} <= set(SPLIT["search"]["design"])
    assert [m.split("/")[1] for m in SPLIT["main"]["test"]] == [str(s) for s in range(5, 15)]
    widths = [describe(m)["columns"] for m in SPLIT["search"]["test"]]
    assert min(widths) >= 6 and max(widths) <= 60
    for name in ("search/100", "network/103"):
        problem = member(name)
        config = problem.space.default()
        values, metrics = problem.evaluate(config, np.random.default_rng(0))
        assert set(values) == set(problem.objectives) and metrics
        assert problem.evaluate(config, None) == problem.evaluate(config, None)  # noise-free


def test_search8_is_a_member_of_the_search_family_unchanged() -> None:
    from benchmarks._families import member
    from benchmarks._structure_problems import PROBLEMS

    old, new = PROBLEMS["search8"], member("search8")
    config = old.space.default()
    a = old.evaluate(config, np.random.default_rng(3))
    b = new.evaluate(config, np.random.default_rng(3))
    assert a == b and old.true_edges == new.true_edges and old.ref == new.ref


def test_warm_pairs_relate_their_source_to_the_target_as_named() -> None:
    from scipy.stats import spearmanr

    from benchmarks._families import warm_pair

    def ranks(relation: str) -> float:
        pair = warm_pair(f"warm/0/{relation}")
        configs = pair.target.space.from_unit(pair.target.space.sample_unit(40, 5))
        t = [pair.target.evaluate(c, None)[0]["o1"] for c in configs]
        s = [pair.source.evaluate(c, None)[0]["o1"] for c in configs]
        return float(spearmanr(t, s).statistic)

    assert ranks("identical") == pytest.approx(1.0) and ranks("shifted") == pytest.approx(1.0)
    assert ranks("misleading") == pytest.approx(-1.0)  # the source's best is the target's worst
    assert abs(ranks("unrelated")) < 0.5 < ranks("moved")


def test_bench_families_arms_are_the_study_defaults_with_overrides() -> None:
    from benchmarks._families import member
    from benchmarks.bench_families import _seeds, _warm_jobs, seed_ranges, structure_surrogate
    from structure import StructuredConfig

    problem = member("search8")
    assert structure_surrogate("auto", problem).config == StructuredConfig()
    assert structure_surrogate("auto+veto=none+tolerance=1", problem).config.veto is None
    with pytest.raises(SystemExit, match="no field 'vetoo'"):
        structure_surrogate("auto+vetoo=1", problem)
    nested = structure_surrogate("auto+learn.select.keep_base=true+veto=2", problem).config
    assert nested.learn.select.keep_base is True and nested.veto == 2
    assert nested.learn.alpha == StructuredConfig().learn.alpha  # the rest untouched
    with pytest.raises(SystemExit, match="holds no options"):
        structure_surrogate("auto+veto.x=1", problem)
    stated = structure_surrogate("stated+calibrate=true", problem)  # told the true DAG
    assert stated._edges == problem.true_edges and stated.config.calibrate is True
    assert structure_surrogate("auto", problem)._edges is None
    with pytest.raises(SystemExit, match="known DAG"):
        structure_surrogate("stated", dataclasses.replace(problem, true_edges=()))
    assert _seeds("0-2,5") == [0, 1, 2, 5]
    assert seed_ranges([5, 0, 2, 1]) == "0-2,5" and _seeds(seed_ranges([3, 7, 8])) == [3, 7, 8]
    jobs = _warm_jobs(["warm/0/moved", "warm/0/misleading"], ["cold", "warm"])
    assert jobs == [("warm/0/identical", "cold"), ("warm/0/moved", "warm"),
                    ("warm/0/misleading", "warm")]  # fmt: skip


def test_bench_families_main_summary_pairs_the_main_job_with_ax_by_seed() -> None:
    from benchmarks._families_report import main_summary

    def run(seed: int, project: float, ax: float) -> dict:
        best = lambda v: {"10": v - 0.02, "20": v, "30": v}  # noqa: E731
        return {"seed": seed, "arms": {"project": {"best_at": best(project)},
                                       "ax": {"best_at": best(ax)}}}  # fmt: skip

    runs = [run(5, 1.02, 1.01), run(6, 1.00, 1.03), run(7, 1.01, 1.01)]
    s = main_summary(runs)
    assert s["seeds"] == [5, 6, 7] and s["30"]["median"] == {"project": 1.01, "ax": 1.01}
    assert s["30"]["reaches_best"] == {"project": 2, "ax": 2}  # a tie reaches it for both
    assert s["10"]["diff"][0] == pytest.approx(0.0) and s["10"]["diff"][1] < 0 < s["10"]["diff"][2]
    assert main_summary([{"seed": 5, "arms": {"ax": {}}}])["seeds"] == []  # ax alone: no pair


def test_bench_families_report_carries_what_no_row_here_measured() -> None:
    from benchmarks._families_report import DROPPED, carry

    cell = {"40": {"seeds": "0-1", "diff": [0.1, 0.0, 0.2]}, "cpu_ratio": 1.5}
    pool = {"40": {"members": 2, "median_rel": 0.01}}
    old = {
        "machine": {"commit": "abc1234ffff+dirty"},  # stamped by its short form
        "structure": {"test": {"search": {"search/100": {"auto": cell, DROPPED[0]: cell},
                                          "search/101": {"auto": cell}}}},
        "families": {"test": {"search": {"auto": pool}, "network": {"auto": pool}}},
        "warm": {"test": {"warm/100/moved": {"warm": cell}}},
        "main": {"seeds": [5, 6], "10": {}},
    }  # fmt: skip
    fresh = {"40": {"seeds": "0", "diff": [0.3, 0.3, 0.3]}, "cpu_ratio": 1.2}
    new = {
        "structure": {"test": {"search": {"search/100": {"auto": fresh}},
                               "network": {"network/100": {"auto": fresh}}}},
        "families": {"test": {"search": {"auto": {"40": {"members": 1}}},
                              "network": {"auto": {"40": {"members": 1}}}}},
        "warm": {}, "main": {"seeds": []},
    }  # fmt: skip
    out = carry(new, old)
    search = out["structure"]["test"]["search"]
    assert search["search/100"]["auto"] == fresh  # rows here win
    assert search["search/101"]["auto"] == {"carried": "abc1234", **cell}
    assert search["search/100"].keys() == {"auto"}  # a dropped arm's carried figures leave
    # a family that lost a member keeps its old pool; one that lost none has the new one
    assert out["families"]["test"]["search"]["auto"] == {"carried": "abc1234", **pool}
    assert out["families"]["test"]["network"]["auto"] == {"40": {"members": 1}}
    assert out["warm"]["test"]["warm/100/moved"]["warm"]["carried"] == "abc1234"
    assert out["main"]["seeds"] == [5, 6] and out["main"]["carried"] == "abc1234"
    again = carry(new, {**out, "machine": {"commit": "def5678abc"}})  # the first stamp stays
    assert again["structure"]["test"]["search"]["search/101"]["auto"]["carried"] == "abc1234"
    assert new["structure"]["test"]["search"].keys() == {"search/100"}  # new is not changed


def test_bench_families_puts_a_member_beyond_noise_only_on_enough_seeds() -> None:
    from benchmarks._families_report import MIN_SEEDS, beyond_noise

    def cell(seeds: str, diff: list[float]) -> dict:
        return {"auto": {"20": {"seeds": seeds, "diff": diff}}}

    members = {
        "a": cell("0", [-0.3, -0.3, -0.3]),  # one seed: its interval is a point
        "b": cell(f"0-{MIN_SEEDS - 1}", [-0.3, -0.5, -0.1]),
        "c": cell(f"0-{MIN_SEEDS}", [0.2, 0.1, 0.4]),
        "d": cell(f"0-{MIN_SEEDS}", [0.0, -0.1, 0.4]),
    }
    assert beyond_noise(members, "auto", 20) == {
        "behind_beyond_noise": ["b"], "ahead_beyond_noise": ["c"], "few_seeds": ["a"]
    }  # fmt: skip


def _fake_stenso(root: Path) -> Path:
    """A checkout laid out like STENSO-Artifact, with two programs of our own."""
    bench = root / "stenso" / "eval" / "benchmarks"
    bench.mkdir(parents=True)
    (bench / "github_1.py").write_text(
        "import jax.numpy as jnp\n\narg_ranks = [2, 2]\n\n\ndef kernel(A, B):\n"
        "    return jnp.trace(A @ B)\n"
    )
    (bench / "synth_1.py").write_text(
        "import jax.numpy as jnp\n\narg_ranks = [1]\n\n\ndef kernel(x):\n    return x + x\n"
    )
    res = root / "stenso" / "eval" / "performance_results"
    res.mkdir(parents=True)
    (res / "AMD_Ryzen_9_7950X.csv").write_text(
        "Benchmark,Compiler,OriginalTime,OptimizedTime\ngithub_1,PyTorch,4e-5,1e-5\n"
        "github_1,JAX,1e-5,1e-5\nsynth_1,PyTorch,1e-5,1e-5\n"
    )
    return root


def test_stenso_suite_is_read_from_a_checkout_with_its_sizes_and_figures(tmp_path: Path) -> None:
    from benchmarks import _stenso

    with pytest.raises(FileNotFoundError, match="does not ship STENSO's programs"):
        _stenso.artifact_path(tmp_path)
    root = _stenso.artifact_path(_fake_stenso(tmp_path))
    suite = _stenso.load_suite(root, ["github_1", "synth_1"])
    assert [(p.name, p.size) for p in suite] == [("github_1", 200), ("synth_1", 1000)]
    (a, _), (x,) = suite[0].inputs(), suite[1].inputs()
    assert a.shape == (200, 200) and x.shape == (1000,) and float(x.min()) > 0
    pub = _stenso.published(root)
    assert pub == {"ryzen": {"github_1": 4.0, "synth_1": 1.0}}
    s = _stenso.summary(pub["ryzen"])
    assert (
        s["geomean"] == pytest.approx(2.0)
        and s["above_1.1"] == 1
        and s["max_program"] == "github_1"
    )


def test_bench_suites_summary_flags_only_what_is_slower_than_its_noise_floor() -> None:
    from benchmarks.bench_suites import _slower, geomean_interval

    iv = lambda v, lo, hi: {"value": v, "low": lo, "high": hi}  # noqa: E731
    assert _slower({"speedup": iv(0.9, 0.85, 0.93), "aa": iv(1.0, 0.97, 1.03)})
    assert not _slower({"speedup": iv(0.95, 0.94, 0.96), "aa": iv(0.95, 0.93, 0.98)})
    g = geomean_interval([[2.0, 2.1, 1.9], [1.0, 1.05, 0.95]], seed=0)
    assert g["low"] <= g["value"] <= g["high"] and g["value"] == pytest.approx(2**0.5, rel=1e-6)


def test_bench_suites_times_every_arm_with_the_fixed_cost_as_the_bound() -> None:
    import torch

    from benchmarks.bench_suites import ARMS, fixed_cost_arm, time_pair

    x = torch.ones(3)
    arms = {k: (lambda a: a + 1) for k in ARMS[:-1]}
    arms["fixed"] = fixed_cost_arm()
    assert arms["fixed"](x).shape == (10,)  # its own 10 elements, whatever the program's inputs
    out = time_pair(arms, [x], samples=3)
    assert set(out["us"]) == set(ARMS) and len(out["rounds"]) == 3
    assert set(out["eager_speedups"]) == {"eager", "rewrite_eager"}
    assert out["bound"]["low"] <= out["bound"]["value"] <= out["bound"]["high"]


def test_bench_suites_keeps_a_partial_run_apart_from_the_whole_suite() -> None:
    from benchmarks import _stenso
    from benchmarks.bench_suites import run_key

    assert run_key(None, _stenso.PROGRAMS) == "stenso"
    assert run_key(None, ["github_8", "synth_6"]) == "stenso_partial"
    assert run_key("mine", ["github_8"]) == "mine"


def test_bench_suites_runs_the_strategies_part_with_its_options() -> None:
    from benchmarks import _suite_strategies, bench_suites

    args = bench_suites.parser().parse_args(["--part", "strategies", "--seeds", "1", "--quick"])
    assert args.seeds == 1 and args.quick and args.budget == 60.0 and args.threads == 1
    assert bench_suites._strategies() is _suite_strategies


def test_a_merged_files_sources_keep_only_what_differs_from_the_machine_before() -> None:
    from benchmarks._common import machine_diffs, machines_expanded

    first = {"cpus": 2, "load": [1.0], "versions": {"torch": "2.13.0", "ax": "1.3.1"}}
    later = {"cpus": 2, "load": [3.0], "versions": {"torch": "2.13.0", "ax": None}}
    last = {"cpus": 2, "load": [3.0], "versions": {"torch": "2.13.0"}, "gpu": "h200"}
    sources = [
        {"file": "a", "machine": first}, {"file": "b", "machine": later}, {"file": "c"},
        {"file": "d", "machine": last},
    ]  # fmt: skip
    out = machine_diffs(sources)
    assert out[0]["machine"] == first and out[2] == {"file": "c"}
    assert out[1]["machine"] == {"load": [3.0], "versions": {"ax": None}}  # nested, null kept
    assert out[3]["machine"] == {"versions": {"_removed": ["ax"]}, "gpu": "h200"}
    assert sources[1]["machine"] is later  # the input is kept
    assert machines_expanded(out) == sources  # lossless: a merged file merges again


def test_bench_peers_stops_when_an_arm_it_names_is_not_installed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from benchmarks import bench_peers

    ran: list[list[str]] = []

    def run_seed(seed: int, arms: list[str], args: object) -> None:
        ran.append(arms)
        raise KeyboardInterrupt  # stop before a run

    monkeypatch.setattr(bench_peers, "installed", lambda arm: arm != "ax")
    monkeypatch.setattr(bench_peers, "run_seed", run_seed)
    # a named arm missing stops the run (its rows would read as complete without it)...
    monkeypatch.setattr("sys.argv", ["bench_peers", "--arms", "project,ax", "--seeds", "1"])
    with pytest.raises(SystemExit):
        bench_peers.main()
    err = capsys.readouterr().err
    assert "arms ['ax'] are not installed" in err and "make peers" in err
    assert ran == []
    # ...while the default (every arm) leaves it out and says so
    monkeypatch.setattr("sys.argv", ["bench_peers", "--seeds", "1"])
    with pytest.raises(KeyboardInterrupt):
        bench_peers.main()
    assert "ax: not installed, left out" in capsys.readouterr().out
    assert ran == [["project", "project_flat", "smac", "optuna", "random"]]
