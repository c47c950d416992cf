"""The dashboard server over HTTP, and ``tuner dashboard`` / ``tuner report``: the views and
optuna-dashboard answer; nothing writes; bad input gets a clear error or a clear empty state,
never a traceback page."""

from __future__ import annotations

import hashlib
import json
import shutil
import socket
import sqlite3
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from rewrite_tuner.cli import app
from studies.dashboard import Hooks
from studies.dashboard.server import Dashboard, DashboardError, make

DATA = Path(__file__).resolve().parents[2] / "data" / "studies"
runner = CliRunner()


def _get(url: str, method: str = "GET", body: bytes | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req, timeout=60) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


@pytest.fixture
def served(study_url: str) -> Iterator[tuple[str, Dashboard]]:
    dash = Dashboard(study_url, None, Hooks())
    server = make(dash, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", dash
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        dash.close()


def _json(url: str) -> Any:
    status, text = _get(url)
    assert status == 200, text
    return json.loads(text)


def test_the_views_and_optuna_dashboard_answer(
    served: tuple[str, Dashboard], tmp_path: Path
) -> None:
    base, _ = served
    before = hashlib.sha256((tmp_path / "study.db").read_bytes()).hexdigest()
    status, index = _get(base + "/")  # every study: the list
    assert status == 200 and "toy" in index
    views = _json(base + "/rt/study/toy/api/views")
    assert views["numbers"]["trials"] == 13 and views["numbers"]["failed"] == 1
    assert _json(base + f"/rt/study/toy/api/views?since={views['version']}")["unchanged"]
    assert "boom at population 20" in _json(base + "/rt/study/toy/api/trial/4")["html"]
    assert "no trial 99" in _json(base + "/rt/study/toy/api/trial/99")["error"]
    status, page = _get(base + "/rt/study/toy/")
    assert status == 200 and "/rt/static/plotly.min.js" in page
    status, js = _get(base + "/rt/static/plotly.min.js")
    assert status == 200 and "plotly.js" in js[:400]
    studies = _json(base + "/api/studies")["study_summaries"]
    assert [s["study_name"] for s in studies] == ["toy"]
    detail = _json(base + f"/api/studies/{studies[0]['study_id']}")
    assert len(detail["trials"]) == 13
    assert "rt/study/toy/#structure" in detail["note"]["body"]
    figures = {g["id"]: json.loads(g["graph_object"]) for g in detail["plotly_graph_objects"]}
    assert sorted(figures) == ["hypervolume", "simplex-weights", "time-split"]  # generic words
    assert len(figures["hypervolume"]["data"][0]["y"]) == 11  # the completed trials
    failed = next(t for t in detail["trials"] if t["number"] == 4)
    assert failed["state"] == "Fail" and "boom at population 20" in failed["note"]["body"]
    assert _get(base + "/dashboard")[0] == 200
    status, csv = _get(base + f"/csv/{studies[0]['study_id']}")
    assert status == 200 and "Param priors.fuse" in csv.splitlines()[0]
    assert len(csv.strip().splitlines()) == 14  # a header and the 13 trials
    assert hashlib.sha256((tmp_path / "study.db").read_bytes()).hexdigest() == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/api/studies"),
        ("PUT", "/api/studies/1/note"),
        ("DELETE", "/api/studies/1"),
        ("POST", "/api/trials/100000012/tell"),
        ("POST", "/api/studies/1/rename"),
    ],
)
def test_every_write_is_refused(served: tuple[str, Dashboard], method: str, path: str) -> None:
    base, dash = served
    body = json.dumps({"study_name": "x", "directions": ["minimize"], "state": "Fail"}).encode()
    status, text = _get(base + path, method, body)
    assert status == 405 and "read-only" in json.loads(text)["reason"]
    assert len(dash.snapshot("toy").trials) == 13


def test_bad_requests_and_storages_get_a_message_not_a_traceback(
    served: tuple[str, Dashboard], tmp_path: Path
) -> None:
    base, _ = served
    missing = _json(base + "/rt/study/later/api/views")
    assert missing["state"] == "waiting" and "No study named 'later'" in missing["error"]
    status, text = _get(base + "/no/such/page")
    assert status == 404 and "Traceback" not in text
    # the database is replaced by a foreign file while it is watched
    (tmp_path / "study.db").unlink()
    for side in ("study.db-wal", "study.db-shm"):
        (tmp_path / side).unlink(missing_ok=True)
    with sqlite3.connect(tmp_path / "study.db") as c:
        c.execute("CREATE TABLE notes (x)")
    gone = _json(base + "/rt/study/toy/api/views?since=-1")
    assert gone["state"] == "error" and "Traceback" not in gone["error"]


def test_a_port_in_use_is_a_clear_error(study_url: str, tmp_path: Path) -> None:
    later = f"sqlite:///{tmp_path / 'later.db'}"  # a study not started yet: the page waits
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(DashboardError, match=f"Port {port} on 127.0.0.1 is in use.*--port 0"):
            make(Dashboard(study_url), "127.0.0.1", port)
        result = runner.invoke(app, ["dashboard", "toy", "-s", later, "--port", str(port)])
    assert result.exit_code == 1
    text = " ".join(result.output.split())
    assert "waiting: The SQLite database" in text and "does not exist" in text
    assert f"Port {port} on 127.0.0.1 is in use" in text and "Traceback" not in text
    assert not (tmp_path / "later.db").exists()


def test_tuner_dashboard_refuses_what_waiting_cannot_fix(tmp_path: Path) -> None:
    newer = tmp_path / "newer.db"
    shutil.copy(DATA / "study_v3.db", newer)
    with sqlite3.connect(newer) as c:
        c.execute("UPDATE format_version SET version = 99")
    result = runner.invoke(app, ["dashboard", "golden", "-s", f"sqlite:///{newer}", "-p", "0"])
    assert result.exit_code == 1
    assert "format_version 99" in result.output and "Traceback" not in result.output


def test_tuner_report_writes_one_file(study_url: str, tmp_path: Path) -> None:
    out = tmp_path / "toy.html"
    result = runner.invoke(
        app, ["report", "toy", "-s", study_url, "--out", str(out), "--no-structure"]
    )
    assert result.exit_code == 0, result.output
    assert "wrote" in result.output and "13 trials" in result.output
    assert "1 trials are still RUNNING" in result.output
    assert out.stat().st_size > 4_000_000  # plotly.js is inside
    missing = runner.invoke(app, ["report", "nope", "-s", study_url, "--no-structure"])
    assert missing.exit_code == 1 and "No study named 'nope'" in missing.output
    gone = runner.invoke(app, ["report", "toy", "-s", f"sqlite:///{tmp_path / 'x.db'}"])
    assert gone.exit_code == 1 and "does not exist" in gone.output
    assert not (tmp_path / "x.db").exists()
