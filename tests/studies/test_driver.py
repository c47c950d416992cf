"""The optimize loop's timeout backstop (issue 36): a trial that does not stop at its timeout is
FAILED, its worker killed and reaped, so `optimize` returns and the interpreter exits; on an
executor that cannot stop it, it keeps its slot, so no more than ``n_workers`` trials run."""

from __future__ import annotations

import multiprocessing
import os
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import studies.driver as driver
from studies.examples import toy_study
from tests.studies import helpers
from tests.studies.helpers import fast_settings

ROOT = Path(__file__).resolve().parents[2]

HUNG = textwrap.dedent(
    """
    import sys, time
    import studies.driver as driver
    from studies.examples import toy_study
    from tests.studies import helpers
    from tests.studies.helpers import fast_settings

    driver._TIMEOUT_SLACK, driver._KILL_GRACE = 0.3, 0.5
    study = toy_study("hung", sys.argv[1], settings=fast_settings())
    study.evaluate = getattr(helpers, sys.argv[2])
    start = time.monotonic()
    study.optimize(2, n_workers=2, timeout=0.5, progress=False)
    print("returned after", round(time.monotonic() - start, 1), "s")
    for t in study.trials:
        print(t.number, t.state, t.error)
    """
)


@pytest.mark.parametrize("evaluate", ["blocks_alarm", "ignores_signals"])
def test_hung_worker_is_killed_and_the_interpreter_exits(tmp_path: Path, evaluate: str) -> None:
    """Before: the trials were FAILED and optimize returned, but the interpreter hung at exit
    joining the worker nobody had killed."""
    script = tmp_path / "hung.py"
    script.write_text(HUNG)
    url = f"sqlite:///{tmp_path / 'hung.db'}"
    try:
        done = subprocess.run(
            [sys.executable, str(script), url, evaluate],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
    except subprocess.TimeoutExpired as err:
        pytest.fail(f"the interpreter did not exit: {err.stdout!r} {err.stderr!r}")
    assert done.returncode == 0, done.stderr
    assert "returned after" in done.stdout
    lines = [ln for ln in done.stdout.splitlines() if ln[:1].isdigit()]
    assert len(lines) == 2 and all("FAILED TimeoutError" in ln for ln in lines), done.stdout
    assert "did not stop" in done.stdout and "killed" in done.stderr


def test_backstop_keeps_the_slot_of_a_trial_it_cannot_stop(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the backstop freed the slot of a trial still running on the executor, so a second
    trial started beside it although n_workers=1."""
    monkeypatch.setattr(driver, "_TIMEOUT_SLACK", 0.0)
    monkeypatch.setattr(helpers.Concurrency, "now", 0)
    monkeypatch.setattr(helpers.Concurrency, "peak", 0)
    monkeypatch.setattr(helpers.Concurrency, "calls", 0)
    study = toy_study("slots", sqlite_url, settings=fast_settings())
    study.evaluate = helpers.first_trial_hangs
    pool = ThreadPoolExecutor(4)
    try:
        start = time.monotonic()
        study.optimize(3, n_workers=1, executor=pool, timeout=0.2, progress=False)
        took = time.monotonic() - start
    finally:
        pool.shutdown(wait=True)
    trials = study.trials
    assert helpers.Concurrency.peak == 1
    assert trials[0].state == "FAILED" and "TimeoutError" in (trials[0].error or "")
    assert [t.state for t in trials[1:]] == ["COMPLETE", "COMPLETE"]
    assert took >= 1.4  # the next trial waited for the hung one's slot


@pytest.mark.skipif("fork" not in multiprocessing.get_all_start_methods(), reason="needs fork")
def test_the_default_pool_forks_without_setting_the_global_start_method() -> None:
    before = multiprocessing.get_start_method(allow_none=True)
    pool = driver._process_pool(2)
    try:
        assert pool._mp_context.get_start_method() == "fork"
    finally:
        pool.shutdown()
    assert multiprocessing.get_start_method(allow_none=True) == before


def test_the_pool_is_closed_when_optimize_returns(tmp_path: Path) -> None:
    """No pool manager thread outlives `optimize`: one still closing its pool when the program
    exits right after made Python 3.11 print ``OSError: [Errno 9] Bad file descriptor`` at exit
    (its exit handler wakes manager threads without their lock)."""
    import threading
    from concurrent.futures.process import _ExecutorManagerThread

    study = toy_study("closed", f"sqlite:///{tmp_path / 's.db'}", settings=fast_settings())
    study.optimize(3, n_workers=2, progress=False)
    alive = [t for t in threading.enumerate() if isinstance(t, _ExecutorManagerThread)]
    assert not [t for t in alive if t.is_alive()]


def test_a_trial_far_past_the_others_is_reported_while_it_runs(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 52: an evaluate that never returns, with no trial timeout (the default), held its
    worker forever with no word."""
    monkeypatch.setattr(driver, "SLOW_FLOOR", 0.4)
    monkeypatch.setattr(helpers.Concurrency, "calls", 0)
    study = toy_study("slow", sqlite_url, settings=fast_settings(n_initial=8))  # no model fit
    study.evaluate = helpers.fourth_trial_sleeps
    pool = ThreadPoolExecutor(1)
    try:
        with caplog.at_level("WARNING", logger="studies.driver"):
            study.optimize(5, n_workers=1, executor=pool, progress=False)
    finally:
        pool.shutdown(wait=True)
    slow = [r.getMessage() for r in caplog.records if "the median of the" in r.getMessage()]
    assert len(slow) == 1, caplog.messages
    assert slow[0].startswith("Trial 3 of 'slow' has run") and "timeout=SECONDS" in slow[0]
    assert "tuner resume slow --timeout SECONDS" in slow[0]


def test_the_worker_count_is_capped_by_the_machine(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 52: optimize(2, n_workers=10**6) started worker processes until the kernel's
    out-of-memory killer fired."""
    cpus = os.cpu_count() or 1
    assert driver.machine_workers(10**6, 10**9) == driver.WORKERS_PER_CPU * cpus
    assert driver.machine_workers(10**6, 2) == 2 and driver.machine_workers(3, 100) == 3
    sizes: list[int] = []
    real = driver._process_pool

    def recorded(n: int) -> object:
        sizes.append(n)
        assert n <= driver.WORKERS_PER_CPU * cpus  # never fork a million processes
        return real(n)

    monkeypatch.setattr(driver, "_process_pool", recorded)
    study = toy_study("many", sqlite_url, settings=fast_settings())
    with caplog.at_level("WARNING", logger="studies.driver"):
        stats = study.optimize(2, n_workers=10**6, progress=False)
    assert sizes == [2] and stats.n_workers == 2
    assert any("n_workers=1000000: this machine runs at most" in m for m in caplog.messages)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_progress_bar_keeps_its_counts_and_times_on_a_narrow_terminal(width: int) -> None:
    """Issue 52: at 80 columns the progress bar cut the elapsed time."""
    import io

    from rich.console import Console
    from rich.progress import Progress

    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None)
    bar = Progress(*driver.progress_columns(), console=console, auto_refresh=False, expand=True)
    best = "best anytime_hv=1.0152 final_hv=1.0467 effort=0.8123 latency=0.4711"
    task = bar.add_task("rewrite-demo", total=30, best=best)
    bar.update(task, completed=12)
    console.print(bar.make_tasks_table(bar.tasks))
    line = buf.getvalue().rstrip("\n")
    assert len(line) <= width and "12/30" in line and "0:00:00 eta -:--:--" in line, line
