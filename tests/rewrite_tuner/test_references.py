"""Stored evaluate references written before the rewrite study moved to `rewrite_tuner` still
resolve (`studies.references.MOVED_MODULES`), read from the golden study database."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from rewrite_tuner.study import evaluate_rewrite
from studies import Study
from studies.errors import StudyFileError
from studies.examples import toy_evaluate
from studies.loader import resolve_evaluate
from studies.references import MOVED_MODULES, evaluate_reference

DATA = Path(__file__).resolve().parents[1] / "data" / "studies"


@pytest.mark.parametrize("version", [1, 2])
def test_the_golden_database_references_resolve_old_module_paths_included(
    tmp_path: Path, version: int
) -> None:
    shutil.copy(DATA / f"study_v{version}.db", tmp_path / "golden.db")
    url = f"sqlite:///{tmp_path / 'golden.db'}"
    study = Study.load("golden", url)
    assert resolve_evaluate(study.evaluate_ref) is toy_evaluate  # as stored
    # a rewrite study stored before the move names the old module; it is never rewritten
    old = "studies.rewrite_study:evaluate_rewrite"
    study.storage.update_study(study.id, evaluate_ref=old)
    reloaded = Study.load("golden", url)
    assert reloaded.evaluate_ref == old
    assert resolve_evaluate(reloaded.evaluate_ref) is evaluate_rewrite


def test_the_alias_table_points_at_importable_modules_and_new_references_use_them() -> None:
    assert MOVED_MODULES == {"studies.rewrite_study": "rewrite_tuner.study"}
    assert evaluate_reference(evaluate_rewrite) == "rewrite_tuner.study:evaluate_rewrite"
    with pytest.raises(StudyFileError, match="no 'nope'"):
        resolve_evaluate("studies.rewrite_study:nope")
