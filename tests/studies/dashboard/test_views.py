"""The dashboard's views show the numbers `tuner status` and `tuner plot` show; the Optuna view
maps a study faithfully and refuses writes; the report is one file with nothing to fetch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from studies.dashboard import Exported, Hooks, Panel, Phases
from studies.dashboard.optuna_storage import OptunaView, ReadOnlyError
from studies.dashboard.panels import estimate_split, structure_summary
from studies.dashboard.readonly import ReadOnlyStorage
from studies.dashboard.report import report_html
from studies.dashboard.snapshot import Watcher
from studies.dashboard.views import build, trial_detail
from studies.pareto import hypervolume_curve, pareto_front
from studies.study import Study
from studies.views import progress_counts

from .conftest import OBJECTIVES


def _snap(url: str, name: str = "toy"):  # type: ignore[no-untyped-def]
    return Watcher(ReadOnlyStorage(url), name).snapshot()


def test_the_views_show_the_numbers_tuner_status_shows(study_url: str) -> None:
    snap = _snap(study_url)
    payload = build(snap, Hooks())
    study = Study.load("toy", study_url)
    trials = study.trials
    n = payload["numbers"]
    assert {k: n[k] for k in ("finished", "used", "waiting", "running")} == progress_counts(trials)
    assert (n["trials"], n["complete"], n["failed"], n["running"]) == (13, 11, 1, 1)
    assert n["pareto"] == [t.number for t in pareto_front(trials, study.objectives)]
    for k in study.objectives:
        best = min(t.values[k] for t in trials if t.state == "COMPLETE")
        assert n["best"][k]["value"] == best
    ids = [p["id"] for p in payload["panels"]]
    assert ids == [
        "overview", "history", "pareto", "parallel", "priors", "structure", "running",
        "failures", "time", "trials",
    ]  # fmt: skip
    panels = {p["id"]: p for p in payload["panels"]}
    _, hv = hypervolume_curve(trials, study.objectives)
    assert panels["history"]["numbers"]["hypervolume"] == pytest.approx(hv[-1])
    assert "RuntimeError: boom at population 20" in panels["failures"]["html"]
    assert panels["failures"]["numbers"] == {"failed": [4]}
    assert panels["running"]["numbers"]["running"] == [12]
    assert panels["priors"]["numbers"]["latest"] == 11
    assert panels["structure"]["numbers"]["mode"] == "structured"  # the toy reports "steps"
    pareto_points = {
        x
        for fig in panels["pareto"]["figures"]
        for trace in fig["data"]
        if trace["name"] == "Pareto set"
        for x in trace["customdata"]
    }
    assert pareto_points == set(n["pareto"])
    parallel = panels["parallel"]["figures"][0]["data"][0]["dimensions"]
    assert [d["label"] for d in parallel] == [
        "tau (log)",
        "population (log)",
        "latency",
        "search_seconds",
    ]
    assert len(parallel[0]["values"]) == 11
    assert build(snap, Hooks()) is payload  # cached on the snapshot


def test_a_trial_view_has_its_error_config_and_priors(study_url: str) -> None:
    snap = _snap(study_url)
    failed = trial_detail(snap, 4, Hooks())
    assert "RuntimeError: boom at population 20" in failed["html"]
    done = trial_detail(snap, 3, Hooks())
    assert "population" in done["html"] and done["figures"][0]["id"] == "trial-priors"
    bars = done["figures"][0]["data"][0]
    config = Study.load("toy", study_url).trials[3].config["priors"]
    assert dict(zip(bars["y"], bars["x"], strict=True)) == pytest.approx(config)
    with pytest.raises(KeyError):
        trial_detail(snap, 99, Hooks())


def test_hooks_add_panels_priors_and_phases(study_url: str) -> None:
    snap = _snap(study_url)

    def broken(_snap):  # type: ignore[no-untyped-def]
        raise RuntimeError("this hook is broken")

    hooks = Hooks(
        exported=lambda s: Exported(2, "priors.json", "beat the defaults"),
        phases=lambda s: Phases({"calibration": 30.0}, {"validation": 20.0}, None, "a test"),
        panels=(lambda s: Panel("extra", "Extra", "<p>hello</p>", numbers={"x": 1}), broken),
    )
    panels = {p["id"]: p for p in build(snap, hooks)["panels"]}
    assert panels["extra"]["numbers"] == {"x": 1}
    assert "RuntimeError: this hook is broken" in panels["error-11"]["html"]  # the rest is drawn
    assert panels["priors"]["numbers"] == {"exported": 2, "latest": 11}
    split = panels["time"]["numbers"]["split"]
    assert list(split) == ["calibration", "proposals", "evaluations", "validation"]
    assert (split["calibration"], split["validation"]) == (30.0, 20.0)


def test_the_time_split_estimate_recovers_known_proposal_gaps(study_url: str) -> None:
    """`write_trials` inserts trial i at 2i s and finishes it at 2i + 1.5 + r_i s (one driver,
    one at a time): trial i's proposal took 0.5 - r_{i-1} s; the first counts as the median."""
    snap = _snap(study_url)
    finished = [t for t in snap.trials if t.finished is not None]
    gaps = [
        snap.trials[i].created - finished[i - 1].finished  # type: ignore[operator]
        for i in range(1, len(finished) + 1)
    ]
    est = estimate_split(snap, now=snap.trials[-1].created + 5.0)
    median = sorted(gaps)[len(gaps) // 2]
    assert est["proposals"] == pytest.approx(sum(gaps) + median, rel=0.05)
    assert est["wall"] == pytest.approx(2.0 * 12 + 5.0)
    assert est["evaluations"] == pytest.approx(est["wall"] - est["proposals"])
    assert est["worker"] == pytest.approx(1.5 * 12)
    assert est["drivers"] == 1


def test_the_optuna_view_maps_trials_and_refuses_writes(study_url: str) -> None:
    import optuna
    from optuna.trial import TrialState

    watcher = Watcher(ReadOnlyStorage(study_url), "toy")
    view = OptunaView(lambda name: watcher.snapshot(), lambda: ["toy"])
    study = optuna.load_study(study_name="toy", storage=view)
    assert study.metric_names == ["latency", "search_seconds"]
    trials = study.get_trials(deepcopy=False)
    assert [t.state for t in trials].count(TrialState.FAIL) == 1
    assert trials[4].user_attrs["error"] == "RuntimeError: boom at population 20"
    stored = Study.load("toy", study_url).trials[3]
    t = trials[3]
    assert t.values == [stored.values["latency"], stored.values["search_seconds"]]
    assert {k: v for k, v in t.params.items() if k.startswith("priors.")} == {
        f"priors.{k}": v for k, v in stored.config["priors"].items()
    }
    assert t.params["population"] == stored.config["population"]
    assert t.user_attrs["steps"] == stored.metrics["steps"]
    assert {b.number for b in study.best_trials} == {
        t.number for t in pareto_front(Study.load("toy", study_url).trials, OBJECTIVES)
    }
    for write in (
        lambda: view.set_study_user_attr(1, "k", "v"),
        lambda: view.create_new_trial(1),
        lambda: view.set_trial_state_values(
            view.get_trial_id_from_study_id_trial_number(1, 12), TrialState.FAIL
        ),
        lambda: view.delete_study(1),
    ):
        with pytest.raises(ReadOnlyError, match="read-only"):
            write()


def test_the_report_is_one_file_with_nothing_to_fetch(study_url: str, tmp_path: Path) -> None:
    html = report_html(_snap(study_url), structure=False)
    assert "plotly.js v" in html[:20_000_000]  # plotly inline
    sources = re.findall(r"""<(?:script|link|img|iframe)[^>]+(?:src|href)=["']([^"']+)""", html)
    assert all(s.startswith("data:") for s in sources), sources
    assert "RuntimeError: boom at population 20" in html  # the failed trial's view is inside


def test_the_pareto_view_opens_on_the_front_not_on_an_outlier(tmp_path: Path) -> None:
    """Issue 52's plot fix, in the dashboard: one far-off trial must not squeeze the front into a
    corner. The axes fit the front and the trials inside Tukey's fences; the note counts the
    trial left outside, and its point is still in the figure (a double-click shows it)."""
    from spaces import Float, Space

    url = f"sqlite:///{tmp_path / 'o.db'}"
    study = Study("outlier", Space({"x": Float(0.0, 1.0)}), OBJECTIVES, None, storage=url, seed=0)
    points = [(1.0 + 0.01 * i, 2.0 - 0.01 * i) for i in range(12)] + [(50.0, 90.0)]
    for latency, seconds in points:
        trial = study.ask()
        study.tell(trial.number, {"latency": latency, "search_seconds": seconds})
    panel = {p["id"]: p for p in build(_snap(url, "outlier"), Hooks())["panels"]}["pareto"]
    layout = panel["figures"][0]["layout"]
    lo, hi = layout["xaxis"]["range"]
    assert lo <= 1.0 and 1.11 <= hi < 50.0
    assert layout["yaxis"]["range"][1] < 90.0
    assert "1 outlying trial outside the view" in panel["html"]
    xs = [x for trace in panel["figures"][0]["data"] for x in trace["x"]]
    assert 50.0 in xs


def test_the_structure_view_says_what_warm_start_does(study_url: str, tmp_path: Path) -> None:
    from studies.examples import toy_study
    from studies.settings import StudySettings

    url = f"sqlite:///{tmp_path / 'w.db'}"
    source = {"study": "toy", "storage": study_url}
    for name, settings, said in (
        ("ranked", StudySettings(warm_start=[source]), "first 3 trials as they came out"),
        (
            "queued",
            StudySettings(warm_start=[source], warm_start_queue=2, warm_start_suggest=0),
            "Their 2 best each were queued as the first trials.",
        ),
    ):
        toy_study(name, url, settings=settings)
        summary = structure_summary(_snap(url, name))  # the model is the warm-start one
        assert summary["mode"] == "mtgp" and said in summary["why"], summary
        assert "warm-started from toy, so the model is the warm-start one" in summary["why"]
