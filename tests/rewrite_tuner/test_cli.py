"""`tuner demo` on real searches (one small workload, a few trials): it says how long it will
take before it runs and prints where the time went at the end."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rewrite_tuner.cli import app

_SPLIT = re.compile(
    r"time split \(wall clock\): calibration (\d+) s \+ proposals (\d+) s \+ evaluations (\d+) s "
    r"\+ validation (\d+) s = (\d+) s"
)


def test_the_demo_estimates_its_time_and_prints_the_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    args = ["demo", "-s", f"sqlite:///{tmp_path / 'd.db'}", "-w", "1", "--steps", "20"]
    args += ["--seeds", "1", "--workloads", "gpt2", "--held-out", "", "--no-progress"]
    args += ["--export-anyway"]
    result = CliRunner().invoke(app, [*args, "-n", "3"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    # the exported trial (the validated pick) is the one the printed plot command draws
    exported = json.loads((tmp_path / "demo-priors.json").read_text())["provenance"]["trial"]
    plot = re.search(r"tuner plot (rewrite-demo --storage \S+ --trial (\d+))", text)
    assert plot and int(plot.group(2)) == exported, text
    drawn = CliRunner().invoke(app, ["plot", *plot.group(1).split(), "-o", str(tmp_path)])
    assert drawn.exit_code == 0, drawn.output
    assert (tmp_path / "rewrite-demo-priors.png").is_file(), drawn.output
    before, calibrating, _ = text.partition("calibrating:")
    assert calibrating, text
    # before anything runs: the whole job, per phase, said to be an estimate
    assert re.search(
        r"estimate: about \d+ (s|min) \(calibration ~\d+ (s|min), proposals ~\d+ (s|min), "
        r"evaluations ~\d+ (s|min), validation ~\d+ (s|min)\), from a 2-core machine's pace",
        before,
    ), before
    assert re.search(r"the rest: about \d+ (s|min) \(.*\), from the calibration's pace here", text)
    assert "tuning took" in text
    split = _SPLIT.search(text)
    assert split, text
    *phases, total = (int(x) for x in split.groups())
    assert sum(phases) == total
    assert re.search(r"proposals: \d+ proposals, p50 [\d.]+ s, max [\d.]+ s", text), text
    assert re.search(r"evaluations: 3 trials, \d+ s of worker time on 1 workers", text), text
    # the run record the dashboard reads: the split as printed, the report, the export
    record = json.loads((tmp_path / "rewrite-demo-run.json").read_text())
    assert [round(v) for v in record["split"].values()] == phases
    assert record["calibration"] == record["split"]["calibration"] > 0
    assert record["exported"]["trial"] == exported and record["report"]["candidates"]
    from rewrite_tuner.dashboard import HOOKS
    from studies.dashboard.readonly import ReadOnlyStorage
    from studies.dashboard.snapshot import Watcher
    from studies.dashboard.views import build

    snap = Watcher(ReadOnlyStorage(f"sqlite:///{tmp_path / 'd.db'}"), "rewrite-demo").snapshot()
    panels = {p["id"]: p for p in build(snap, HOOKS)["panels"]}
    assert panels["validation"]["numbers"]["candidates"] == record["report"]["candidates"]
    assert panels["priors"]["numbers"]["exported"] == exported
    assert panels["time"]["numbers"]["split"] == pytest.approx(record["split"], abs=1e-3)

    # resumed: no estimate of a whole new run; the rest at the stored trials' pace
    result = CliRunner().invoke(app, [*args, "-n", "4"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "estimate:" not in text and "calibrating:" not in text
    assert re.search(r"the rest: about .*, from the pace of the 3 trials this study ran", text)
    split = _SPLIT.search(text)
    assert split and split.group(1) == "0", text
    *phases, total = (int(x) for x in split.groups())
    assert sum(phases) == total
    resumed = json.loads((tmp_path / "rewrite-demo-run.json").read_text())
    assert resumed["calibration"] == record["calibration"]  # the first run's, kept
