"""How rewrite_v3.db / rewrite_v3.json were made: a built-in rewrite study written at commit 5c35ffa
(schema format_version 3), when its context had no ``format_version`` of its own (version 1: the
flat dict of what a trial reads: workloads, device, seeds, race, objectives, calibration). Do not
re-run to "fix" a failing golden test: the files are frozen (re-running with a later
rewrite-tuner would write the new context, which is not what they test).

    PYTHONPATH=. .venv/bin/python tests/data/studies/make_rewrite_v3.py
"""

from __future__ import annotations

import json
from pathlib import Path

from rewrite_tuner.study import rewrite_study
from studies import StudySettings

HERE = Path(__file__).resolve().parent


def main() -> None:
    url = f"sqlite:///{HERE / 'rewrite_v3.db'}"
    settings = StudySettings(
        n_initial=3,
        tuner_options={"num_restarts": 1, "raw_samples": 16, "maxiter": 5, "mc_samples": 16},
    )
    study = rewrite_study(
        ("gpt2",),
        budget=40,
        seeds=2,
        calibration_seeds=2,
        storage=url,
        name="context-v1",
        settings=settings,
    )
    study.optimize(3, progress=False)
    doc = {
        "trials": [{"state": str(t.state), "values": t.values} for t in study.trials],
        "parameters": sorted(study.space.params),
        "context": study.context,
    }
    (HERE / "rewrite_v3.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
