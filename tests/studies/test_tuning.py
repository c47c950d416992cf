"""Tests for how a study picks its surrogate from the registry (`studies.tuning`)."""

from __future__ import annotations

import pytest

from studies.errors import StudySettingsError
from studies.settings import StudySettings
from tuner import FlatSurrogate
from tuner.kinds import SurrogateRequest, register_surrogate, surrogate_kinds


def test_structure_registers_its_kind_and_a_study_builds_it_with_its_settings() -> None:
    from studies.tuning import make_surrogate

    settings = StudySettings(
        surrogate="structured", structure=[["x0", "m"], ["m", "o"]], ignore_metrics=["time.*"]
    )
    assert "structured" in surrogate_kinds()  # registered when `structure` was imported
    surrogate = make_surrogate("structured", settings)
    assert type(surrogate).__name__ == "StructuredSurrogate"
    assert surrogate.config.ignore_metrics == ("time.*",)
    assert surrogate._edges == (("x0", "m"), ("m", "o"))
    with pytest.raises(StudySettingsError, match=r"surrogate must be one of \['auto', "):
        StudySettings(surrogate="nope")


def test_a_kind_registered_by_a_script_is_a_study_setting() -> None:
    from studies.tuning import make_surrogate

    seen: list[SurrogateRequest] = []

    def factory(request: SurrogateRequest) -> FlatSurrogate:
        seen.append(request)
        return FlatSurrogate(request.fit_options())

    register_surrogate("test-scripted", factory)
    settings = StudySettings(surrogate="test-scripted", tuner_options={"fit_maxiter": 7})
    surrogate = make_surrogate(settings.surrogate, settings)
    assert isinstance(surrogate, FlatSurrogate) and seen[0].fit_maxiter == 7


def test_a_stored_study_naming_a_kind_moved_out_of_the_library_opens_and_says_how_to_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import studies.tuning as tuning

    monkeypatch.setitem(tuning.MOVED, "test-moved", "benchmarks._surrogate_variants")
    settings = StudySettings.from_dict({"surrogate": "test-moved"})  # it opens
    with pytest.raises(StudySettingsError, match=r"test-moved.*benchmarks._surrogate_variants"):
        tuning.make_surrogate(settings.surrogate, settings)


def test_stored_tuner_options_naming_the_removed_local_fraction() -> None:
    kept = StudySettings.from_dict({"tuner_options": {"local_fraction": 0.0}})
    assert kept.options() == StudySettings().options()  # at today's value: it runs as today
    with pytest.raises(StudySettingsError, match="local_fraction was removed"):
        StudySettings.from_dict({"tuner_options": {"local_fraction": 0.5}})
