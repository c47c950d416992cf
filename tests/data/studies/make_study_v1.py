"""How study_v1.db / study_v1.json were made (schema format_version 1). Do not re-run to "fix" a
failing golden test: the files are frozen; a new schema version gets its own golden pair.

    PYTHONPATH=. .venv/bin/python tests/data/studies/make_study_v1.py
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path

from studies import Storage, Study, StudySettings
from studies.examples import toy_evaluate, toy_space

HERE = Path(__file__).resolve().parent


def main() -> None:
    url = f"sqlite:///{HERE / 'study_v1.db'}"
    settings = StudySettings(
        heartbeat_interval=1.0,
        grace_period=5.0,
        n_initial=6,
        tuner_options={"num_restarts": 1, "raw_samples": 16, "maxiter": 5, "mc_samples": 16},
    )
    study = Study(
        "golden",
        toy_space(),
        {"latency": "minimize", "search_seconds": "minimize"},
        toy_evaluate,
        constraints=["search_seconds <= 5"],
        storage=url,
        seed=3,
        settings=settings,
    )
    study.optimize(5, progress=False)  # trials 0-4 COMPLETE
    study.tell(study.ask(), error="RuntimeError: golden failure")  # trial 5 FAILED
    with study.storage.write() as conn:  # trial 6: RUNNING on a host that went away
        study.storage.add_trial(conn, study.id, toy_space().sample(7, 3)[6], worker="gone:1:x")
    time.sleep(5.5)
    study.reap_stale()  # trial 6 FAILED (stale), trial 7 WAITING retry
    study.ask()  # trial 7 claimed by hand: RUNNING without heartbeat
    record = dataclasses.asdict(Storage(url).get_study("golden"))
    record.pop("id")
    doc = {"study": record, "trials": [dataclasses.asdict(t) for t in study.trials]}
    (HERE / "study_v1.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
