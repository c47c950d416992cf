"""Study API: optimize with failures, ask/tell, resume after stale trials, Pareto, DataFrame."""

from __future__ import annotations

import json
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from studies import Study, StudyConflictError, StudyError
from studies.errors import EvaluateError, StudyNotFoundError
from studies.examples import toy_evaluate, toy_space
from studies.storage import Storage
from tests.studies import helpers

OBJ = {"latency": "minimize", "search_seconds": "minimize"}


def make(url: str | Storage, evaluate=toy_evaluate, name: str = "s", **kw) -> Study:
    kw.setdefault("settings", helpers.fast_settings(n_initial=kw.pop("n_initial", 100)))
    return Study(name, toy_space(), OBJ, evaluate, storage=url, **kw)


def test_optimize_runs_budget_and_records(storage_url: str) -> None:
    study = make(storage_url)
    study.optimize(6, n_workers=2, progress=False)
    trials = study.trials
    assert [t.number for t in trials] == list(range(6))
    assert all(t.state == "COMPLETE" for t in trials)
    for t in trials:
        assert t.values == {k: toy_evaluate(t.config)[k] for k in OBJ}
        assert t.metrics == {"steps": toy_evaluate(t.config)["steps"]}
        assert t.started <= t.finished and t.worker and t.heartbeat is not None
    assert study.budget == 6
    # the budget is a total: asking for 6 again runs nothing, 8 runs two more
    study.optimize(6, progress=False)
    assert len(study.trials) == 6
    study.optimize(8, progress=False)
    assert len(study.trials) == 8 and study.progress()["finished"] == 8


def test_failures_never_crash(sqlite_url: str) -> None:
    study = make(sqlite_url, helpers.flaky_evaluate)
    study.optimize(12, n_workers=2, progress=False)
    trials = study.trials
    assert len(trials) == 12
    for t in trials:
        pop = t.config["population"]
        kind = pop % 5
        if kind == 0:
            assert t.state == "FAILED" and t.error.startswith("RuntimeError: boom"), t
        elif kind in (1, 2):
            assert t.state == "FAILED" and t.error.startswith("NonFiniteOutcome"), t
        else:
            assert t.state == "COMPLETE" and t.values is not None, t
            if kind == 3:
                assert "steps" not in t.metrics
    assert {t.state for t in trials} == {"FAILED", "COMPLETE"}


@pytest.mark.parametrize(
    ("evaluate", "message"),
    [
        (helpers.missing_objective, "MissingOutcome"),
        (helpers.not_a_dict, "TypeError: evaluate must return a dict"),
    ],
)
def test_malformed_results_fail_the_trial(sqlite_url: str, evaluate, message: str) -> None:
    study = make(sqlite_url, evaluate)
    study.optimize(2, progress=False)
    assert [t.state for t in study.trials] == ["FAILED", "FAILED"]
    assert all(message in t.error for t in study.trials)


def test_timeout_fails_the_trial(sqlite_url: str) -> None:
    study = make(sqlite_url, helpers.sleepy_evaluate)
    study.optimize(4, n_workers=2, timeout=0.5, progress=False)
    for t in study.trials:
        if t.config["population"] % 2 == 0:
            assert t.state == "FAILED" and "TimeoutError" in t.error
        else:
            assert t.state == "COMPLETE"


def test_driver_side_timeout_with_thread_executor(sqlite_url: str) -> None:
    """Executors whose tasks run in threads (like Dask's) cannot use SIGALRM; the driver fails
    the trial itself and moves on."""
    study = make(sqlite_url, helpers.sleepy_evaluate)
    pool = ThreadPoolExecutor(4)
    try:
        study.optimize(3, n_workers=2, executor=pool, timeout=0.3, progress=False)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    assert len(study.trials) == 3
    for t in study.trials:
        if t.config["population"] % 2 == 0:
            assert t.state == "FAILED" and "TimeoutError" in t.error
        else:
            assert t.state == "COMPLETE"
    assert any(t.state == "FAILED" for t in study.trials)


def test_worker_process_crash_is_a_failed_trial(sqlite_url: str) -> None:
    study = make(sqlite_url, helpers.crashing_worker)
    study.optimize(6, n_workers=1, progress=False)
    trials = study.trials
    assert len(trials) == 6 and all(t.state.is_finished for t in trials)
    for t in trials:
        if t.config["population"] < 10:
            assert t.state == "FAILED" and "WorkerCrashed" in t.error


def test_ask_tell(storage_url: str) -> None:
    study = make(storage_url, evaluate=None)
    a, b = study.ask(), study.ask()
    assert (a.number, b.number, a.state) == (0, 1, "RUNNING")
    assert a.heartbeat is None  # manual trials are never declared stale
    done = study.tell(a, {k: toy_evaluate(a.config)[k] for k in OBJ}, metrics={"steps": 3.0})
    assert done.state == "COMPLETE" and done.metrics == {"steps": 3.0}
    failed = study.tell(b.number, {"latency": float("nan"), "search_seconds": 1.0})
    assert failed.state == "FAILED" and "NonFiniteOutcome" in failed.error
    with pytest.raises(StudyError, match="not RUNNING"):
        study.tell(a, {"latency": 1.0, "search_seconds": 1.0})
    with pytest.raises(StudyError, match="exactly one of"):
        study.tell(study.ask(), None)
    c = study.trials[-1]
    study.tell(c, error=RuntimeError("gave up"))
    assert study.trials[-1].error == "RuntimeError: gave up"
    with pytest.raises(ValueError, match="exactly the objectives"):
        study.tell(study.ask(), {"latency": 1.0})
    with pytest.raises(EvaluateError, match="no evaluate function"):
        study.optimize(10)


def test_same_name_other_definition_is_refused(sqlite_url: str) -> None:
    make(sqlite_url)
    again = make(sqlite_url)  # identical definition attaches
    assert again.name == "s"
    with pytest.raises(StudyConflictError, match="different seed"):
        make(sqlite_url, seed=3)
    with pytest.raises(StudyConflictError, match="different objectives"):
        Study(
            "s",
            toy_space(),
            {"latency": "maximize", "search_seconds": "minimize"},
            storage=sqlite_url,
        )
    with pytest.raises(StudyNotFoundError):
        Study.load("nope", sqlite_url)
    with pytest.raises(StudyError, match="space must be a spaces.Space"):
        Study("x", {"a": 1}, OBJ, storage=sqlite_url)
    with pytest.raises(StudyError, match="non-empty name"):
        Study(" ", toy_space(), OBJ, storage=sqlite_url)


def test_stale_trial_is_requeued_and_rerun(storage_url: str) -> None:
    clock = helpers.FakeClock()
    study = make(Storage(storage_url, clock=clock))
    store = study.storage
    # a RUNNING trial of a process that stopped beating (another host: no pid shortcut)
    with store.write() as conn:
        store.add_trial(conn, study.id, toy_space().sample(1, 5)[0], worker="elsewhere:1:x")
    clock.advance(1.2)  # past the 1 s grace period
    loaded = Study.load("s", Storage(storage_url, clock=clock), evaluate=toy_evaluate)
    loaded.optimize(3, progress=False)
    trials = loaded.trials
    assert trials[0].state == "FAILED" and "StaleTrial" in trials[0].error
    assert trials[1].retry_of == 0 and trials[1].config == trials[0].config
    assert trials[1].state == "COMPLETE"
    assert loaded.progress()["finished"] == 3 and len(trials) == 4


def test_dead_local_worker_is_reaped_without_waiting(sqlite_url: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    import socket

    dead = f"{socket.gethostname()}:{proc.stdout.strip()}:tok"
    study = make(
        sqlite_url, settings=helpers.fast_settings(100, grace_period=600.0, heartbeat_interval=0.2)
    )
    with study.storage.write() as conn:
        study.storage.add_trial(conn, study.id, toy_space().sample(1, 5)[0], worker=dead)
    assert study.reap_stale() == [0]


def test_interrupt_requeues_trials_in_flight(sqlite_url: str) -> None:
    class Exploding(ThreadPoolExecutor):
        calls = 0

        def submit(self, fn, *args, **kwargs):
            Exploding.calls += 1
            if Exploding.calls == 3:
                raise KeyboardInterrupt
            return super().submit(fn, *args, **kwargs)

    study = make(sqlite_url, helpers.slow_toy)
    with Exploding(2) as pool, pytest.raises(KeyboardInterrupt):
        study.optimize(6, n_workers=2, executor=pool, progress=False)
    waiting = [t for t in study.trials if t.state == "WAITING"]
    assert waiting and all(t.retry_of is not None for t in waiting)
    study.optimize(6, progress=False)
    assert study.progress()["finished"] == 6
    assert not [t for t in study.trials if t.state in ("WAITING", "RUNNING")]


def test_pareto_and_dataframe(sqlite_url: str) -> None:
    study = make(sqlite_url)
    study.optimize(10, n_workers=2, progress=False)
    front = study.pareto()
    Y = np.array([[t.values[k] for k in OBJ] for t in study.trials])
    for t in front:  # nobody dominates a Pareto trial
        y = np.array([t.values[k] for k in OBJ])
        assert not np.any(np.all(y >= Y, axis=1) & np.any(y > Y, axis=1))
    others = [t for t in study.trials if t not in front]
    for t in others:  # every other trial is dominated by someone
        y = np.array([t.values[k] for k in OBJ])
        assert np.any(np.all(y >= Y, axis=1) & np.any(y > Y, axis=1))
    df = study.to_dataframe()
    assert len(df) == 10
    for col in (
        "number",
        "state",
        "values.latency",
        "metrics.steps",
        "config.tau",
        "config.priors.fuse",
        "started",
        "finished",
        "duration",
        "worker",
        "error",
    ):
        assert col in df.columns
    assert np.allclose(df["values.latency"], Y[:, 0])


def test_constraints_filter_pareto(sqlite_url: str) -> None:
    study = Study(
        "c",
        toy_space(),
        OBJ,
        helpers.constrained_evaluate,
        constraints=["memory <= 2"],
        storage=sqlite_url,
        settings=helpers.fast_settings(100),
    )
    study.optimize(8, progress=False)
    assert study.constraints == ["memory <= 2"]
    for t in study.pareto():
        assert t.metrics["memory"] <= 2


def test_model_proposals_rebuild_exactly(tmp_path) -> None:
    """Two studies with the same seed propose the same configs; a study rebuilt from storage in a
    fresh process continues exactly as one that never stopped."""
    a = make(f"sqlite:///{tmp_path / 'a.db'}", n_initial=3)
    a.optimize(5, progress=False)
    b = make(f"sqlite:///{tmp_path / 'b.db'}", n_initial=3)
    b.optimize(3, progress=False)
    code = (
        "from studies import Study; from studies.examples import toy_evaluate; "
        f"s = Study.load('s', 'sqlite:///{tmp_path / 'b.db'}', evaluate=toy_evaluate); "
        "s.optimize(5, progress=False)"
    )
    subprocess.run(
        [sys.executable, "-c", code],
        check=True,
        cwd=str(tmp_path.parent),
        env={**__import__("os").environ, "PYTHONPATH": _root()},
    )
    ca = [t.config for t in a.trials]
    cb = [t.config for t in Study.load("s", f"sqlite:///{tmp_path / 'b.db'}").trials]
    assert ca == cb


def _root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[2])


def test_settings_are_stored_and_validated(sqlite_url: str) -> None:
    s = make(sqlite_url)
    assert Study.load("s", sqlite_url).settings == s.settings
    with pytest.raises(ValueError, match="grace_period >= 2 \\* heartbeat_interval"):
        helpers.fast_settings(grace_period=0.1)
    with pytest.raises(ValueError, match="Unknown TunerOptions keys"):
        helpers.StudySettings(tuner_options={"bogus": 1})
    assert Storage(sqlite_url).get_study("s").evaluate_ref == "studies.examples:toy_evaluate"
    ignoring = helpers.StudySettings(ignore_metrics=["time.*"])
    assert ignoring.ignore_metrics == ("time.*",)
    assert helpers.StudySettings.from_dict(json.loads(json.dumps(ignoring.to_dict()))) == ignoring


def test_expert_knowledge_reaches_the_structured_surrogate(sqlite_url: str) -> None:
    from structure import Knowledge, KnowledgeError
    from studies.tuning import make_surrogate

    knowledge = Knowledge(required=(("m", "latency"),), forbidden=(("x", "m"),))
    settings = helpers.fast_settings(knowledge=knowledge)
    assert settings.knowledge == knowledge.to_dict()  # stored as its JSON form
    assert helpers.fast_settings(knowledge=knowledge.to_dict()) == settings
    partial = {"required": [["m", "latency"]], "forbidden": [["x", "m"]]}
    assert helpers.fast_settings(knowledge=partial) == settings
    make(sqlite_url, settings=settings)
    stored = Study.load("s", sqlite_url).settings
    assert stored == settings
    assert make_surrogate("structured", stored).knowledge == knowledge
    # Names are checked against the study when its tuner is built: an edge out of an
    # objective breaks the tiers.
    bad = helpers.fast_settings(knowledge={"required": [["latency", "m"]]})
    with pytest.raises(KnowledgeError, match="breaks the tier rules"):
        make_surrogate("structured", bad).check(toy_space(), list(OBJ), len(OBJ))


_TOY_EDGES = [
    ["population", "steps"], ["steps", "search_seconds"], ["priors", "search_seconds"],
    ["priors", "latency"], ["population", "latency"], ["tau", "latency"],
]  # fmt: skip


def test_a_known_structure_reaches_the_structured_surrogate(sqlite_url: str) -> None:
    from structure import StructureError
    from studies.tuning import make_surrogate

    settings = helpers.fast_settings(structure=_TOY_EDGES)
    make(sqlite_url, settings=settings)
    stored = Study.load("s", sqlite_url).settings
    assert stored == settings and stored.structure == _TOY_EDGES  # stored as JSON pairs
    # The edges become a structure against the study when its tuner is built.
    surrogate = make_surrogate("structured", stored)
    surrogate.check(toy_space(), list(OBJ), len(OBJ))
    fixed = surrogate.fixed_structure
    assert (fixed.params, fixed.metrics, fixed.objectives) == (
        ("population", "priors", "tau"), ("steps",), tuple(OBJ)
    )  # fmt: skip
    assert {(e.source, e.target) for e in fixed.edges} == {tuple(e) for e in _TOY_EDGES}
    # An objective without parents is refused there (misspelled names, at the first fit:
    # tests/structure/test_surrogate.py).
    orphan = helpers.fast_settings(structure=[["population", "steps"], ["steps", "latency"]])
    with pytest.raises(StructureError, match=r"objectives \['search_seconds'\] no parents"):
        make_surrogate("structured", orphan).check(toy_space(), list(OBJ), len(OBJ))


def test_a_study_proposes_from_a_known_structure(sqlite_url: str) -> None:
    settings = helpers.fast_settings(n_initial=8, surrogate="structured", structure=_TOY_EDGES)
    study = make(sqlite_url, settings=settings)
    for _ in range(9):  # 8 Sobol trials, then one proposal from the network
        trial = study.ask()
        out = toy_evaluate(trial.config)
        study.tell(trial, {k: out[k] for k in OBJ}, metrics={"steps": out["steps"]})
    tuner = study._tuners["structured"]
    assert tuner.surrogate.fixed_structure.metrics == ("steps",)
    assert tuner.last_fit is not None and tuner.last_fit.description["model"] == "network"


def test_exhausted_space_stops_cleanly(sqlite_url: str, caplog) -> None:
    from spaces import Int, Space

    study = Study(
        "tiny",
        Space({"k": Int(0, 2)}),
        {"f": "minimize"},
        helpers.int_objective,
        storage=sqlite_url,
        settings=helpers.fast_settings(100),
    )
    with caplog.at_level("WARNING", logger="studies.driver"):
        study.optimize(10, progress=False)
    assert sorted(t.config["k"] for t in study.trials) == [0, 1, 2]
    assert all(t.state == "COMPLETE" for t in study.trials)
    assert "exhausted" in caplog.text


@pytest.mark.parametrize("seed", ["abc", 1.7, 2**70, 2**63, -1, True, None])
def test_seed_must_be_an_int_in_range(sqlite_url: str, seed) -> None:
    with pytest.raises(StudyError, match=r"seed must be an int in \[0, 2\*\*63 - 1\]"):
        make(sqlite_url, seed=seed)
    assert Storage(sqlite_url).study_names() == []


def test_largest_seed_is_stored(sqlite_url: str) -> None:
    assert make(sqlite_url, seed=np.int64(2**63 - 1)).seed == 2**63 - 1
    assert Study.load("s", sqlite_url).seed == 2**63 - 1


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"n_initial": -3}, "n_initial must be None .* or an int >= 0, got -3"),
        ({"n_initial": 2.0}, "n_initial must be None"),
        ({"n_initial": True}, "n_initial must be None"),
        ({"reap_dead_local_workers": "no"}, "reap_dead_local_workers must be True or False"),
        ({"heartbeat_interval": True}, "heartbeat_interval must be a finite number"),
        ({"grace_period": float("inf")}, "grace_period must be a finite number"),
        ({"grace_period": "60"}, "grace_period must be a finite number"),
        ({"surrogate": "Flat"}, "surrogate must be one of"),
        ({"surrogate": ["flat"]}, "surrogate must be one of"),
        ({"tuner_options": None}, "tuner_options must be a dict"),
        ({"tuner_options": {"num_restarts": -1}}, "num_restarts must be an int >= 1"),
        ({"ignore_metrics": "time.*"}, "ignore_metrics must be a list of metric-name patterns"),
        ({"ignore_metrics": [3]}, "ignore_metrics must be a list of metric-name patterns"),
        ({"knowledge": {"requird": []}}, r"unknown keys \['requird'\]"),
        ({"knowledge": "reach -> gain"}, "knowledge must be a structure.Knowledge or its dict"),
        ({"knowledge": {"required": ["ab"]}}, "must be a list of \\[source, target\\] name"),
        ({"knowledge": {"forbidden": [["a", 1]]}}, "must be a list of \\[source, target\\]"),
        ({"knowledge": {"phase_order": "match"}}, "phase_order'\\] must be a list of metric"),
        ({"knowledge": {"formulas": [{"node": object()}]}}, "stored as JSON"),
        ({"knowledge": {"formulas": {"node": "t"}}}, "must be a list of formula dicts"),
        ({"structure": "tau -> latency"}, "structure must be a list of \\[source, target\\]"),
        ({"structure": [["tau", "latency", "x"]]}, "structure must be a list of \\[source"),
        ({"structure": []}, "structure must hold at least one"),
        (
            {"structure": [["m", "latency"]], "knowledge": {"required": [["m", "latency"]]}},
            "knowledge .* or StudySettings.structure .*, not both",
        ),
    ],
)
def test_invalid_settings_are_refused(kwargs: dict, message: str) -> None:
    from studies.errors import StudySettingsError

    with pytest.raises(StudySettingsError, match=message):
        helpers.StudySettings(**kwargs)
    assert helpers.StudySettings(n_initial=0).n_initial == 0


def test_invalid_stored_settings_can_be_replaced(sqlite_url: str) -> None:
    """Settings stored by a release that did not validate them: inspectable, not runnable until
    valid settings are passed (which then replace them)."""
    from sqlalchemy import update

    from studies import schema
    from studies.errors import StudySettingsError

    study = make(sqlite_url)
    study.tell(study.ask(), {"latency": 1.0, "search_seconds": 1.0})
    study.ask()  # trial 1: held by hand, left RUNNING
    bad = {**study.settings.to_dict(), "n_initial": -3, "reap_dead_local_workers": "no"}
    with study.storage.write() as conn:
        conn.execute(update(schema.studies).values(settings=json.dumps(bad)))
    loaded = Study.load("s", sqlite_url, evaluate=toy_evaluate)
    assert len(loaded.trials) == 2 and loaded.pareto()  # read-only use still works
    recover = r"invalid stored settings.*reap_dead_local_workers.*Study.load\('s', storage, evaluate, settings="
    with pytest.raises(StudySettingsError, match=recover):
        loaded.optimize(3, progress=False)
    with pytest.raises(StudySettingsError, match=recover):
        loaded.ask()
    good = helpers.fast_settings(n_initial=2)
    fixed = Study.load("s", sqlite_url, evaluate=toy_evaluate, settings=good)
    assert fixed.settings == good and Study.load("s", sqlite_url).settings == good
    fixed.optimize(3, progress=False)
    assert fixed.progress()["finished"] == 2  # the hand-held trial 1 stays RUNNING
    # valid stored settings always win
    other = helpers.fast_settings(n_initial=5)
    assert Study.load("s", sqlite_url, settings=other).settings == good
    assert make(sqlite_url, settings=other).settings == good


def test_trial_duration_is_the_worker_measured_time(sqlite_url: str) -> None:
    study = make(sqlite_url, evaluate=helpers.slow_toy)
    study.optimize(3, progress=False)
    for t in study.trials:
        assert t.seconds is not None and 0.05 <= t.seconds <= t.finished - t.started
        assert t.duration == t.seconds
    df = study.to_dataframe()
    assert list(df["duration"]) == [t.seconds for t in study.trials]


@pytest.mark.parametrize("surrogate", ["flat", pytest.param("structured", marks=pytest.mark.slow)])
def test_one_tuner_per_process_proposes_what_a_restart_would(
    sqlite_url: str, surrogate: str
) -> None:
    """The tuner and its surrogate live across proposals; a freshly loaded study (a restarted
    process) proposes the same next configurations from the stored trials."""
    settings = helpers.fast_settings(n_initial=4, surrogate=surrogate)
    study = make(sqlite_url, settings=settings)
    for _ in range(10 if surrogate == "structured" else 5):
        trial = study.ask()
        out = toy_evaluate(trial.config)
        study.tell(trial, {k: out[k] for k in OBJ}, metrics={"steps": out["steps"]})
    kept = study._tuners[surrogate]
    assert study._tuner(study.trials) is kept  # not rebuilt per proposal
    if surrogate == "structured":
        assert kept.last_fit is not None, "the structured surrogate was used"
        assert kept.last_fit.description["surrogate"] == "StructuredSurrogate"
    trials = study.trials
    again = Study.load("s", sqlite_url)
    assert study._propose(trials, 2) == again._propose(trials, 2)


def test_enqueued_configurations_run_first_and_count_toward_the_budget(tmp_path) -> None:
    """`Study.enqueue`: a WAITING trial the next `optimize` claims before any proposal; left-out
    parameters take the defaults; unknown parameters and values outside the space are refused."""
    from studies import StudyError
    from studies.examples import toy_study
    from tests.studies.helpers import fast_settings

    study = toy_study("q", f"sqlite:///{tmp_path / 's.db'}", settings=fast_settings())
    known = {"tau": 1.0, "population": 64, "priors": {"fuse": 0.4, "merge": 0.3, "shard": 0.2,
                                                        "reorder": 0.1}}  # fmt: skip
    queued = study.enqueue(known)
    half = study.enqueue({"population": 8})
    assert (queued.number, queued.state, half.number) == (0, "WAITING", 1)
    assert half.config == {**study.space.default(), "population": 8}
    study.optimize(3, progress=False)
    trials = study.trials
    assert [t.state for t in trials] == ["COMPLETE"] * 3
    assert trials[0].config == known and trials[1].config["population"] == 8
    for bad, match in (
        ({"temperature": 1.0}, r"unknown parameters \['temperature'\]"),
        ({"population": 1000}, "population"),
        ([1, 2], "dict of parameter name to value, got list"),
    ):
        with pytest.raises(StudyError, match=match):
            study.enqueue(bad)  # type: ignore[arg-type]
    assert len(study.trials) == 3  # nothing was stored


def test_optimize_says_where_the_time_went(tmp_path) -> None:
    from studies.examples import toy_study
    from tests.studies.helpers import fast_settings

    study = toy_study("t", f"sqlite:///{tmp_path / 's.db'}", settings=fast_settings())
    stats = study.optimize(4, n_workers=2, progress=False)
    assert (stats.trials, stats.finished, stats.n_workers) == (4, 4, 2)
    assert 0 < stats.proposing <= stats.wall and stats.evaluating > 0
    assert stats.summary().startswith(f"{stats.wall:.0f} s: proposing")
    again = study.optimize(4, progress=False)  # nothing left to run
    assert (again.trials, again.finished) == (0, 0)
