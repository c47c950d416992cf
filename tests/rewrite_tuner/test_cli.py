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

    # done: a third run says so and reuses the stored validation (issue 52: it repeated it)
    result = CliRunner().invoke(app, [*args, "-n", "4"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "rewrite-demo is done: 4 of 4 trials finished" in text
    assert "the validation is not repeated" in text and "checking the defaults" not in text
    assert "Tuned on gpt2." in text
    split = _SPLIT.search(text)
    assert split and split.group(1) == "0" and split.group(2) == "0", text

    # tuner export picks what the demo validated, and says so (issue 52: another trial, no word)
    from rewrite_tuner.transfer import stored_validation
    from studies.study import Study

    study = Study.load("rewrite-demo", f"sqlite:///{tmp_path / 'd.db'}")
    rec = stored_validation(study, current=True)
    assert rec is not None
    out = tmp_path / "exported.json"
    result = CliRunner().invoke(
        app, ["export", "rewrite-demo", "-s", f"sqlite:///{tmp_path / 'd.db'}", "-o", str(out)]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    chosen = rec["report"]["chosen"]
    if chosen is not None:
        assert f"picking trial {chosen}, which beat the defaults" in text
        assert json.loads(out.read_text())["provenance"]["trial"] == chosen
    else:
        assert "no trial beat the defaults when these trials were validated" in text


def test_a_held_out_loss_is_a_caveat() -> None:
    """Issue 52: a small demo exported priors that lost on the held-out model (final HV 0.765
    against 1.080) with no caveat."""
    from rewrite_tuner.transfer import TunedReport

    def iv(value: float, low: float, high: float) -> dict:
        return {"value": value, "low": low, "high": high}

    row = {
        "final_hv": {
            "candidate": iv(0.765, 0.7, 0.8),
            "reference": iv(1.080, 1.0, 1.1),
            "difference": iv(-0.315, -0.4, -0.2),
        },
        "reach": {"candidate": iv(151, 151, 151), "reference": iv(40, 40, 40), "ratio": 3.78},
    }
    held = {"seeds": [1, 2], "budget": 30, "per_workload": {"vit": row}, "overall": {}}
    doc = {
        "objectives": {"anytime_hv": "maximize"},
        "tuned_on": ["gpt2"],
        "held_out": ["vit"],
        "budget": 30,
        "candidates": [{"trial": 2, "beats": True, "training": {}}],
        "chosen": 2,
        "training": None,
        "held_out_comparison": held,
    }
    report = TunedReport.from_dict(doc)
    caveat = report.held_out_caveat()
    assert caveat is not None and "vit (final HV 0.765 against 1.080" in caveat
    assert "may not transfer" in caveat
    row["final_hv"]["difference"] = iv(0.01, -0.01, 0.03)
    row["reach"]["ratio"] = 0.5
    assert TunedReport.from_dict(doc).held_out_caveat() is None
    assert TunedReport.from_dict(report.to_dict()).to_dict() == report.to_dict()


def test_a_study_run_again_at_the_same_path_is_validated_afresh(tmp_path: Path) -> None:
    """A fresh clone's ``make run`` (same path, same seeded trials as a run hours before, older
    code) reused that run's stored validation: the key now holds the trials' creation times."""
    from rewrite_tuner.transfer import _record_key
    from spaces import Float, Space
    from studies.study import Study

    def one_run() -> dict:
        url = f"sqlite:///{tmp_path / 'again.db'}"
        study = Study(
            "again", Space({"x": Float(0.0, 1.0)}), {"y": "minimize"}, storage=url, seed=0
        )
        trial = study.ask()
        study.tell(trial, {"y": trial.config["x"]})
        key = _record_key(study, ["vit"])
        assert _record_key(Study.load("again", url), ["vit"]) == key  # the same study: reused
        (tmp_path / "again.db").unlink()
        return key

    first, second = one_run(), one_run()
    assert first["held_out"] == second["held_out"] and first["trials"] != second["trials"]
