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
