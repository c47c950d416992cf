"""How rewrite_v2.db / rewrite_v2.json were made: a built-in rewrite study written at commit 63ce62c
(schema format_version 2), when the study's context (workloads, seeds, calibration) rode in the
space as a ``Fixed("suite")`` parameter and in every trial's config. Do not re-run to "fix" a
failing golden test: the files are frozen (re-running with a later rewrite-tuner would write the
new layout, which is not what they test).

    PYTHONPATH=. .venv/bin/python tests/data/studies/make_rewrite_v2.py
"""

from __future__ import annotations

import json
from pathlib import Path

from rewrite_tuner.study import rewrite_study
from studies import StudySettings

HERE = Path(__file__).resolve().parent


def main() -> None:
    url = f"sqlite:///{HERE / 'rewrite_v2.db'}"
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
        name="legacy",
        settings=settings,
    )
    study.optimize(3, progress=False)
    doc = {
        "trials": [{"state": str(t.state), "values": t.values} for t in study.trials],
        "parameters": sorted(study.space.params),
        "suite": study.space.params["suite"].value,
    }
    (HERE / "rewrite_v2.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
