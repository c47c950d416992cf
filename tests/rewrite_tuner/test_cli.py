"""`tuner demo` on real searches (one small workload, a few trials): it says how long it will
take before it runs and prints where the time went at the end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rewrite_tuner.cli import app


def test_the_demo_estimates_its_time_and_prints_the_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["demo", "-s", f"sqlite:///{tmp_path / 'd.db'}", "-n", "3", "-w", "1", "--steps", "20"]
    args += ["--seeds", "1", "--workloads", "gpt2", "--held-out", "", "--no-progress"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "takes about 4 minutes on an idle 2-core machine" in text
    assert re.search(r"calibrated in \d+ s; the rest should take about \d+ min", text)
    assert "tuning took" in text and "proposing" in text
    split = re.search(
        r"time: calibration (\d+) s, tuning (\d+) s \(proposing (\d+) s, evaluating (\d+) s of "
        r"worker time on 1 workers\), validation (\d+) s; total (\d+) s",
        text,
    )
    assert split, text
    cal, tuning, proposing, _, validation, total = (int(x) for x in split.groups())
    assert proposing <= tuning + 1 and abs(cal + tuning + validation - total) <= 2
