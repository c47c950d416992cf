"""Learning a watched study's structure without slowing the study down.

`fit_snapshot` fits the structured surrogate on a snapshot's completed trials with the study's own
settings (`studies.report.fit_structure`, what ``tuner structure`` runs) and returns what the
Structure view shows. The report calls it directly. The live dashboard runs it through
`StructureFits`: in a child process at the lowest CPU priority (``nice 19``, one torch thread),
only once the Structure view is opened, and again when more trials have completed; the page shows
the previous result meanwhile. The child reads the study read-only like the dashboard.

Run as ``python -m studies.dashboard.structure_fits NAME OUT.json`` with the storage URL in the
environment variable ``RT_DASHBOARD_STORAGE`` (not on the command line, where ``ps`` shows it).
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from studies.dashboard.snapshot import Snapshot

__all__ = ["StructureFits", "fit_snapshot"]

_ENV = "RT_DASHBOARD_STORAGE"
#: Seconds between two fits of one study at least (a study completing trials fast is refitted at
#: this pace, not at every trial).
MIN_INTERVAL = 30.0


def fit_snapshot(snap: Snapshot) -> dict[str, Any]:
    """Fit the structured surrogate on ``snap`` and return ``{"state": "done", "explain": text,
    "png": base64 PNG or None, "complete": trials fitted on, "seconds": fit time}``."""
    from structure import draw_fit, explain
    from studies.report import fit_structure
    from studies.settings import StudySettings
    from tuner.problem import Problem

    start = time.monotonic()
    complete = [t for t in snap.trials if t.state == "COMPLETE"]
    desc = fit_structure(
        snap.name,
        snap.space,
        Problem(snap.objectives, snap.constraints),
        StudySettings.from_dict(snap.record.settings),
        complete,
        snap.record.seed,
    )
    text = explain(desc)
    png = None
    with tempfile.TemporaryDirectory() as tmp:
        path = draw_fit(desc, Path(tmp) / "dag.png")
        if path is not None:
            png = base64.b64encode(path.read_bytes()).decode("ascii")
    return {
        "state": "done",
        "explain": text,
        "png": png,
        "complete": len(complete),
        "seconds": time.monotonic() - start,
    }


class StructureFits:
    """Background structure fits of the studies of one storage (module docstring).

    Args:
        url: The storage URL (with its password: the child reads the database too).
        workdir: Where the children write their results.
    """

    def __init__(self, url: str, workdir: str | os.PathLike[str]) -> None:
        self._url = url
        self._dir = Path(workdir)
        self._lock = threading.Lock()
        self._jobs: dict[str, dict[str, Any]] = {}

    def get(self, snap: Snapshot) -> dict[str, Any]:
        """The latest fit of ``snap``'s study (``state``: ``running``, ``done`` or ``error``),
        starting one when none fits its completed trials and none is running."""
        complete = sum(t.state == "COMPLETE" for t in snap.trials)
        with self._lock:
            job = self._jobs.setdefault(snap.name, {"done": None, "proc": None})
            self._collect(job)
            done, proc = job["done"], job["proc"]
            stale = done is None or done.get("complete") != complete
            recent = job.get("ended", 0.0) > time.monotonic() - MIN_INTERVAL
            if proc is None and stale and complete and not (done is not None and recent):
                self._start(job, snap.name, complete)
            if job["proc"] is not None:
                running = {"state": "running", "started": job["started"], "complete": complete}
                return done if done is not None and done.get("state") == "done" else running
            return done or {"state": "error", "error": "no completed trial yet"}

    def _start(self, job: dict[str, Any], name: str, complete: int) -> None:
        out = self._dir / f"fit-{abs(hash(name))}-{complete}.json"
        env = {**os.environ, _ENV: self._url, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        job["proc"] = subprocess.Popen(
            [sys.executable, "-m", "studies.dashboard.structure_fits", name, str(out)],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        job.update(out=out, started=time.time())

    def _collect(self, job: dict[str, Any]) -> None:
        proc = job["proc"]
        if proc is None or proc.poll() is None:
            return
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        out = job["out"]
        try:
            job["done"] = json.loads(Path(out).read_text())
        except (OSError, ValueError):
            last = err.strip().splitlines()[-1] if err.strip() else f"exit code {proc.returncode}"
            job["done"] = {"state": "error", "error": last}
        Path(out).unlink(missing_ok=True)
        job["proc"], job["ended"] = None, time.monotonic()

    def close(self) -> None:
        """Stop every running fit."""
        with self._lock:
            for job in self._jobs.values():
                if job["proc"] is not None and job["proc"].poll() is None:
                    job["proc"].kill()
                    job["proc"].wait()


def _main(argv: list[str]) -> int:
    from studies.dashboard.readonly import ReadOnlyStorage
    from studies.dashboard.snapshot import Watcher

    name, out = argv
    os.nice(19)  # the study's drivers come first
    parent = os.getppid()

    def orphaned() -> None:  # the dashboard was killed: stop too
        while os.getppid() == parent:
            time.sleep(2.0)
        os._exit(1)

    threading.Thread(target=orphaned, daemon=True).start()
    try:
        import torch

        torch.set_num_threads(1)
        snap = Watcher(ReadOnlyStorage(os.environ[_ENV]), name).snapshot()
        result = fit_snapshot(snap)
    except Exception as err:  # noqa: BLE001 - reported to the page as the fit's error
        result = {"state": "error", "error": f"{type(err).__name__}: {err}"}
    tmp = f"{out}.tmp"
    Path(tmp).write_text(json.dumps(result, default=float))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":  # pragma: no cover - run by StructureFits
    sys.exit(_main(sys.argv[1:]))
