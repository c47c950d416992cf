"""Pick rules, priors export (atomic, versioned, finite) and the priors-file reader."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pytest

from rewrite_tuner import export_priors, read_priors_file
from rewrite_tuner.errors import PriorsFileError
from rewrite_tuner.export import FORMAT_VERSION, KIND
from studies import Constrained, Study, Weighted
from studies.errors import ExportError
from studies.examples import toy_space
from studies.pareto import choose_trial, hypervolume_curve, pareto_front
from studies.records import TrialRecord

OBJ = {"a": "minimize", "b": "maximize"}


def _t(number: int, a: float, b: float, state: str = "COMPLETE", **metrics: float) -> TrialRecord:
    return TrialRecord(
        id=number,
        state=state,
        config={"x": number},
        values={"a": a, "b": b} if state == "COMPLETE" else None,
        metrics=dict(metrics),
    )


TRIALS = [
    _t(0, 1.0, 1.0, m=5.0),  # dominated by 1
    _t(1, 0.5, 2.0, m=3.0),  # Pareto
    _t(2, 2.0, 4.0, m=1.0),  # Pareto
    _t(3, 0.2, 0.5, m=9.0),  # Pareto
    _t(4, 0.0, 0.0, state="FAILED"),
]


def test_pareto_front_directions_and_constraints() -> None:
    assert [t.number for t in pareto_front(TRIALS, OBJ)] == [1, 2, 3]
    assert [t.number for t in pareto_front(TRIALS, OBJ, ["m <= 4"])] == [1, 2]
    assert [t.number for t in pareto_front(TRIALS, {"a": "maximize", "b": "maximize"})] == [2]


def test_weighted_pick_rule() -> None:
    # normalized over the Pareto set {1, 2, 3}: a (min) -> 1:0.833 2:0 3:1 ; b (max) -> 1:0.43 2:1 3:0
    assert choose_trial(TRIALS, OBJ, [], None)[0].number == 1  # equal weights: 1.26 vs 1 vs 1
    assert choose_trial(TRIALS, OBJ, [], {"a": 1.0})[0].number == 3
    assert choose_trial(TRIALS, OBJ, [], Weighted({"b": 2.0, "a": 0.0}))[0].number == 2
    trial, rule = choose_trial(TRIALS, OBJ, [], Weighted({"a": 3, "b": 1}))
    assert trial.number == 3 and "weights" in rule
    for bad in ({"c": 1.0}, {"a": -1.0}, {"a": 0.0}, {"a": math.nan}):
        with pytest.raises(ExportError, match="Weights must name objectives"):
            choose_trial(TRIALS, OBJ, [], bad)


def test_constrained_pick_rule() -> None:
    trial, rule = choose_trial(TRIALS, OBJ, [], Constrained("b", ["m <= 3"]))
    assert trial.number == 2 and "subject to" in rule
    assert choose_trial(TRIALS, OBJ, [], Constrained("a", ["b >= 1.5"]))[0].number == 1
    with pytest.raises(ExportError, match="relax the constraints"):
        choose_trial(TRIALS, OBJ, [], Constrained("a", ["m <= 0"]))
    with pytest.raises(ExportError, match="must name one of"):
        choose_trial(TRIALS, OBJ, [], Constrained("zzz"))
    assert choose_trial(TRIALS, OBJ, [], 0)[0].number == 0
    with pytest.raises(ExportError, match="not a COMPLETE trial"):
        choose_trial(TRIALS, OBJ, [], 4)


def test_weighted_pick_is_on_the_front_for_random_weights() -> None:
    rng = np.random.default_rng(0)
    front = {t.number for t in pareto_front(TRIALS, OBJ)}
    for _ in range(50):
        w = dict(zip(OBJ, rng.random(2).tolist()))
        assert choose_trial(TRIALS, OBJ, [], w)[0].number in front


def test_hypervolume_curve_is_monotone() -> None:
    numbers, hv = hypervolume_curve(TRIALS, OBJ)
    assert numbers == [0, 1, 2, 3, 4]
    assert all(b >= a for a, b in zip(hv, hv[1:])) and hv[-1] > 0
    _, fixed = hypervolume_curve(TRIALS[:2], OBJ, ref=[2.0, 0.0])
    assert fixed[0] == pytest.approx(1.0 * 1.0) and fixed[1] == pytest.approx(1.5 * 2.0)


def _study(tmp_path: Path) -> Study:
    study = Study(
        "e",
        toy_space(),
        {"latency": "minimize", "search_seconds": "minimize"},
        storage=f"sqlite:///{tmp_path / 's.db'}",
    )
    for i in range(4):
        t = study.ask()
        values = {"latency": 1.0 / (i + 1), "search_seconds": float(i)}
        study.tell(t, values, metrics={"steps": 10.0 * i, "steps@gpt2/0": 9.0 * i})
    return study


def test_export_round_trip(tmp_path: Path) -> None:
    study = _study(tmp_path)
    path = tmp_path / "priors.json"
    doc = export_priors(study, path, pick=Constrained("latency", ["search_seconds <= 2"]))
    chosen = study.trials[2]
    assert doc.provenance["trial"] == 2
    raw = json.loads(path.read_text())
    assert raw["format_version"] == FORMAT_VERSION and raw["kind"] == KIND
    assert raw["priors"] == chosen.config["priors"]
    assert raw["search_config"] == {k: v for k, v in chosen.config.items() if k != "priors"}
    prov = raw["provenance"]
    assert prov["study"] == "e" and prov["values"] == chosen.values and prov["simplex"] == "priors"
    assert prov["package_version"] and prov["date"].endswith("Z")
    assert prov["metrics"] == {"steps": 20.0}  # per-run values stay in the study
    back = read_priors_file(path)
    assert back.priors == pytest.approx(chosen.config["priors"])
    assert math.isclose(sum(back.priors.values()), 1.0)
    assert read_priors_file(path, known_rules=["fuse", "merge", "shard", "reorder"]) == back
    assert list(tmp_path.glob(".priors.json.*")) == []  # no temp files left behind


def test_export_is_read_by_rewrite(tmp_path: Path) -> None:
    from rewrite import PriorsFile  # the format's reader must exist: no skip

    study = _study(tmp_path)
    export_priors(study, tmp_path / "p.json")
    loaded = PriorsFile.load(tmp_path / "p.json")
    assert dict(loaded.search_config)["population"] >= 4


def test_export_replaces_only_priors_files_unless_forced(tmp_path: Path) -> None:
    study = _study(tmp_path)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    with pytest.raises(
        ExportError, match=r"Refusing to replace '.*notes.txt': it is not JSON.*force"
    ):
        export_priors(study, notes)
    assert notes.read_text() == "my notes\n"
    other = tmp_path / "other.json"
    other.write_text('{"format": "rewrite-graph"}')
    with pytest.raises(ExportError, match='no "kind": "rewrite-tuner/rule-priors" header'):
        export_priors(study, other)
    assert other.read_text() == '{"format": "rewrite-graph"}'
    with pytest.raises(ExportError, match=r"even with force: it is not a JSON file"):
        export_priors(study, notes, force=True)  # force replaces priors files only
    assert notes.read_text() == "my notes\n"
    with pytest.raises(ExportError, match=r"even with force: .*without a \"priors\" entry"):
        export_priors(study, other, force=True)
    by_hand = tmp_path / "by-hand.json"
    by_hand.write_text('{"priors": {"fuse": 1.0}}')
    with pytest.raises(ExportError, match=r"Refusing to replace .*by-hand.json.*--force"):
        export_priors(study, by_hand)
    export_priors(study, by_hand, force=True)  # a priors file of another kind: the caller insists
    assert read_priors_file(by_hand).provenance["study"] == "e"
    newer = tmp_path / "newer.json"  # issue 52: a priors file of another version was replaced
    newer.write_text(json.dumps({"format_version": 2, "kind": KIND, "priors": {"fuse": 1.0}}))
    with pytest.raises(ExportError, match=r"newer.json.*format_version 2.*writes 1.*--force"):
        export_priors(study, newer)
    assert json.loads(newer.read_text())["format_version"] == 2
    export_priors(study, newer, force=True)
    priors = tmp_path / "priors.json"
    export_priors(study, priors)
    export_priors(study, priors, pick=1)  # a previous export is replaced without force
    assert read_priors_file(priors).provenance["trial"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "by-hand.json",
        "newer.json",
        "notes.txt",
        "other.json",
        "priors.json",
        "s.db",
    ]


@pytest.mark.parametrize("force", [False, True])
def test_export_never_replaces_the_study_database(tmp_path: Path, force: bool) -> None:
    study = _study(tmp_path)
    db = tmp_path / "s.db"
    before = db.read_bytes()
    for target in (db, tmp_path / "s.db-wal", tmp_path / "." / ".." / tmp_path.name / "s.db"):
        with pytest.raises(ExportError, match=r"study's own database.*Nothing was written"):
            export_priors(study, target, force=force)
    assert db.read_bytes() == before and not (tmp_path / "s.db-wal").exists()
    assert len(Study.load("e", f"sqlite:///{db}").trials) == 4


def test_export_bad_destinations_name_the_path(tmp_path: Path) -> None:
    study = _study(tmp_path)
    missing = tmp_path / "nonexist" / "p.json"
    with pytest.raises(ExportError, match=r"'.*nonexist/p.json'.*folder .* does not exist"):
        export_priors(study, missing)
    (tmp_path / "d").mkdir()
    with pytest.raises(ExportError, match=r"'.*d': it is a directory.*d/priors.json"):
        export_priors(study, tmp_path / "d")
    assert list((tmp_path / "d").iterdir()) == [] and not missing.parent.exists()


def test_export_file_mode_follows_the_umask(tmp_path: Path) -> None:
    import os
    import stat

    study = _study(tmp_path)
    old = os.umask(0o027)
    try:
        export_priors(study, tmp_path / "new.json")
        assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o640
        (tmp_path / "new.json").chmod(0o604)
        export_priors(study, tmp_path / "new.json")  # replacing keeps the file's mode
        assert stat.S_IMODE((tmp_path / "new.json").stat().st_mode) == 0o604
    finally:
        os.umask(old)


def test_export_refuses_non_finite_and_keeps_old_file(tmp_path: Path) -> None:
    _study(tmp_path)  # the storage file sits beside the export
    path = tmp_path / "priors.json"
    path.write_text("old\n")
    bad = TrialRecord(
        id=9,
        state="COMPLETE",
        values={"latency": 0.0, "search_seconds": 0.0},
        config={
            "tau": math.nan,
            "population": 4,
            "priors": {"fuse": 1.0, "merge": 0.0, "shard": 0.0, "reorder": 0.0},
        },
    )

    class Fake:
        name, space, constraints = "f", toy_space(), []
        objectives = {"latency": "minimize", "search_seconds": "minimize"}
        trials = [bad]

    from rewrite_tuner.export import export_priors

    with pytest.raises(ExportError, match=r"search_config.tau is not a finite number.*Nothing"):
        export_priors(Fake(), path)
    assert path.read_text() == "old\n"
    assert len(list(tmp_path.iterdir())) == 2  # s.db + priors.json: no temp file


def test_export_needs_one_simplex(tmp_path: Path) -> None:
    from spaces import Float, Simplex, Space

    two = Space({"x": Float(0, 1), "p": Simplex(["a", "b"]), "q": Simplex(["c", "d"])})
    study = Study("two", two, {"f": "minimize"}, storage=f"sqlite:///{tmp_path / 't.db'}")
    study.tell(study.ask(), {"f": 1.0})
    with pytest.raises(ExportError, match=r"has 2 \(\['p', 'q'\]\); pass simplex="):
        export_priors(study, tmp_path / "x.json")
    doc = export_priors(study, tmp_path / "x.json", simplex="q")
    assert set(doc.priors) == {"c", "d"} and "p" in doc.search_config
    none = Study(
        "none",
        Space({"x": Float(0, 1)}),
        {"f": "minimize"},
        storage=f"sqlite:///{tmp_path / 't.db'}",
    )
    none.tell(none.ask(), {"f": 1.0})
    with pytest.raises(ExportError, match="has no Simplex parameter.*no rule priors to export"):
        export_priors(none, tmp_path / "y.json")
    assert not (tmp_path / "y.json").exists()


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"format_version": 2}, "Upgrade rewrite-tuner"),
        ({"format_version": "1"}, "integer format_version"),
        ({"kind": "something/else"}, "expected 'rewrite-tuner/rule-priors'"),
        ({"priors": [0.5, 0.5]}, "must be an object of rule -> number"),
        ({"priors": {"a": 0.5, "b": 0.6}}, "sum to 1"),
        ({"priors": {"a": 1.5, "b": -0.5}}, "non-negative"),
        ({"priors": {"a": True}}, "non-negative"),
        ({"search_config": []}, "must be a JSON object"),
    ],
)
def test_read_priors_file_rejects(tmp_path: Path, doc: dict, message: str) -> None:
    base = {"format_version": 1, "kind": KIND, "priors": {"a": 0.5, "b": 0.5}}
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**base, **doc}))
    with pytest.raises(PriorsFileError, match=message):
        read_priors_file(path)


def test_read_priors_file_rejects_nan_unknown_rules_and_garbage(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.write_text(
        '{"format_version": 1, "kind": "K", "priors": {"a": NaN, "b": 1}}'.replace("K", KIND)
    )
    with pytest.raises(PriorsFileError, match="NaN"):
        read_priors_file(path)
    path.write_text(  # 1e400 is valid JSON that parses as an infinite float
        '{"format_version": 1, "kind": "K", "priors": {"a": 1}, "search_config": {"tau": 1e400}}'.replace(
            "K", KIND
        )
    )
    with pytest.raises(PriorsFileError, match="search_config.tau is not a finite number"):
        read_priors_file(path)
    path.write_text(json.dumps({"format_version": 1, "kind": KIND, "priors": {"zap": 1.0}}))
    with pytest.raises(PriorsFileError, match=r"unknown rules \['zap'\]"):
        read_priors_file(path, known_rules=["fuse"])
    path.write_text("{not json")
    with pytest.raises(PriorsFileError, match="not a valid rule-priors JSON"):
        read_priors_file(path)
    with pytest.raises(PriorsFileError, match="Cannot read"):
        read_priors_file(tmp_path / "missing.json")


def test_read_priors_file_is_the_rewrite_reader(tmp_path: Path) -> None:
    """rewrite_tuner.read_priors_file is a thin name over the format's one reader (whose golden files
    tests/rewrite/test_priors.py reads): same document type, same messages."""
    import rewrite
    from rewrite.errors import PriorsError

    study = _study(tmp_path)
    path = tmp_path / "p.json"
    export_priors(study, path)
    assert read_priors_file(path) == rewrite.read_priors_file(path)
    assert isinstance(read_priors_file(path), rewrite.PriorsFile)
    path.write_text(json.dumps({"format_version": 1, "kind": KIND, "priors": {"zap": 1.0}}))
    with pytest.raises(PriorsError) as direct:
        rewrite.read_priors_file(path, known_rules=["fuse"])
    with pytest.raises(PriorsFileError) as thin:
        read_priors_file(path, known_rules=["fuse"])
    assert str(thin.value) == str(direct.value)


def test_export_is_deterministic_apart_from_date(tmp_path: Path) -> None:
    study = _study(tmp_path)
    a = export_priors(study, tmp_path / "a.json").to_dict()
    time.sleep(0.01)
    b = export_priors(study, tmp_path / "b.json").to_dict()
    a["provenance"].pop("date"), b["provenance"].pop("date")
    assert a == b


def test_export_records_the_fixed_step_budget_and_search_applies_it(tmp_path: Path) -> None:
    """A fixed search knob (the step budget) travels in search_config; other fixed context
    (a workload suite) stays in the provenance."""
    from rewrite.optimize.api import search_inputs
    from spaces import Fixed, Float, Simplex, Space

    space = Space(
        {
            "tau": Float(0.1, 1.0),
            "priors": Simplex(["fuse", "merge"]),
            "max_steps": Fixed(40),
            "suite": Fixed("gpt2"),
        }
    )
    study = Study("fixed", space, {"f": "minimize"}, storage=f"sqlite:///{tmp_path / 't.db'}")
    study.tell(study.ask(), {"f": 1.0})
    doc = export_priors(study, tmp_path / "p.json")
    assert doc.search_config["max_steps"] == 40 and "suite" not in doc.search_config
    assert doc.provenance["fixed"] == {"suite": "gpt2"}
    cfg, _ = search_inputs({"seed": 2}, tmp_path / "p.json")
    assert cfg.max_steps == 40 and cfg.seed == 2 and cfg.tau == doc.search_config["tau"]


def test_pareto_views_agree_with_the_tuner() -> None:
    """studies.pareto is a view over tuner's definitions: same feasibility, duplicates kept."""
    from tuner.problem import Problem
    from tuner.trial import Trial, TrialState

    trials = [*TRIALS, _t(5, 0.5, 2.0, m=3.0)]  # a duplicate of trial 1's point
    problem = Problem(OBJ, ["m <= 4"])
    done = [
        Trial(t.number, {}, TrialState.COMPLETE, t.values, t.metrics) for t in trials if t.values
    ]
    assert [t.number for t in pareto_front(trials, OBJ, ["m <= 4"])] == [1, 2, 5]
    assert [t.id for t in done if problem.is_feasible(t)] == [1, 2, 5]
