"""The built-in rewrite study: calibration, seeds and racing, resume, and the honest export.

Real searches on the small GPT-2 of the zoo at small step budgets (no stand-ins).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from rewrite.errors import SearchConfigError
from rewrite.optimize import PriorsFile, SearchConfig
from rewrite_tuner.calibration import (
    COMPILED,
    MEASURED,
    OBJECTIVES,
    Calibration,
    calibrate,
    timing_threads,
)
from rewrite_tuner.dashboard import RULE_PRIORS
from rewrite_tuner.problem import (
    DEFAULT_OBJECTIVES,
    RewriteProblem,
    rewrite_problem,
    workload_graphs,
)
from rewrite_tuner.spec import suite_context
from rewrite_tuner.study import (
    RULE_COUNTERS_KNOWN,
    evaluate_rewrite,
    rewrite_study,
    rule_knowledge,
    suite_of,
    unmodeled_metrics,
)
from rewrite_tuner.transfer import export_tuned, validate
from spaces import Simplex
from studies import StudyError
from studies.errors import StudyConflictError
from studies.plots import plot_study
from studies.settings import StudySettings
from studies.tuning import make_surrogate
from tuner.trial import split_run_metric

GPT2 = ("gpt2",)
SMALL = {"max_steps": 40, "seeds": 2, "calibration_seeds": 2}


@pytest.fixture(scope="module")
def calibration() -> Calibration:
    return calibrate(workload_graphs(GPT2), 40, [0, 1])


def test_calibration_measures_the_defaults(calibration: Calibration) -> None:
    base = calibration.baselines["gpt2"]
    assert base.hv_input < base.hv_final and base.effort > 0
    assert set(calibration.default) == set(OBJECTIVES) - {
        MEASURED,
        COMPILED,
    } and calibration.seeds == (0, 1)
    assert all(len(v) == 2 for v in calibration.default.values())
    assert all(sd >= 0 for sd in calibration.noise.values())
    assert sum(calibration.evidence.fired.values()) > 0 < sum(calibration.evidence.used.values())
    assert "shard_linear_columns_2" not in calibration.evidence.fired  # one device: no sharding
    assert Calibration.from_dict(calibration.to_dict()) == calibration
    with pytest.raises(StudyError, match="at least 2 seeds"):
        calibrate(workload_graphs(GPT2), 40, [0])


def test_family_space_is_small_and_its_default_is_the_search_default(
    calibration: Calibration,
) -> None:
    space, context = rewrite_problem(GPT2, **SMALL, calibration=calibration)
    assert space.dim <= 14  # knobs + weight + specificity + one multiplier per family
    # the suite is the study's context, not a parameter every configuration carries
    assert "suite" not in space.params and context["format_version"] == 2
    assert context["spec"]["workloads"] == ["gpt2"] and context["spec"]["budget"] == 40
    assert context["calibration"] == calibration.to_dict()
    suite = suite_context(context)  # what a trial reads
    assert suite is not None and suite["seeds"] == [0, 1] and suite["workloads"] == ["gpt2"]
    assert space["max_steps"].value == 40 and space["devices"].value == 1
    from rewrite_tuner.knobs import config_from_params

    cfg, priors = config_from_params(space.default())
    assert cfg == SearchConfig(max_steps=40)
    assert priors is not None and max(priors.values()) == pytest.approx(min(priors.values()))
    rules, _ = rewrite_problem(
        GPT2,
        **SMALL,
        calibration=calibration,
        priors="rules",
        rules=["fuse_elementwise", "cse_unary"],
    )
    assert isinstance(rules["priors"], Simplex)
    with pytest.raises(StudyError, match="calibration_seeds"):
        rewrite_problem(GPT2, max_steps=40, seeds=3, calibration_seeds=2, calibration=calibration)


def test_a_trial_reports_means_errors_and_its_fidelity(calibration: Calibration) -> None:
    space, context = rewrite_problem(GPT2, **SMALL, calibration=calibration)
    out = evaluate_rewrite(space.default(), context)
    for name in set(OBJECTIVES) - {MEASURED, COMPILED}:
        assert f"{name}.sem" in out and out[f"{name}.sem"] >= 0
    assert MEASURED not in out and COMPILED not in out  # nothing was timed
    assert out["fidelity.seeds"] == 2 and out["steps"] == 40  # metrics are per seed
    # the defaults on the calibration seeds score what the calibration measured
    assert out["anytime_hv"] == pytest.approx(sum(calibration.default["anytime_hv"]) / 2)
    assert 0.0 < out["latency_reduction"] < 1.0  # the catalogue finds real improvements
    assert any(k.startswith("rule.") and k.endswith(".fired") for k in out)
    # against defaults that scored far better on the first seed, a trial stops after it
    strong = dataclasses.replace(
        calibration,
        default={
            k: [v[0] + (2.0 if OBJECTIVES[k] == "maximize" else -2.0), v[1]]
            for k, v in calibration.default.items()
        },
        noise=dict.fromkeys(calibration.noise, 0.1),
    )
    raced = evaluate_rewrite(*_default(rewrite_problem(GPT2, **SMALL, calibration=strong)))
    assert raced["fidelity.seeds"] == 1 and raced["steps"] == 40
    assert raced["anytime_hv"] == pytest.approx(calibration.default["anytime_hv"][0])
    assert raced["anytime_hv.sem"] == pytest.approx(0.1)  # one seed: the calibration's noise
    unraced = rewrite_problem(GPT2, **SMALL, calibration=strong, race=False)
    assert evaluate_rewrite(*_default(unraced))["fidelity.seeds"] == 2


def test_a_trial_reports_every_runs_objectives_and_counters(calibration: Calibration) -> None:
    plain = rewrite_problem(GPT2, **SMALL, calibration=calibration)
    assert not any(split_run_metric(k) for k in evaluate_rewrite(*_default(plain)))  # opt-in
    assert "run_metrics" not in suite_context(plain.context)  # as in version-1 contexts
    space, context = rewrite_problem(GPT2, **SMALL, calibration=calibration, run_metrics=True)
    out = evaluate_rewrite(space.default(), context)
    runs = {split_run_metric(k) for k in out} - {None}
    assert {run for _, run in runs} == {"gpt2/0", "gpt2/1"}  # workload/seed
    for name in ("anytime_hv", "final_hv", "reach"):  # a trial's value: the mean of its runs'
        assert out[name] == pytest.approx((out[f"{name}@gpt2/0"] + out[f"{name}@gpt2/1"]) / 2)
    assert out["rule.fuse_elementwise.fired@gpt2/0"] >= 0 and "steps@gpt2/1" in out
    # machine-dependent numbers stay aggregates only; so do the errors
    assert not any(m.startswith(("time.", "cache.", "search_time")) or ".sem" in m for m, _ in runs)
    from rewrite.rules import catalogue

    # about two counters per rule of the catalogue and a few more, per run
    assert len(runs) < 2 * (2 * len(catalogue()) + 16)


def test_a_per_rule_study_states_that_a_rules_prior_drives_its_counters(tmp_path: Path) -> None:
    rules = ["fuse_elementwise", "cse_unary"]
    known = rule_knowledge(
        rewrite_problem(GPT2, **SMALL, calibration=calibrate(workload_graphs(GPT2), 40, [0, 1]),
                        priors="rules", rules=rules).space
    )  # fmt: skip
    assert known == {
        "candidates": [[f"priors.{r}", f"rule.{r}.{c}"] for r in rules for c in RULE_COUNTERS_KNOWN]
    }
    url = f"sqlite:///{tmp_path / 's.db'}"
    args = {"budget": 40, "seeds": 1, "calibration_seeds": 2, "storage": url}
    study = rewrite_study(GPT2, **args, name="rules", priors="rules", rules=rules)
    assert study.settings.knowledge is not None
    assert study.settings.knowledge["candidates"] == known["candidates"]
    surrogate = make_surrogate("structured", study.settings)
    assert ("priors.cse_unary", "rule.cse_unary.improved") in surrogate.knowledge.candidates
    # the user's own knowledge is kept (and a forbidden edge is not made a candidate)
    mine = StudySettings(knowledge={"forbidden": [["priors.cse_unary", "rule.cse_unary.fired"]]})
    own = rewrite_study(GPT2, **args, name="own", priors="rules", rules=rules, settings=mine)
    assert own.settings.knowledge["forbidden"] == [["priors.cse_unary", "rule.cse_unary.fired"]]
    assert ["priors.cse_unary", "rule.cse_unary.fired"] not in own.settings.knowledge["candidates"]
    family = rewrite_study(GPT2, **args, name="family")
    assert rule_knowledge(family.space) is None and family.settings.knowledge is None


def _default(problem: RewriteProblem) -> tuple[dict[str, Any], dict[str, Any]]:
    """The default configuration of a rewrite problem's space, and its context."""
    return problem.space.default(), problem.context


def test_resume_skips_calibration_and_other_arguments_conflict(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    calls: list[int] = []
    args = {"budget": 40, "seeds": 1, "calibration_seeds": 2, "storage": url, "name": "r"}
    study = rewrite_study(GPT2, **args, on_calibrate=lambda: calls.append(1))
    study.optimize(2, progress=False)
    with caplog.at_level("WARNING"):
        again = rewrite_study(GPT2, **args, on_calibrate=lambda: calls.append(1))
    # the same arguments give the same settings: no "keeps its stored settings" on a resume
    assert "keeps its stored settings" not in caplog.text
    assert calls == [1] and again.space == study.space and len(again.trials) == 2
    assert again.objectives == DEFAULT_OBJECTIVES
    # The machine-dependent metrics are stored but never reach the structured surrogate.
    assert "time.total" in study.trials[0].metrics and "search_time" in study.trials[0].metrics
    surrogate = make_surrogate("structured", again.settings)
    assert surrogate.config.ignore_metrics == unmodeled_metrics()
    with pytest.raises(StudyConflictError, match="other arguments"):
        rewrite_study(GPT2, **{**args, "budget": 30})


def test_only_a_configuration_that_beats_the_defaults_is_exported(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = rewrite_study(GPT2, budget=40, seeds=1, calibration_seeds=2, storage=url, lead=False)
    default = study.space.default()
    same = {**default, "verify_rate": 0.5}  # checks more, searches alike: no better
    for config in (default, same):
        study.enqueue(config)
    study.optimize(2, progress=False)
    report = validate(study, held_out=[], validation_seeds=(1000, 1001, 1002))
    assert report.chosen is None and [c["trial"] for c in report.candidates] == [1]
    assert report.candidates[0]["training"]["anytime_hv"]["value"] == 0.0
    assert export_tuned(study, report, tmp_path / "p.json") is None
    assert not (tmp_path / "p.json").exists()
    forced = export_tuned(study, report, tmp_path / "p.json", anyway=True)
    assert forced is not None and forced.provenance["beats_defaults"] is False

    informed = {**default, "prior_weight": 0.95, "prior_specificity": 2.0, "beta": 0.8}
    informed |= {"tau": 0.1, "alpha": 1.0}
    study.enqueue(informed)
    study.optimize(3, progress=False)
    report = validate(
        study, held_out=["vit"], validation_seeds=(1000, 1001, 1002), held_out_seeds=(2000, 2001)
    )
    assert report.chosen == 2 and report.held_out is not None
    assert report.held_out.per_workload["vit"]["reach"]["ratio"] < 1.0
    doc = export_tuned(study, report, tmp_path / "p.json")
    assert doc is not None and doc.provenance["trial"] == 2
    priors = PriorsFile.load(tmp_path / "p.json")
    cfg = SearchConfig.from_dict(priors.search_config)
    assert cfg.max_steps == 40 and cfg.beta == 0.8 and cfg.devices == 1  # the budget travels
    assert priors.provenance["validation"]["chosen"] == 2
    top = max(priors.priors, key=priors.priors.get)
    assert top.startswith("fuse_")
    # `tuner plot` (the application's priors reader) draws the family member's rule priors too
    paths = plot_study(study, tmp_path / "plots", pick=2, weights_of=RULE_PRIORS)
    assert [p.name.rsplit("-", 1)[1] for p in paths] == [
        "pareto.png",
        "hypervolume.png",
        "priors.png",
    ]


def test_a_measuring_study_times_the_best_graphs_on_the_device(tmp_path: Path) -> None:
    """``measure=True``: the defaults' and every trial's best graphs are timed (here on the CPU),
    and ``measured_latency_reduction`` is an objective like the others."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    objectives = {"final_hv": "maximize", MEASURED: "maximize"}
    args = {"budget": 20, "seeds": 2, "calibration_seeds": 2, "storage": url, "name": "m"}
    study = rewrite_study(GPT2, objectives, **args, measure="cpu", lead=False)
    context = study.context
    assert context is not None and "suite" not in study.space.params
    assert context["spec"]["measure"] == "cpu"
    assert len(context["calibration"]["default"][MEASURED]) == 2
    study.optimize(1, progress=False)
    (trial,) = study.trials
    assert trial.state == "COMPLETE" and f"{MEASURED}.sem" in trial.metrics
    # a reduction of the measured latency: below 1 (slower graphs are not reported as gains)
    assert -1.0 < trial.values[MEASURED] < 1.0
    assert rewrite_study(GPT2, objectives, **args, measure="cpu").space == study.space
    with pytest.raises(StudyConflictError, match="other arguments"):
        rewrite_study(GPT2, {"final_hv": "maximize"}, **args)
    with pytest.raises(StudyError, match="measure=True"):
        rewrite_problem(GPT2, **SMALL, objectives=[MEASURED])
    with pytest.raises(StudyError, match="measure must be"):
        rewrite_problem(GPT2, **SMALL, measure=1)  # type: ignore[arg-type]
    with pytest.raises(StudyError, match="measure='compile'"):
        rewrite_problem(GPT2, **SMALL, objectives=[COMPILED], measure="cpu")
    with pytest.raises(StudyError, match="measure=True"):
        rewrite_problem(GPT2, **SMALL, objectives=[MEASURED], measure="compile")


@pytest.mark.slow
def test_a_compiling_study_reports_the_speedup_over_torch_compile(tmp_path: Path) -> None:
    """``measure="compile"``: each run's input and best graph are timed through torch.compile,
    and ``compiled_speedup`` is an objective."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    objectives = {"final_hv": "maximize", COMPILED: "maximize"}
    args = {"budget": 20, "seeds": 2, "calibration_seeds": 2, "storage": url, "name": "c"}
    study = rewrite_study(GPT2, objectives, **args, measure="compile", lead=False)
    study.optimize(1, progress=False)
    (trial,) = study.trials
    assert trial.state == "COMPLETE" and 0.2 < trial.values[COMPILED] < 5.0


def test_timing_threads_restores_the_callers_thread_count() -> None:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError), timing_threads():
            assert torch.get_num_threads() == 1
            raise RuntimeError
        assert torch.get_num_threads() == 2
        with timing_threads(on=False):
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_bad_workload_and_objective_are_clear_errors(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    with pytest.raises(StudyError, match="Unknown workloads \\['gpt5'\\]"):
        rewrite_study(("gpt5",), storage=url)
    with pytest.raises(StudyError, match="Unknown objectives"):
        rewrite_study(GPT2, {"speed": "maximize"}, storage=url)
    with pytest.raises(StudyError, match="Unknown objectives"):
        rewrite_study(GPT2, {"anytime_hv": "minimize"}, storage=url)
    with pytest.raises(StudyError, match="priors must be"):
        rewrite_problem(GPT2, priors="free")


def _frozen_study(tmp_path: Path, name: str) -> tuple[str, dict]:
    """A copy of the frozen study ``tests/data/studies/<name>.db`` and what it holds
    (``<name>.json``)."""
    import json
    import shutil

    data = Path(__file__).resolve().parents[1] / "data" / "studies"
    shutil.copy(data / f"{name}.db", tmp_path / "old.db")
    return f"sqlite:///{tmp_path / 'old.db'}", json.loads((data / f"{name}.json").read_text())


def _never_recalibrated() -> None:
    raise AssertionError("an existing study is never recalibrated")


def test_a_study_from_before_contexts_opens_resumes_and_validates(tmp_path: Path) -> None:
    """tests/data/studies/rewrite_v2.db (frozen; schema version 2) holds a rewrite study whose
    context rode in its space as ``Fixed("suite")`` and in every trial's configuration. Asked
    for with its original arguments it opens as stored (no recalibration, no conflict), its
    trials keep their values, a resumed trial runs with the suite its configuration carries, and
    validation and export read the suite from the space."""
    url, expected = _frozen_study(tmp_path, "rewrite_v2")
    args = {"budget": 40, "seeds": 2, "calibration_seeds": 2, "storage": url, "name": "legacy"}
    study = rewrite_study(GPT2, **args, on_calibrate=_never_recalibrated)
    assert study.context is None and sorted(study.space.params) == expected["parameters"]
    assert suite_of(study) == expected["suite"]
    old = [{"state": str(t.state), "values": t.values} for t in study.trials]
    assert old == expected["trials"]
    with pytest.raises(StudyConflictError, match="other arguments"):
        rewrite_study(GPT2, **{**args, "budget": 60}, on_calibrate=_never_recalibrated)
    study.optimize(4, progress=False)
    resumed = study.trials[3]
    assert resumed.state == "COMPLETE" and resumed.config["suite"] == expected["suite"]
    report = validate(study, held_out=(), n_candidates=1, validation_seeds=[7, 8])
    assert report.workloads == ["gpt2"] and report.budget == 40


def test_a_study_with_a_version_1_context_opens_and_resumes(tmp_path: Path) -> None:
    """tests/data/studies/rewrite_v3.db (frozen; written before the context had a
    ``format_version``) holds a rewrite study whose context is the flat dict a trial reads.
    Asked for with its original arguments it opens as stored (no recalibration, no conflict, its
    context unchanged), its trials keep their values, and a resumed trial reads that context."""
    url, expected = _frozen_study(tmp_path, "rewrite_v3")
    args = {"budget": 40, "seeds": 2, "calibration_seeds": 2, "storage": url, "name": "context-v1"}
    study = rewrite_study(GPT2, **args, on_calibrate=_never_recalibrated)
    assert study.context == expected["context"] and "format_version" not in study.context
    assert sorted(study.space.params) == expected["parameters"]
    assert suite_of(study) == expected["context"]
    old = [{"state": str(t.state), "values": t.values} for t in study.trials]
    assert old == expected["trials"]
    with pytest.raises(StudyConflictError, match="other arguments"):
        rewrite_study(GPT2, **{**args, "seeds": 1}, on_calibrate=_never_recalibrated)
    study.enqueue({**study.space.default(), "tau": 0.5})  # no model fit: a queued trial
    study.optimize(4, progress=False)
    assert study.trials[3].state == "COMPLETE" and study.trials[3].config["tau"] == 0.5


def test_a_new_study_runs_the_defaults_and_the_informed_prior_first(tmp_path: Path) -> None:
    from rewrite_tuner.problem import LEAD_DESIGN, informed_config

    url = f"sqlite:///{tmp_path / 's.db'}"
    args = {"budget": 20, "seeds": 1, "calibration_seeds": 2, "storage": url}
    study = rewrite_study(GPT2, **args)
    first = [t.config for t in study.trials]
    assert first == [study.space.default(), informed_config(study.space)]
    assert first[1]["prior_weight"] == 1.0 and study.settings.n_initial == LEAD_DESIGN
    assert all(t.state == "WAITING" for t in study.trials)
    again = rewrite_study(GPT2, **args)  # reopened: nothing queued twice
    assert len(again.trials) == 2
    plain = rewrite_study(GPT2, **args, name="plain", lead=False)
    assert plain.trials == [] and plain.settings.n_initial is None


def test_the_grouped_surrogate_gets_every_runs_values(tmp_path: Path) -> None:
    from tuner.groups import GroupedSurrogate

    url = f"sqlite:///{tmp_path / 'g.db'}"
    args = {"budget": 40, "seeds": 1, "calibration_seeds": 2, "storage": url}
    study = rewrite_study(GPT2, **args, settings=StudySettings(surrogate="grouped"))
    assert study.context is not None and study.context["spec"]["run_metrics"] is True
    assert isinstance(make_surrogate("grouped", study.settings), GroupedSurrogate)
    plain = rewrite_study(GPT2, **args, name="plain")
    assert plain.context is not None and plain.context["spec"]["run_metrics"] is False


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"centre": {"fuse_gelu_tanh": 1.0}, "priors": "rules"}, "needs priors='family'"),
        ({"centre": {"no_such_rule": 1.0}}, "give every rule of the catalogue 0"),
        ({"priors": "rules", "rules": ["no_such_rule"]}, "no_such_rule"),
        ({"tune": ["no_such_knob"]}, "Cannot tune 'no_such_knob'"),
    ],
)
def test_bad_arguments_are_refused_before_the_calibration(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict, match: str
) -> None:
    """Issue 52: ``centre=`` with ``priors="rules"`` was refused only after calibrating (minutes)."""
    import rewrite_tuner.problem as problem

    def no_calibration(*args: Any, **kw: Any) -> None:
        raise AssertionError("calibrated before refusing a bad argument")

    monkeypatch.setattr(problem, "calibrate", no_calibration)
    with pytest.raises((StudyError, SearchConfigError), match=match):
        rewrite_problem(GPT2, **SMALL, **kwargs)
