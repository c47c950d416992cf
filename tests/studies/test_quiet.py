"""Quiet by default: numerical libraries' warnings become DEBUG log lines."""

from __future__ import annotations

import logging
import warnings

import pytest
from gpytorch.utils.warnings import NumericalWarning

from studies.cli import _warning_to_log
from studies.quiet import numerical_warnings_to_log


def test_numerical_warnings_are_logged_and_others_pass_through(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with (
        caplog.at_level(logging.DEBUG, logger="studies.warnings"),
        warnings.catch_warnings(record=True) as outer,
    ):
        warnings.simplefilter("always")
        with numerical_warnings_to_log():
            for _ in range(3):
                warnings.warn("A not p.d., added jitter of 1e-08", NumericalWarning, stacklevel=1)
            warnings.warn("yours to act on", UserWarning, stacklevel=1)
    assert [str(w.message) for w in outer] == ["yours to act on"]
    lines = [r for r in caplog.records if "added jitter" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.DEBUG


def test_the_cli_logs_numerical_warnings_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="studies.warnings"):
        _warning_to_log("jitter", NumericalWarning, "/x/gpytorch/utils/cholesky.py", 3)
        _warning_to_log("torch note", UserWarning, "/x/site-packages/torch/functional.py", 9)
        _warning_to_log("yours", UserWarning, "/home/me/study.py", 12)
    levels = {r.getMessage().split(" (")[0]: r.levelno for r in caplog.records}
    assert levels == {
        "NumericalWarning: jitter": logging.DEBUG,
        "UserWarning: torch note": logging.DEBUG,
        "UserWarning: yours": logging.WARNING,
    }
