"""`studies.plots`: safe file names from study names, and checks made before anything is drawn."""

from __future__ import annotations

from pathlib import Path

import pytest

from studies.errors import ExportError
from studies.examples import toy_study
from studies.plots import file_stem, plot_study
from tests.plot_checks import overlapping_texts
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
    from studies.plots import TOP_PARTS, plot_hypervolume, plot_pareto, plot_weights

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
        plot_weights(study, tmp_path / "weights.png"),
        plot_pareto(study, tmp_path / "pareto.png"),
        plot_hypervolume(study, tmp_path / "hv.png"),
    ]
    sizes = [imread(p).shape[:2] for p in paths]  # (height, width) in pixels
    assert all(w <= 2000 and h <= 1000 for h, w in sizes), sizes
    assert sizes[0][0] > 0.3 * 110 * (TOP_PARTS + 1)  # one row per bar drawn


def _demo_like(url: str) -> object:
    """A study shaped like the main job's (issue 52's picture): a tight Pareto front with
    coinciding trials, and one outlier that squeezed it into a corner."""
    import numpy as np

    from spaces import Float, Simplex, Space
    from studies import Study

    space = Space({"x": Float(0.0, 1.0), "priors": Simplex([f"rule_{i}" for i in range(20)])})
    study = Study("rewrite-demo", space, {"anytime_hv": "maximize", "final_hv": "maximize"},
                  storage=url, settings=fast_settings(100))  # fmt: skip
    rng = np.random.default_rng(0)
    values = [(0.54, 0.795), (0.84, 1.009), (0.872, 1.027), (0.965, 1.059)]
    values += [(1.01 + 0.003 * i, 1.052 - 0.0004 * i) for i in range(6)] + [(1.015, 1.0515)] * 3
    values += [(0.98 + rng.uniform(0, 0.03), 1.04 + rng.uniform(0, 0.012)) for _ in range(15)]
    for a, b in values:
        study.tell(study.ask(), {"anytime_hv": a, "final_hv": b})
    return study


def test_the_plots_have_no_overlapping_text_and_the_axes_fit_the_front(tmp_path: Path) -> None:
    """Issue 52: the Pareto plot's labels overlapped at the front and one outlier stretched the
    axis so that the front was a cluster in a corner."""
    import matplotlib.pyplot as plt

    from studies.plots import hypervolume_figure, pareto_figure, weights_figure

    study = _demo_like(f"sqlite:///{tmp_path / 's.db'}")
    fig = pareto_figure(study)
    ax = fig.axes[0]
    x0, x1 = ax.get_xlim()
    assert x0 > 0.85 and x1 < 1.04  # the outliers at 0.54 and 0.84 do not set the axis
    labels = [t.get_text() for t in ax.texts]
    assert "10, 11, 12" in labels or any("10, 11" in s for s in labels)  # coinciding: one label
    assert any("beyond the axes" in t.get_text() for t in fig.legends + ax.get_legend().texts)
    for figure in (fig, hypervolume_figure(study), weights_figure(study)):
        assert overlapping_texts(figure) == [], overlapping_texts(figure)
        plt.close(figure)


def test_a_generic_study_names_its_weights_in_generic_words_an_application_in_its_own(
    tmp_path: Path,
) -> None:
    """The framework's words for a Simplex (``weight``, ``parts``, ``NAME-weights.png``) unless the
    application passes its own (`studies.weights.WeightsOf`)."""
    import matplotlib.pyplot as plt

    from spaces import Simplex, Space
    from studies import Study
    from studies.plots import weights_figure
    from studies.weights import WeightsOf, read_simplex

    space = Space({"w": Simplex([f"p{i:02d}" for i in range(20)])})
    study = Study("gen", space, {"f": "minimize"}, storage=f"sqlite:///{tmp_path / 's.db'}")
    for _ in range(3):
        trial = study.ask()
        study.tell(trial, {"f": trial.config["w"]["p00"]})
    fig = weights_figure(study)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "weight"
    assert "5 other parts (sum)" in [t.get_text() for t in ax.get_yticklabels()]
    plt.close(fig)
    names = [p.name for p in plot_study(study, tmp_path / "a")]
    assert names == ["gen-pareto.png", "gen-hypervolume.png", "gen-weights.png"]
    words = WeightsOf(read_simplex, part="rule", quantity="firing prior", file_suffix="priors")
    fig = weights_figure(study, weights_of=words)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "firing prior"
    assert "5 other rules (sum)" in [t.get_text() for t in ax.get_yticklabels()]
    plt.close(fig)
    assert plot_study(study, tmp_path / "b", weights_of=words)[-1].name == "gen-priors.png"
