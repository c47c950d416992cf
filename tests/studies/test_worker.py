"""`studies.worker`: pool workers stay quiet on Ctrl-C and stop the trial they run."""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from studies.worker import exit_with_parent, run_evaluate


def _pid() -> int:
    return os.getpid()


def _slow(config: dict[str, Any]) -> dict[str, float]:
    Path(config["marker"]).write_text("started")
    time.sleep(60)
    return {"x": 1.0}


@pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix", reason="POSIX signals")
def test_pool_worker_ignores_sigint_while_idle_and_stops_a_running_trial(tmp_path: Path) -> None:
    with ProcessPoolExecutor(max_workers=1, initializer=exit_with_parent) as pool:
        pid = pool.submit(_pid).result(timeout=30)
        os.kill(pid, signal.SIGINT)  # idle: ignored, the worker lives on
        time.sleep(0.3)
        assert pool.submit(_pid).result(timeout=30) == pid

        marker = tmp_path / "started"
        fut = pool.submit(run_evaluate, _slow, {"marker": str(marker)}, None)
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(pid, signal.SIGINT)  # running: the trial stops, quietly
        with pytest.raises(KeyboardInterrupt):  # not its result: `_slow` sleeps past the timeout
            fut.result(timeout=30)
        assert pool.submit(_pid).result(timeout=30) == pid  # and the worker serves on


def test_run_evaluate_in_the_driving_process_keeps_its_sigint_handler() -> None:
    before = signal.getsignal(signal.SIGINT)
    out = run_evaluate(lambda c: {"x": 1.0}, {}, None)
    assert out["ok"] and signal.getsignal(signal.SIGINT) is before
