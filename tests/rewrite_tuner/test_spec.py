"""The rewrite study's spec: checked when made (before any calibration), stored as the study's
versioned context, and every stored form of the context read through one migration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rewrite.errors import SearchConfigError
from rewrite_tuner.spec import (
    CONTEXT_VERSION,
    RewriteStudySpec,
    search_params,
    study_context,
    suite_context,
)
from studies.errors import StudyError

DATA = Path(__file__).resolve().parents[1] / "data" / "studies"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"workloads": ("gpt5",)}, r"Unknown workloads \['gpt5'\]"),
        ({"workloads": ()}, "at least one workload"),
        ({"objectives": {"speed": "maximize"}}, "Unknown objectives"),
        ({"objectives": {"anytime_hv": "minimize"}}, "Unknown objectives"),
        ({"seeds": 0}, "seeds must be an int >= 1"),
        ({"seeds": 3, "calibration_seeds": 2}, "calibration_seeds must be at least"),
        ({"measure": 1}, "measure must be"),
        ({"objectives": {"measured_latency_reduction": "maximize"}}, "measure=True"),
        ({"priors": "free"}, "priors must be"),
        ({"priors": "rules", "centre": {"fuse_gelu_tanh": 1.0}}, "needs priors='family'"),
        ({"priors": "rules", "rules": ("no_such_rule",)}, "no_such_rule"),
        ({"tune": ("no_such_knob",)}, "Cannot tune 'no_such_knob'"),
        ({"constraints": ("effort <=",)}, "effort"),
    ],
)
def test_a_bad_spec_is_refused_when_made(kwargs: dict, match: str) -> None:
    with pytest.raises((StudyError, SearchConfigError), match=match):
        RewriteStudySpec(**kwargs)


def test_the_spec_round_trips_through_json_and_is_frozen() -> None:
    spec = RewriteStudySpec(
        workloads=["gpt2", "bert"],  # type: ignore[arg-type]
        budget=40,
        seeds=2,
        calibration_seeds=2,
        constraints="effort <= 1.2",  # type: ignore[arg-type]
        tune=["tau", "beta"],  # type: ignore[arg-type]
    )
    assert spec.workloads == ("gpt2", "bert") and spec.constraints == ("effort <= 1.2",)
    back = RewriteStudySpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec
    with pytest.raises(AttributeError):
        spec.budget = 60  # type: ignore[misc]
    assert spec.replace(budget=60).budget == 60
    with pytest.raises(StudyError, match="upgrade rewrite-tuner"):
        RewriteStudySpec.from_dict({**spec.to_dict(), "from_the_future": 1})


def test_every_stored_form_of_the_context_reads_the_same() -> None:
    """A version-2 context (the spec and the calibration) reads as the version-1 context of a
    study asked for with the same arguments (tests/data/studies/rewrite_v3.json, frozen), and as
    the ``Fixed("suite")`` of a study written before contexts."""
    v1 = json.loads((DATA / "rewrite_v3.json").read_text())["context"]
    spec = RewriteStudySpec(workloads=("gpt2",), budget=40, seeds=2, calibration_seeds=2)
    v2 = study_context(spec, v1["calibration"])
    assert v2["format_version"] == CONTEXT_VERSION and "workloads" not in v2
    assert suite_context(v2) == suite_context(v1) == v1
    assert suite_context(None, {"suite": v1, "tau": 0.5}) == v1  # a trial's configuration
    assert search_params({"suite": v1, "tau": 0.5}) == {"tau": 0.5}
    assert suite_context({"scale": 2.0}) is None and suite_context(None, {"tau": 0.5}) is None
    with pytest.raises(StudyError, match="newer than this rewrite-tuner reads"):
        suite_context({**v2, "format_version": CONTEXT_VERSION + 1})


def test_a_centred_spec_names_its_centre_by_a_digest() -> None:
    from rewrite.optimize import default_rules

    rules = [r.name for r in default_rules()]
    centre = {r: 1.0 / len(rules) for r in rules}
    spec = RewriteStudySpec(workloads=("gpt2",), centre=centre)
    cal = json.loads((DATA / "rewrite_v3.json").read_text())["context"]["calibration"]
    suite = suite_context(study_context(spec, cal))
    assert suite is not None and len(suite["centre"]) == 16
    assert study_context(spec, cal)["spec"]["centre"] == centre
