"""How study_v3.db / study_v3.json were made (schema format_version 3: ``studies.context``; as
version 2, with a context and a reservation left behind). Do not re-run to "fix" a failing golden
test: the files are frozen; a new schema version gets its own golden pair.

    PYTHONPATH=. .venv/bin/python tests/data/studies/make_study_v3.py
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from sqlalchemy import select

from studies import Storage, Study, StudySettings, schema
from studies.examples import toy_space
from tests.studies.test_context import CONTEXT, OBJECTIVES, scaled

HERE = Path(__file__).resolve().parent


def main() -> None:
    url = f"sqlite:///{HERE / 'study_v3.db'}"
    settings = StudySettings(
        heartbeat_interval=1.0,
        grace_period=5.0,
        n_initial=6,
        tuner_options={"num_restarts": 1, "raw_samples": 16, "maxiter": 5, "mc_samples": 16},
    )
    study = Study(
        "golden",
        toy_space(),
        OBJECTIVES,
        scaled,
        constraints=["search_seconds <= 5"],
        storage=url,
        seed=3,
        settings=settings,
        context=CONTEXT,
    )
    study.optimize(5, progress=False)  # trials 0-4 COMPLETE, positions 0-4
    study.tell(study.ask(), error="RuntimeError: golden failure")  # trial 5 FAILED, position 5
    store = study.storage
    with store.write() as conn:  # position 6: reserved by a process on a host that went away
        store.reserve(conn, study.id, "gone:1:x", 1)
    with store.read() as conn:
        query = select(schema.trials.c.position).order_by(schema.trials.c.number)
        positions = list(conn.execute(query).scalars())
    record = dataclasses.asdict(Storage(url).get_study("golden"))
    record.pop("id")
    doc = {
        "study": record,
        "trials": [dataclasses.asdict(t) for t in study.trials],
        "positions": positions,
        "reservations": [dataclasses.asdict(r) for r in store.reservations(study.id)],
    }
    (HERE / "study_v3.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
