"""Tests for trial records (`tuner.trial`)."""

from __future__ import annotations

import json

import pytest

from tuner import InvalidArgumentError, InvalidTrialRecordError, Trial, TrialState
from tuner.trial import run_metric, split_run_metric


def test_round_trip_through_json() -> None:
    t = Trial(3, {"a": 1, "w": {"p": 0.5, "q": 0.5}}, TrialState.COMPLETE, {"f": 1.5}, {"m": 2.0})
    back = Trial.from_dict(json.loads(json.dumps(t.to_dict())))
    assert back == t
    assert back.state is TrialState.COMPLETE


def test_to_dict_is_a_copy() -> None:
    t = Trial(0, {"w": {"p": 1.0}})
    d = t.to_dict()
    d["config"]["w"]["p"] = 0.0
    assert t.config["w"]["p"] == 1.0


@pytest.mark.parametrize(
    "record",
    [
        {"config": {}, "state": "RUNNING"},
        {"id": "0", "config": {}, "state": "RUNNING"},
        {"id": 0, "config": {}, "state": "DONE"},
        {"id": True, "config": {}, "state": "RUNNING"},
        {"id": 0, "config": {}, "state": "COMPLETE", "values": {"f": "x"}},
        {"id": 0, "config": {}, "state": "COMPLETE", "values": [1.0, 2.0]},
        [1, 2],
    ],
)
def test_malformed_records(record: dict) -> None:
    with pytest.raises(InvalidTrialRecordError):
        Trial.from_dict(record)


def test_states() -> None:
    assert TrialState("FAILED") is TrialState.FAILED
    assert TrialState.COMPLETE.is_finished and not TrialState.WAITING.is_finished


def test_a_per_run_metric_name_reads_back() -> None:
    name = run_metric("rule.fuse.fired", "gpt2/0")
    assert name == "rule.fuse.fired@gpt2/0"
    assert split_run_metric(name) == ("rule.fuse.fired", "gpt2/0")
    assert split_run_metric("rule.fuse.fired") is None and split_run_metric("x@") is None
    with pytest.raises(InvalidArgumentError, match="run label"):
        run_metric("hv", "a@b")
