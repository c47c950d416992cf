"""The dashboard and the report in a real browser (headless Chromium, `browser`): every view
renders with the study's numbers, a trial written by another process appears without a reload, a
failed trial shows its error, a click on a Pareto point opens its trial, 2,000 trials stay usable,
and the report opens offline from a single file.

Set ``RT_DASHBOARD_SCREENSHOTS=folder`` to keep a screenshot of each view there."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from studies.dashboard import Hooks
from studies.dashboard.report import write_report
from studies.dashboard.server import Dashboard, make

from . import browser
from .conftest import drive_elsewhere, write_trials

pytestmark = pytest.mark.skipif(browser.missing() is not None, reason=str(browser.missing()))


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with browser.chromium() as driver:
        yield driver


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """A dashboard over a SQLite study ``toy`` (12 trials, trial 4 FAILED, 1 RUNNING): its page
    URL and the storage URL."""
    folder = tmp_path_factory.mktemp("live")
    url = f"sqlite:///{folder / 'study.db'}"
    write_trials(url, "toy", 12, failed={4: "RuntimeError: boom at population 20"}, running=1)
    dash = Dashboard(url, "toy", Hooks())
    server = make(dash, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", url
    server.shutdown()
    thread.join()
    server.server_close()
    dash.close()


def _shot(driver: Any, name: str) -> None:
    folder = os.environ.get("RT_DASHBOARD_SCREENSHOTS")
    if folder:
        browser.screenshot(driver, Path(folder) / f"test-{name}.png")


def _numbers(driver: Any) -> dict[str, Any]:
    return driver.execute_script("return window.RT_STATE")  # type: ignore[no-any-return]


def _card(driver: Any, key: str) -> str:
    return browser.text(driver, f'#view-overview [data-num="{key}"]')


def test_every_view_renders_with_the_study_numbers(chrome: Any, live: tuple[str, str]) -> None:
    base, url = live
    from studies.study import Study

    study = Study.load("toy", url)
    trials = study.trials
    chrome.get(base + "/")
    browser.wait(chrome, "document.body.dataset.state === 'ok'")
    n = _numbers(chrome)
    assert (_card(chrome, "trials"), _card(chrome, "failed"), _card(chrome, "running")) == (
        "13",
        "1",
        "1",
    )
    for k in study.objectives:
        best = min(t.values[k] for t in trials if t.state == "COMPLETE")
        assert _card(chrome, f"best.{k}").split()[0] == f"{best:.4g}"
    _shot(chrome, "overview")

    browser.open_view(chrome, "history")
    hv_points = chrome.execute_script("return document.getElementById('hist-hv').data[0].y.length")
    assert hv_points == 11
    browser.open_view(chrome, "pareto")
    drawn = chrome.execute_script(
        "return document.querySelectorAll('#pareto-0 .scatterlayer .trace:nth-child(2) .point').length"
    )
    assert drawn == len(n["pareto"]) > 0
    _shot(chrome, "pareto")
    browser.open_view(chrome, "parallel")
    assert chrome.find_elements("css selector", "#parallel .parcoords")
    browser.open_view(chrome, "priors")
    bars = chrome.execute_script(
        "return document.querySelectorAll('#priors-0 .bars .point').length"
    )
    assert bars == 4  # the toy's 4 rules
    browser.open_view(chrome, "structure")
    assert "Surrogate for the next proposal: structured" in browser.text(chrome, "#view-structure")
    browser.open_view(chrome, "running")
    assert "#12" in browser.text(chrome, "#view-running") and "host:100:driver" in browser.text(
        chrome, "#view-running"
    )
    browser.open_view(chrome, "failures")
    assert "RuntimeError: boom at population 20" in browser.text(chrome, "#view-failures")
    _shot(chrome, "failures")
    browser.open_view(chrome, "time")
    assert "proposals" in browser.text(chrome, "#view-time")
    browser.open_view(chrome, "trials")
    assert len(chrome.find_elements("css selector", "#view-trials table.trials tbody tr")) == 13


def test_a_click_on_a_pareto_point_opens_its_trial(chrome: Any, live: tuple[str, str]) -> None:
    from selenium.webdriver.common.action_chains import ActionChains

    base, _ = live
    chrome.get(base + "/#pareto")
    browser.wait(chrome, "document.body.dataset.state === 'ok'")
    browser.open_view(chrome, "pareto")
    point = chrome.find_elements(
        "css selector", "#pareto-0 .scatterlayer .trace:nth-child(2) .point"
    )[0]
    number = chrome.execute_script(
        "return document.getElementById('pareto-0').data[1].customdata[0]"
    )
    ActionChains(chrome).move_to_element(point).click().perform()
    browser.wait(chrome, "document.getElementById('view-trial')?.classList.contains('on')")
    assert browser.text(chrome, "#view-trial h2") == f"Trial {number}"
    assert "on the Pareto front" in browser.text(chrome, "#view-trial")
    _shot(chrome, "trial")


def test_trials_written_by_another_process_appear_without_a_reload(
    chrome: Any, live: tuple[str, str]
) -> None:
    base, url = live
    chrome.get(base + "/")
    browser.wait(chrome, "document.body.dataset.state === 'ok'")
    chrome.execute_script("window.RT_MARK = 'same page'")  # a reload would drop it
    version = int(chrome.execute_script("return document.body.dataset.version"))
    drive_elsewhere(url)
    browser.wait(chrome, "window.RT_STATE.trials === 15", timeout=60)
    assert chrome.execute_script("return window.RT_MARK") == "same page"
    assert int(chrome.execute_script("return document.body.dataset.version")) > version
    assert _card(chrome, "trials") == "15" and _card(chrome, "failed") == "2"
    browser.open_view(chrome, "failures")
    assert "ValueError: written elsewhere" in browser.text(chrome, "#view-failures")
    chrome.find_element("css selector", '#view-failures a.trial[data-trial="14"]').click()
    browser.wait(chrome, "document.getElementById('view-trial')?.classList.contains('on')")
    assert "ValueError: written elsewhere" in browser.text(chrome, "#view-trial pre.error")


def test_the_page_stays_usable_at_2000_trials(chrome: Any, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'big.db'}"
    write_trials(
        url, "big", 2000, failed={i: f"RuntimeError: failure {i}" for i in range(0, 2000, 97)}
    )
    dash = Dashboard(url, "big", Hooks())
    server = make(dash, "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1})
    thread.start()
    try:
        start = time.monotonic()
        chrome.get(f"http://127.0.0.1:{server.server_port}/")
        browser.wait(chrome, "document.body.dataset.state === 'ok'", timeout=120)
        loaded = time.monotonic() - start
        assert _card(chrome, "trials") == "2000" and _card(chrome, "failed") == "21"
        for view in ("history", "pareto", "parallel", "failures", "trials"):
            browser.open_view(chrome, view)
        rows = len(chrome.find_elements("css selector", "#view-trials table.trials tbody tr"))
        assert rows == 300  # the newest; optuna-dashboard has the full table
        chrome.find_element("css selector", '#view-trials a.trial[data-trial="1999"]').click()
        browser.wait(chrome, "document.getElementById('view-trial')?.classList.contains('on')")
        assert browser.text(chrome, "#view-trial h2") == "Trial 1999"
        print(f"2000 trials: the page was ready {loaded:.1f} s after it was opened")
    finally:
        server.shutdown()
        thread.join()
        server.server_close()
        dash.close()


def test_optuna_dashboard_shows_the_study(chrome: Any, live: tuple[str, str]) -> None:
    base, _ = live
    chrome.get(base + "/dashboard/studies/1")
    browser.wait(chrome, "document.body.innerText.includes('Pareto Front')")
    chrome.get(base + "/dashboard/studies/1/trials")
    browser.wait(chrome, "document.body.innerText.includes('priors.fuse')")
    _shot(chrome, "optuna-trials")


def test_the_report_opens_offline_from_one_file(
    chrome: Any, live: tuple[str, str], tmp_path: Path
) -> None:
    _, url = live
    alone = tmp_path / "attached"
    alone.mkdir()
    path, snap = write_report(url, "toy", alone / "toy-report.html", structure=False)
    assert [p.name for p in alone.iterdir()] == ["toy-report.html"]
    chrome.get(path.as_uri())
    browser.wait(chrome, "document.body.dataset.state === 'ok'")
    assert _card(chrome, "trials") == str(len(snap.trials))
    browser.open_view(chrome, "pareto")
    browser.open_view(chrome, "failures")
    assert "RuntimeError: boom at population 20" in browser.text(chrome, "#view-failures")
    chrome.find_element("css selector", '#view-failures a.trial[data-trial="4"]').click()
    browser.wait(chrome, "document.getElementById('view-trial')?.classList.contains('on')")
    assert "boom at population 20" in browser.text(chrome, "#view-trial pre.error")
    fetched = chrome.execute_script(
        "return performance.getEntriesByType('resource').map(e => e.name)"
    )
    assert all(not u.startswith(("http:", "https:")) for u in fetched), fetched
