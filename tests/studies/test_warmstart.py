"""`StudySettings(warm_start=...)`: a new study's model learns from finished studies' trials
(mapped onto its space by parameter name) from its first proposal; their best configurations
are proposed once one has ordered the first trials alike (or queued first, an option); bad
references are clear errors."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path

import pytest

from spaces import Float, Int, Space
from studies import Study, StudyError, StudySettings
from studies.errors import StudySettingsError
from studies.examples import toy_evaluate, toy_space, toy_study
from studies.pareto import rank_pareto
from studies.warmstart import related_tasks, seed_from_related, warm_surrogate
from tests.studies.helpers import fast_settings

OBJ = {"latency": "minimize", "search_seconds": "minimize"}
QUEUE = {"warm_start_queue": 2, "warm_start_suggest": 0, "warm_start_rank": 0}
"""The queue rule, the default before the rank rule: the best two queued on creation."""


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One finished study ``src`` shared by the tests (each adds studies of its own names): its 8
    trials are Sobol points without the space's default, so its best are the same on every
    machine (a model's proposals differ in the last bits between CPUs, and with them which
    trials rank first) and none is a target's default (which it runs first anyway)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('warm') / 's.db'}"
    sobol = fast_settings(n_initial=8)
    sobol = dataclasses.replace(
        sobol, tuner_options={**sobol.tuner_options, "start_with_default": False}
    )
    toy_study("src", url, settings=sobol).optimize(8, progress=False)
    return url


def _warm(url: str, name: str = "dst", **kwargs) -> Study:
    settings = dataclasses.replace(fast_settings(), warm_start=["src"], n_initial=2, **QUEUE)
    return toy_study(name, url, settings=settings, seed=1, **kwargs)


def test_a_warm_started_study_models_with_the_related_trials(source: str) -> None:
    study = _warm(source)
    assert study.settings.warm_start == [{"study": "src", "storage": None}]
    (task,) = related_tasks(study)
    assert task.name == "src" and task.X.shape == (8, study.space.dim)
    queued = study.trials  # queued on creation (`StudySettings.warm_start_queue`)
    assert len(queued) == 3 and all(t.state == "WAITING" for t in queued)
    src = Study.load("src", source)
    best = rank_pareto(src.trials, src.objectives, src.constraints)[:2]
    # the default first, where a cold study's design starts; then the best, as is (same space)
    assert [t.config for t in queued] == [study.space.default()] + [t.config for t in best]
    assert seed_from_related(study, per_study=2) == []  # held already
    assert len(_warm(source).trials) == 3  # opened again: nothing queued twice
    study.optimize(9, progress=False)
    assert [t.state for t in study.trials] == ["COMPLETE"] * 9
    tuner = next(iter(study._tuners.values()))
    assert type(tuner.surrogate).__name__ == "WarmStartSurrogate"
    assert list(study._tuners) == ["mtgp"]  # one tuner, though the trials report metrics
    assert set(tuner.last_fit.description["loo"]) == {"flat", "src"}  # judged once enough trials
    again = StudySettings.from_dict(study.settings.to_dict())
    assert again == study.settings


def test_a_warm_started_study_proposes_from_the_model_while_it_keeps_the_source(
    source: str,
) -> None:
    cold = toy_study("cold", source, settings=fast_settings(n_initial=6), seed=1)
    cold.optimize(5, progress=False)  # all five from the initial design
    design = [t.config for t in sorted(cold.trials, key=lambda t: t.number)]
    runs = {}
    for gate in (1e6, -1e6):  # a task always kept, never kept
        settings = dataclasses.replace(
            fast_settings(n_initial=6), warm_start=["src"], warm_start_gate=gate, **QUEUE
        )
        study = toy_study(f"gate{gate:+.0f}", source, settings=settings, seed=1)
        study.optimize(5, progress=False)  # the default and the 2 queued, then 2 proposals
        runs[gate] = [t.config for t in sorted(study.trials, key=lambda t: t.number)]
    assert runs[-1e6][0] == runs[1e6][0] == design[0]  # the default, as in a cold study
    # none kept: the design runs from its first Sobol points, the ones the 2 queued stood in
    # for (`studies.views.design_offset`), as a cold study's does
    assert runs[-1e6][3:] == design[1:3]
    assert not any(c in design for c in runs[1e6][3:])  # kept: the model proposes at once
    from tuner.warmstart import GATE

    assert StudySettings().warm_start_gate == GATE  # the study's default is the model's
    quiet = dataclasses.replace(fast_settings(), warm_start=["src"], warm_start_queue=0)
    assert toy_study("none", source, settings=quiet, seed=1).trials == []
    stored = {k: v for k, v in settings.to_dict().items() if k != "warm_start_queue"}
    assert StudySettings.from_dict(stored).warm_start_queue == 0  # stored before it existed
    with pytest.raises(StudySettingsError, match="warm_start_queue must be an int >= 0"):
        StudySettings(warm_start=["src"], warm_start_queue=-1)


def test_suggested_configurations_wait_until_the_related_study_has_shown_it_helps(
    source: str,
) -> None:
    cold = toy_study("cold-g", source, settings=fast_settings(n_initial=6), seed=1)
    cold.optimize(5, progress=False)
    design = [t.config for t in sorted(cold.trials, key=lambda t: t.number)]
    src = Study.load("src", source)
    best = [t.config for t in rank_pareto(src.trials, src.objectives, src.constraints)[:3]]
    runs = {}
    for gate in (1e6, -1e6):  # a task always kept, never kept
        settings = dataclasses.replace(
            fast_settings(n_initial=6),
            warm_start=["src"],
            warm_start_gate=gate,
            warm_start_queue=0,
            warm_start_suggest=2,
            warm_start_rank=0,
        )
        study = toy_study(f"suggest{gate:+.0f}", source, settings=settings, seed=1)
        assert study.trials == []  # nothing queued before the gate has judged
        study.optimize(5, progress=False)
        runs[gate] = [t.config for t in sorted(study.trials, key=lambda t: t.number)]
    if not any(c == best[0] for c in design):  # the design never tries the source's best
        assert runs[-1e6] == design  # never kept: not one trial spent on the source, as cold
    # kept: the design until the gate can judge (two trials), then the source's best, then
    # the model's own proposals
    assert runs[1e6][:2] == design[:2] and runs[1e6][2:4] == best[:2]
    assert not any(c in design or c in best for c in runs[1e6][4:])
    # a probe: the source's best queued; the next ones follow only where it holds up here
    probe = dataclasses.replace(settings, warm_start_queue=1, warm_start_suggest=3)
    study = toy_study("probe", source, settings=probe, seed=1)
    assert [t.config for t in study.trials] == [design[0], best[0]]
    study.optimize(4, progress=False)
    trials = sorted(study.trials, key=lambda t: t.number)
    first, probed = (tuple(t.values[k] for k in OBJ) for t in trials[:2])  # both minimized
    held = not (all(a <= b for a, b in zip(first, probed)) and first != probed)
    rest = [c for c in best[1:3] if c != design[0]]  # the default was tried already
    assert ([t.config for t in trials[2 : 2 + len(rest)]] == rest) == held, (held, trials)
    assert StudySettings.from_dict(probe.to_dict()).warm_start_suggest == 3
    assert StudySettings.from_dict({"warm_start": ["src"]}).warm_start_suggest == 0  # older
    with pytest.raises(StudySettingsError, match="warm_start_suggest must be an int >= 0"):
        StudySettings(warm_start=["src"], warm_start_suggest=-1)
    # the default, the rank rule: nothing queued; the design's first three trials, then the
    # source's best once its own GP orders those three as they came out here (the same
    # problem: it does), whatever the gate says
    ranked = dataclasses.replace(fast_settings(n_initial=6), warm_start=["src"])
    assert (ranked.warm_start_queue, ranked.warm_start_suggest, ranked.warm_start_rank) == (
        0, 2, 3,
    )  # fmt: skip
    ranked = dataclasses.replace(ranked, warm_start_gate=-1e6)
    study = toy_study("ranked", source, settings=ranked, seed=1)
    assert study.trials == []
    study.optimize(5, progress=False)
    configs = [t.config for t in sorted(study.trials, key=lambda t: t.number)]
    assert configs[:3] == design[:3] and configs[3:5] == [c for c in best if c not in design][:2]
    assert StudySettings.from_dict(ranked.to_dict()).warm_start_rank == 3
    assert StudySettings.from_dict({"warm_start": ["src"]}).warm_start_rank == 0  # older
    with pytest.raises(StudySettingsError, match="warm_start_rank must be 0 or at least 2"):
        StudySettings(warm_start=["src"], warm_start_rank=1)


def test_the_gate_setting_reaches_the_model_and_older_settings_keep_theirs(source: str) -> None:
    settings = dataclasses.replace(
        fast_settings(), warm_start=["src"], warm_start_gate=-3.0, warm_start_queue=0
    )
    study = toy_study("gated", source, settings=settings, seed=1)
    assert warm_surrogate(study).gate == -3.0
    assert StudySettings.from_dict(study.settings.to_dict()).warm_start_gate == -3.0
    older = StudySettings.from_dict({"warm_start": ["src"]})  # stored before both existed
    assert (older.warm_start_queue, older.warm_start_gate) == (0, 0.0)  # as it ran then
    for bad in (float("nan"), True, "strict"):
        with pytest.raises(StudySettingsError, match="warm_start_gate must be a finite number"):
            StudySettings(warm_start=["src"], warm_start_gate=bad)


def test_a_new_study_naming_a_missing_study_says_so(
    source: str, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="studies.study"):
        study = toy_study("lost", source, settings=StudySettings(warm_start=["nope"]))
    assert study.trials == [] and "'lost' cannot use its related studies" in caplog.text
    with pytest.raises(StudyError, match="No study named 'nope'"):  # the first proposal says it
        study.optimize(1, progress=False)


def test_rgpe_models_a_warm_started_study(source: str) -> None:
    settings = dataclasses.replace(fast_settings(), warm_start=["src"], warm_start_model="rgpe")
    study = toy_study("rgpe", source, settings=settings, seed=1)
    seed_from_related(study, per_study=2)
    study.optimize(6, progress=False)
    assert [t.state for t in study.trials] == ["COMPLETE"] * 6
    tuner = next(iter(study._tuners.values()))
    assert type(tuner.surrogate).__name__ == "RGPESurrogate"
    assert set(tuner.last_fit.description["weights"]) == {"src", "target"}
    assert StudySettings.from_dict(study.settings.to_dict()).warm_start_model == "rgpe"
    assert StudySettings.from_dict({"warm_start": ["src"]}).warm_start_model == "mtgp"  # older


def test_another_space_lends_its_shared_parameters(source: str, tmp_path: Path) -> None:
    narrow = Space({"population": Int(4, 64, log=True), "alpha": Float(0.0, 1.0)})
    url = f"sqlite:///{tmp_path / 'o.db'}"

    def evaluate(config):  # noqa: ANN001, ANN202 - threads only
        return {"latency": 1.0 / config["population"], "search_seconds": config["alpha"]}

    other = Study("src", narrow, OBJ, storage=url)
    for _ in range(3):
        trial = other.ask()
        other.tell(trial, evaluate(trial.config))
    settings = StudySettings(warm_start=[{"study": "src", "storage": url}])
    study = Study("narrowed", toy_space(), OBJ, toy_evaluate, storage=source, settings=settings)
    (task,) = related_tasks(study)
    assert task.X.shape == (3, study.space.dim)  # population kept, the rest at the defaults


def test_bad_warm_start_references_are_clear_errors(source: str, tmp_path: Path) -> None:
    with pytest.raises(StudySettingsError, match="list of study names"):
        StudySettings(warm_start="src")
    with pytest.raises(StudySettingsError, match="entry is a study name"):
        StudySettings(warm_start=[{"name": "src"}])
    missing = toy_study("x", source, settings=StudySettings(warm_start=["nope"]))
    with pytest.raises(StudyError, match="No study named 'nope'.*warm_start of 'x' names it"):
        related_tasks(missing)
    elsewhere = [{"study": "src", "storage": f"sqlite:///{tmp_path / 'none.db'}"}]
    gone = toy_study("w", source, settings=StudySettings(warm_start=elsewhere))
    with pytest.raises(StudyError, match="none.db.*warm_start of 'w' names it"):
        related_tasks(gone)
    Study("disjoint", Space({"other": Float(0.0, 1.0)}), OBJ, storage=source)
    apart = toy_study("v", source, settings=StudySettings(warm_start=["disjoint"]))
    with pytest.raises(StudyError, match=r"'disjoint' shares no parameter.*\['other'\]"):
        related_tasks(apart)
    with pytest.raises(StudySettingsError, match="warm_start_model must be one of"):
        StudySettings(warm_start=["src"], warm_start_model="gp")
    other = Study(
        "max", toy_space(), {"latency": "maximize", "search_seconds": "minimize"}, storage=source
    )
    del other
    flipped = toy_study("y", source, settings=StudySettings(warm_start=["max"]))
    with pytest.raises(StudyError, match="same objectives and directions"):
        related_tasks(flipped)
    itself = toy_study("z", source, settings=StudySettings(warm_start=["z"]))
    with pytest.raises(StudyError, match="cannot warm-start from itself"):
        related_tasks(itself)
