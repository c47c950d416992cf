"""`studies.plots`: safe file names from study names, and checks made before anything is drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

from studies.errors import ExportError
from studies.examples import toy_study
from studies.plots import file_stem, plot_study
from tests.studies.helpers import fast_settings


@pytest.mark.parametrize(
    ("name", "stem"),
    [
        ("tune", "tune"),
        ("rewrite-demo_v1.2", "rewrite-demo_v1.2"),
        ("team/tune", "team_tune"),
        ("../escape", "___escape"),
        ("..", "__"),
        (".hidden", "_hidden"),
        ("a b:c\\d", "a_b_c_d"),
        ("", "_"),
    ],
)
def test_file_stem_is_one_safe_path_part(name: str, stem: str) -> None:
    assert file_stem(name) == stem
    assert Path(file_stem(name)).name == file_stem(name)  # no folder part, never '.' or '..'


@pytest.mark.parametrize("name", ["team/tune", "../escape"])
def test_plot_study_writes_inside_out_dir_whatever_the_name(tmp_path: Path, name: str) -> None:
    study = toy_study(name, f"sqlite:///{tmp_path / 's.db'}", settings=fast_settings(100))
    study.optimize(3, progress=False)
    out = tmp_path / "plots"
    paths = plot_study(study, out)
    assert len(paths) == 3
    assert all(p.parent == out and p.read_bytes()[:4] == b"\x89PNG" for p in paths)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plots", "s.db"]


def test_plot_study_into_an_existing_file_fails_before_writing(tmp_path: Path) -> None:
    study = toy_study("toy", f"sqlite:///{tmp_path / 's.db'}", settings=fast_settings(100))
    study.optimize(2, progress=False)
    target = tmp_path / "taken"
    target.write_text("keep")
    with pytest.raises(ExportError, match="is an existing file, not a folder"):
        plot_study(study, target)
    assert target.read_text() == "keep"


def test_plot_of_an_empty_study_or_a_bad_pick_writes_nothing(tmp_path: Path) -> None:
    study = toy_study("toy", f"sqlite:///{tmp_path / 's.db'}", settings=fast_settings(100))
    out = tmp_path / "plots"
    with pytest.raises(ExportError, match="no feasible COMPLETE trial to plot"):
        plot_study(study, out)
    assert not out.exists()
    study.optimize(2, progress=False)
    with pytest.raises(ExportError, match="Trial 99 is not a COMPLETE trial"):
        plot_study(study, out, pick=99)
    with pytest.raises(ExportError, match="not a Simplex parameter"):
        plot_study(study, out, simplex="tau")
    assert not out.exists()


def test_plots_of_a_many_rule_three_objective_study_stay_readable(tmp_path: Path) -> None:
    """51 rules: ranked bars of the top rules plus one for the rest (not 51 columns); three
    objectives: three pairwise projections; a FAILED trial adds nothing to the hypervolume."""
    from matplotlib.image import imread

    from spaces import Float, Simplex, Space
    from studies import Study
    from studies.plots import TOP_RULES, plot_hypervolume, plot_pareto, plot_priors

    rules = [f"rule_{i:02d}" for i in range(51)]
    space = Space({"x": Float(0.0, 1.0), "priors": Simplex(rules)})
    objectives = {"f1": "minimize", "f2": "minimize", "f3": "maximize"}
    study = Study("many", space, objectives, storage=f"sqlite:///{tmp_path / 's.db'}")
    for i in range(12):
        trial = study.ask()
        if i == 5:
            study.tell(trial, error="RuntimeError: boom")
            continue
        x, p = trial.config["x"], trial.config["priors"]
        study.tell(trial, {"f1": x, "f2": (1 - x) ** 2 + p["rule_00"], "f3": p["rule_01"]})
    paths = [
        plot_priors(study, tmp_path / "priors.png"),
        plot_pareto(study, tmp_path / "pareto.png"),
        plot_hypervolume(study, tmp_path / "hv.png"),
    ]
    sizes = [imread(p).shape[:2] for p in paths]  # (height, width) in pixels
    assert all(w <= 2000 and h <= 1000 for h, w in sizes), sizes
    assert sizes[0][0] > 0.3 * 110 * (TOP_RULES + 1)  # one row per bar drawn
